// Command step-budget is the standard "step-budget" prepareStep guest: after
// maxSteps steps, no tools and a request for the final answer
// (rules.StepBudget). Config: {"maxSteps": 5, "message": "..."}.
package main

import (
	"github.com/agenthost/agenthost/guests/policy/rules"
	"github.com/agenthost/agenthost/sdk/guest"
)

var cfg rules.StepBudgetConfig

func init() {
	guest.Register(guest.Guest{
		Name:    "step-budget",
		Version: "1.0.0",
		Init: func(b []byte) (err error) {
			cfg, err = rules.ParseStepBudgetConfig(b)
			return err
		},
		PrepareStep: func(r *guest.StepRequest) (guest.StepResult, error) {
			return rules.StepBudget(cfg, r), nil
		},
	})
}

func main() {}

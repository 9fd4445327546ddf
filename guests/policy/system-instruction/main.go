// Command system-instruction is the standard "system-instruction" prepareStep
// guest: it appends an instruction to the system prompt of every step
// (rules.SystemInstruction). Config: {"instruction": "..."} (required).
package main

import (
	"github.com/agenthost/agenthost/guests/policy/rules"
	"github.com/agenthost/agenthost/sdk/guest"
)

var cfg rules.SystemInstructionConfig

func init() {
	guest.Register(guest.Guest{
		Name:    "system-instruction",
		Version: "1.0.0",
		Init: func(b []byte) (err error) {
			cfg, err = rules.ParseSystemInstructionConfig(b)
			return err
		},
		PrepareStep: func(r *guest.StepRequest) (guest.StepResult, error) {
			return rules.SystemInstruction(cfg, r), nil
		},
	})
}

func main() {}

// Command paramsguest is a prepareStep guest for the host's tests: it sets
// every model parameter the ABI carries, narrows the active tools to the
// one its config names, and requires a tool call at the first step.
package main

import (
	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/sdk/guest"
)

var tool string

func init() {
	guest.Register(guest.Guest{
		Name:    "paramsguest",
		Version: "1.0.0",
		Init: func(b []byte) error {
			tool = string(b)
			return nil
		},
		PrepareStep: func(r *guest.StepRequest) (guest.StepResult, error) {
			res := guest.StepResult{StepSettings: r.StepSettings}
			temp, topP := 0.25, 0.5
			res.Model = guestabi.ModelParams{Model: "guest-model", Temperature: &temp, TopP: &topP, MaxTokens: 77, Stop: []string{"END", "STOP"}}
			res.ActiveTools = []string{tool}
			res.ToolChoice = "required"
			if r.Step > 1 {
				res.ToolChoice = "none"
			}
			return res, nil
		},
	})
}

func main() {}

// Command inject is the standard "inject" inputPolicy guest: every input that
// arrives at a busy thread gets inject. Config: {"coalescePending": bool}.
package main

import (
	"github.com/agenthost/agenthost/guests/policy/rules"
	"github.com/agenthost/agenthost/sdk/guest"
)

var cfg rules.PolicyConfig

func init() {
	guest.Register(guest.Guest{
		Name:    "inject",
		Version: "1.0.0",
		Actions: []string{guest.Inject},
		Init: func(b []byte) (err error) {
			cfg, err = rules.ParsePolicyConfig(b)
			return err
		},
		InputPolicy: func(*guest.Request) (guest.Decision, error) {
			return guest.Decision{Action: guest.Inject, CoalescePending: cfg.CoalescePending}, nil
		},
	})
}

func main() {}

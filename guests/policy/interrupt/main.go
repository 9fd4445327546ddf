// Command interrupt is the standard "interrupt" inputPolicy guest: every input that
// arrives at a busy thread gets interrupt. Config: {"coalescePending": bool}.
package main

import (
	"github.com/agenthost/agenthost/guests/policy/rules"
	"github.com/agenthost/agenthost/sdk/guest"
)

var cfg rules.PolicyConfig

func init() {
	guest.Register(guest.Guest{
		Name:    "interrupt",
		Version: "1.0.0",
		Actions: []string{guest.Interrupt},
		Init: func(b []byte) (err error) {
			cfg, err = rules.ParsePolicyConfig(b)
			return err
		},
		InputPolicy: func(*guest.Request) (guest.Decision, error) {
			return guest.Decision{Action: guest.Interrupt, CoalescePending: cfg.CoalescePending}, nil
		},
	})
}

func main() {}

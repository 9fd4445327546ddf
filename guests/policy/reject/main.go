// Command reject is the standard "reject" inputPolicy guest: every input that
// arrives at a busy thread gets reject. Config: {"coalescePending": bool}.
package main

import (
	"github.com/agenthost/agenthost/guests/policy/rules"
	"github.com/agenthost/agenthost/sdk/guest"
)

var cfg rules.PolicyConfig

func init() {
	guest.Register(guest.Guest{
		Name:    "reject",
		Version: "1.0.0",
		Actions: []string{guest.Reject},
		Init: func(b []byte) (err error) {
			cfg, err = rules.ParsePolicyConfig(b)
			return err
		},
		InputPolicy: func(*guest.Request) (guest.Decision, error) {
			return guest.Decision{Action: guest.Reject, CoalescePending: cfg.CoalescePending}, nil
		},
	})
}

func main() {}

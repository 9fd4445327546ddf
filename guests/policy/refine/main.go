// Command refine is the standard "refine" inputPolicy guest: inject an input
// that refines the running one, interrupt for one that redirects or stops it,
// queue anything else (rules.Refine). Config: {"coalescePending": bool}.
package main

import (
	"github.com/agenthost/agenthost/guests/policy/rules"
	"github.com/agenthost/agenthost/sdk/guest"
)

var cfg rules.PolicyConfig

func init() {
	guest.Register(guest.Guest{
		Name:    "refine",
		Version: "1.0.0",
		Actions: []string{guest.Queue, guest.Inject, guest.Interrupt},
		Init: func(b []byte) (err error) {
			cfg, err = rules.ParsePolicyConfig(b)
			return err
		},
		InputPolicy: func(r *guest.Request) (guest.Decision, error) {
			return guest.Decision{Action: rules.Refine(r.Hint, r.Content), CoalescePending: cfg.CoalescePending}, nil
		},
	})
}

func main() {}

// Command go is the example inputPolicy and toolPolicy guest
// (guests/examples/README.md) in Go, on sdk/guest. Build:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o example-go.wasm .
package main

import (
	"strings"

	"github.com/agenthost/agenthost/sdk/guest"
)

func init() {
	guest.Register(guest.Guest{
		Name:    "example-go",
		Version: "1.0.0",
		Actions: []string{guest.Queue, guest.Inject, guest.Interrupt, guest.Reject},
		InputPolicy: func(r *guest.Request) (guest.Decision, error) {
			return Decide(r), nil
		},
		ToolPolicy: func(r *guest.ToolRequest) (guest.ToolDecision, error) {
			return DecideTool(r.Tool), nil
		},
	})
}

// Decide is the example policy.
func Decide(r *guest.Request) guest.Decision {
	switch {
	case r.Hint == "stop":
		return guest.Decision{Action: guest.Interrupt}
	case r.Active && r.Hint == "refine":
		return guest.Decision{Action: guest.Inject}
	case r.Content == "":
		return guest.Decision{Action: guest.Reject}
	}
	return guest.Decision{Action: guest.Queue, CoalescePending: r.Queued > 0}
}

// DecideTool is the example tool policy: deny shell_exec, ask one person
// before a tool whose name contains "delete" runs, allow the rest.
func DecideTool(tool string) guest.ToolDecision {
	switch {
	case tool == "shell_exec":
		return guest.ToolDecision{Decision: guest.Deny, Message: "shell_exec is not allowed"}
	case strings.Contains(tool, "delete"):
		return guest.ToolDecision{Decision: guest.Ask, Prompt: "Approve this deletion?", Approvals: 1}
	}
	return guest.ToolDecision{Decision: guest.Allow}
}

func main() {}

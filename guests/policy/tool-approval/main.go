// Command tool-approval is the standard "tool-approval" toolPolicy guest: it
// allows, denies or asks approval for a tool call by glob patterns over the
// tool's name and, optionally, a number among its arguments
// (rules.ToolApproval). Config:
//
//	{"rules": [{"match": "*delete*", "decision": "ask", "prompt": "..."},
//	           {"match": "payments_refund", "when": {"arg": "amount", "gt": 100},
//	            "decision": "ask", "approvals": 2},
//	           {"match": "shell_*", "decision": "deny", "message": "..."},
//	           {"match": "fs_read*", "decision": "allow"}],
//	 "default": "allow"}
package main

import (
	"github.com/agenthost/agenthost/guests/policy/rules"
	"github.com/agenthost/agenthost/sdk/guest"
)

var cfg rules.ToolApprovalConfig

func init() {
	guest.Register(guest.Guest{
		Name:    "tool-approval",
		Version: "1.0.0",
		Init: func(b []byte) (err error) {
			cfg, err = rules.ParseToolApprovalConfig(b)
			return err
		},
		ToolPolicy: func(r *guest.ToolRequest) (guest.ToolDecision, error) {
			return rules.ToolApproval(cfg, r), nil
		},
	})
}

func main() {}

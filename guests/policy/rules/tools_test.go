package rules

import (
	"strings"
	"testing"

	"github.com/agenthost/agenthost/abi/guestabi"
)

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"fs_read", "fs_read", true},
		{"fs_read", "fs_read_all", false},
		{"fs_read*", "fs_read_all", true},
		{"fs_read*", "xfs_read", false},
		{"*delete*", "delete", true},
		{"*delete*", "fs_delete_file", true},
		{"*delete*", "fs_delet", false},
		{"*delete", "delete_x", false},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"?", "é", true},
		{"??", "é", false},
		{"fs_?", "fs_x", true},
		{"[abc]x", "bx", true},
		{"[abc]x", "dx", false},
		{"[a-c]*", "cat", true},
		{"[!a-c]*", "cat", false},
		{"[!a-c]*", "dog", true},
		{"[]]", "]", true},
		{`\*`, "*", true},
		{`\*`, "x", false},
		{`a\?`, "a?", true},
		{"**x", "yyx", true},
		{"*a*a*a*a*a*a*a*b", strings.Repeat("a", 200), false},
		{"shell_exec", "SHELL_EXEC", false},
	} {
		if err := validGlob(c.pattern); err != nil {
			t.Errorf("%q: %v", c.pattern, err)
		}
		if got := Glob(c.pattern, c.name); got != c.want {
			t.Errorf("Glob(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
	for _, p := range []string{"[", "[a", "[]", "[z-a]", `x\`, `[a\`} {
		if validGlob(p) == nil {
			t.Errorf("%q valid", p)
		}
		if Glob(p, "a") || Glob(p, "[") {
			t.Errorf("%q matched", p)
		}
	}
}

const approvalConfig = `{"rules": [
	{"match": "payments_refund", "when": {"arg": "amount", "gt": 100}, "decision": "ask", "approvals": 2, "prompt": "Refund over 100"},
	{"match": "payments_*", "decision": "allow"},
	{"match": "*delete*", "decision": "ask", "prompt": "Deleting needs approval"},
	{"match": "shell_*", "decision": "deny", "message": "No shell access."},
	{"match": "fs_read*", "decision": "allow"}],
 "default": "ask"}`

func TestToolApproval(t *testing.T) {
	c, err := ParseToolApprovalConfig([]byte(approvalConfig))
	if err != nil {
		t.Fatal(err)
	}
	ask := func(prompt string, n int) guestabi.ToolDecision {
		return guestabi.ToolDecision{Decision: guestabi.ToolAsk, Prompt: prompt, Approvals: n}
	}
	allow := guestabi.ToolDecision{Decision: guestabi.ToolAllow}
	for _, tc := range []struct {
		tool, args string
		want       guestabi.ToolDecision
	}{
		{"payments_refund", `{"amount": 250}`, ask("Refund over 100", 2)},
		{"payments_refund", `{"amount": 100}`, allow},
		{"payments_refund", `{"amount": "250"}`, allow},
		{"payments_refund", `{}`, allow},
		{"payments_refund", `not json`, allow},
		{"payments_refund", `[250]`, allow},
		{"payments_refund", `{"order": {"amount": 250}}`, allow},
		{"payments_delete", `{}`, allow},
		{"fs_delete", `{}`, ask("Deleting needs approval", 0)},
		{"shell_exec", `{"cmd": "ls"}`, guestabi.ToolDecision{Decision: guestabi.ToolDeny, Message: "No shell access."}},
		{"fs_read_file", `{}`, allow},
		{"search", `{}`, guestabi.ToolDecision{Decision: guestabi.ToolAsk}},
	} {
		got := ToolApproval(c, &guestabi.ToolRequest{Tool: tc.tool, Arguments: tc.args})
		if got != tc.want {
			t.Errorf("%s %s: got %+v, want %+v", tc.tool, tc.args, got, tc.want)
		}
		if err := guestabi.ValidToolDecision(got); err != nil {
			t.Errorf("%s: %v", tc.tool, err)
		}
	}
	empty, err := ParseToolApprovalConfig(nil)
	if err != nil || ToolApproval(empty, &guestabi.ToolRequest{Tool: "x"}) != allow {
		t.Errorf("empty config: %+v %v", empty, err)
	}
}

func TestToolConditions(t *testing.T) {
	for op, want := range map[string][3]bool{ // at 99, 100, 101
		"gt": {false, false, true}, "gte": {false, true, true}, "lt": {true, false, false},
		"lte": {true, true, false}, "eq": {false, true, false},
	} {
		c, err := ParseToolApprovalConfig([]byte(`{"rules": [{"match": "t", "when": {"arg": "n", "` + op + `": 100}, "decision": "deny"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range []string{"99", "100", "101"} {
			got := ToolApproval(c, &guestabi.ToolRequest{Tool: "t", Arguments: `{"n": ` + n + `}`}).Decision == guestabi.ToolDeny
			if got != want[i] {
				t.Errorf("%s 100 at %s: %v", op, n, got)
			}
		}
	}
}

func TestToolApprovalConfigErrors(t *testing.T) {
	for cfg, want := range map[string]string{
		`[]`:                                 "want an object",
		`{"rule": []}`:                       `unknown member "rule"`,
		`{"default": "maybe"}`:               `default "maybe"`,
		`{"rules": {}}`:                      "rules must be an array",
		`{"rules": [1]}`:                     "rule 1: want an object",
		`{"rules": [{"decision": "allow"}]}`: "rule 1: match is required",
		`{"rules": [{"match": "[a", "decision": "allow"}]}`:                                             "malformed character class",
		`{"rules": [{"match": "x", "decision": "approve"}]}`:                                            `decision "approve"`,
		`{"rules": [{"match": "x", "decision": "allow", "prompt": "p"}]}`:                               "prompt goes with decision ask",
		`{"rules": [{"match": "x", "decision": "ask", "message": "m"}]}`:                                "message goes with decision deny",
		`{"rules": [{"match": "x", "decision": "deny", "approvals": 2}]}`:                               "approvals go with decision ask",
		`{"rules": [{"match": "x", "decision": "ask", "approvals": 17}]}`:                               "approvals must be 1 to 16",
		`{"rules": [{"match": "x", "decision": "ask", "approvals": 0}]}`:                                "approvals must be 1 to 16",
		`{"rules": [{"match": "x", "decision": "ask", "approvals": 1.5}]}`:                              "must be an integer",
		`{"rules": [{"match": "x", "decision": "ask", "colour": 1}]}`:                                   `unknown member "colour"`,
		`{"rules": [{"match": "x", "decision": "ask", "when": {"gt": 1}}]}`:                             "arg is required",
		`{"rules": [{"match": "x", "decision": "ask", "when": {"arg": "a"}}]}`:                          "want one of gt",
		`{"rules": [{"match": "x", "decision": "ask", "when": {"arg": "a", "gt": 1, "lt": 5}}]}`:        "exactly one of",
		`{"rules": [{"match": "x", "decision": "ask", "when": {"arg": "a", "gt": "1"}}]}`:               "gt must be a number",
		`{"rules": [{"match": "x", "decision": "ask", "when": {"arg": "a", "ne": 1}}]}`:                 `unknown member "ne"`,
		`{"rules": [{"match": "x", "decision": "ask", "prompt": "` + strings.Repeat("p", 4097) + `"}]}`: "at most 4096 bytes",
	} {
		_, err := ParseToolApprovalConfig([]byte(cfg))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "config: ") {
			t.Errorf("%.80s: %v, want %q", cfg, err, want)
		}
	}
}

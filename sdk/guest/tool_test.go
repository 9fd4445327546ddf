package guest

import (
	"testing"

	"github.com/agenthost/agenthost/abi/guestabi"
)

func TestParseArguments(t *testing.T) {
	v, err := ParseArguments(`{"amount": 250, "to": "acct"}`)
	if m, ok := v.(map[string]any); err != nil || !ok || m["amount"] != 250.0 || m["to"] != "acct" {
		t.Errorf("%v %v", v, err)
	}
	if _, err := ParseArguments(`{"amount": `); err == nil || err.Error()[:10] != "arguments:" {
		t.Errorf("bad JSON: %v", err)
	}
}

func TestReadToolRequest(t *testing.T) {
	want := ToolRequest{Step: 2, Tool: "rm", Server: "fs", Arguments: "{}", CallID: "c", IdempotencyKey: "k", RunID: "r", ThreadID: "t"}
	var got ToolRequest
	if err := readToolRequest(guestabi.AppendToolRequest(nil, &want), &got); err != nil || got != want {
		t.Errorf("%+v %v", got, err)
	}
	if err := readToolRequest([]byte{2, 0, 0, 0, 0, 0, 0, 0}, &got); err == nil {
		t.Error("layout 2 read")
	}
}

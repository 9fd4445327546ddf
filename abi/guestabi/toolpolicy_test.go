package guestabi

import (
	"encoding/hex"
	"strings"
	"testing"
)

func TestToolRequestRoundTrip(t *testing.T) {
	r := ToolRequest{Step: 3, Tool: "fs_delete", Server: "fs", Arguments: `{"path":"/tmp/x"}`,
		CallID: "call_1", IdempotencyKey: "r-1/step2/0", RunID: "r-1", ThreadID: "t-1"}
	b := AppendToolRequest(nil, &r)
	var got ToolRequest
	if err := DecodeToolRequest(b, &got); err != nil {
		t.Fatal(err)
	}
	if got != r {
		t.Errorf("got %+v, want %+v", got, r)
	}
	var f ToolFields
	if step, err := ReadToolRequest(b, &f); err != nil || step != 3 || string(f[0]) != r.Tool || string(f[2]) != r.Arguments || string(f[6]) != r.ThreadID {
		t.Errorf("ReadToolRequest: %d %q %v", step, f, err)
	}
	for i := range b {
		if _, err := ReadToolRequest(b[:i], &f); err == nil {
			t.Errorf("ReadToolRequest truncated at %d read", i)
		}
	}
	if _, err := ReadToolRequest(append(b, 0), &f); err == nil {
		t.Error("ReadToolRequest: trailing byte read")
	}
	name, err := ReadToolName(b)
	if err != nil || string(name) != "fs_delete" {
		t.Errorf("ReadToolName: %q, %v", name, err)
	}
	for i := range b {
		if DecodeToolRequest(b[:i], &got) == nil {
			t.Errorf("truncated at %d decoded", i)
		}
	}
	if DecodeToolRequest(append(b, 0), &got) == nil {
		t.Error("trailing byte decoded")
	}
	for i := range 4 {
		bad := append([]byte(nil), b...)
		bad[i] ^= 0x80
		if DecodeToolRequest(bad, &got) == nil {
			t.Errorf("header byte %d changed, decoded", i)
		}
	}
	for i := range ToolHeaderSize + 4 + len("fs_delete") {
		if _, err := ReadToolName(b[:i]); err == nil {
			t.Errorf("ReadToolName truncated at %d read", i)
		}
	}
}

// TestToolRequestExample keeps the example of SPEC §14.1 true.
func TestToolRequestExample(t *testing.T) {
	r := ToolRequest{Step: 2, Tool: "rm", Server: "fs", Arguments: "{}", CallID: "c", IdempotencyKey: "k", RunID: "r", ThreadID: "t"}
	const want = "01000000 02000000" +
		"02000000 726d  02000000 6673  02000000 7b7d" +
		"01000000 63  01000000 6b  01000000 72  01000000 74"
	if got := hex.EncodeToString(AppendToolRequest(nil, &r)); got != strings.ReplaceAll(want, " ", "") {
		t.Errorf("got %s", got)
	}
}

func TestToolDecisionRoundTrip(t *testing.T) {
	for _, d := range []ToolDecision{
		{Decision: ToolAllow},
		{Decision: ToolDeny, Message: "shell access is not allowed"},
		{Decision: ToolDeny},
		{Decision: ToolAsk, Prompt: "Delete /tmp/x?", Approvals: 1},
		{Decision: ToolAsk, Prompt: "Refund 500?", Approvals: 2},
		{Decision: ToolAsk, Approvals: MaxApprovals},
	} {
		if err := ValidToolDecision(d); err != nil {
			t.Errorf("%+v: %v", d, err)
		}
		got, err := DecodeToolDecision(AppendToolDecision(nil, d))
		if err != nil || got != d {
			t.Errorf("%+v: got %+v, %v", d, got, err)
		}
	}
	// ask with 0 approvals means 1.
	if got, err := DecodeToolDecision([]byte{0, CodeToolAsk, 0, 0}); err != nil || got.Approvals != 1 {
		t.Errorf("ask with 0 approvals: %+v, %v", got, err)
	}
}

func TestToolDecisionRefused(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":                {},
		"short":                {0, 1, 0},
		"unknown code":         {0, 4, 0, 0},
		"code 0":               {0, 0, 0, 0},
		"reserved":             {0, 1, 0, 1},
		"approvals with allow": {0, 1, 1, 0},
		"approvals with deny":  {0, 2, 1, 0},
		"17 approvals":         {0, 3, 17, 0},
		"text after allow":     {0, 1, 0, 0, 'x'},
		"unknown status":       {2, 1, 0, 0},
	} {
		if d, err := DecodeToolDecision(b); err == nil {
			t.Errorf("%s: decoded %+v", name, d)
		}
	}
	if _, err := DecodeToolDecision(append([]byte{1}, "bad config"...)); err == nil || !strings.Contains(err.Error(), "bad config") {
		t.Errorf("error result: %v", err)
	}
	for _, d := range []ToolDecision{
		{Decision: "maybe"},
		{Decision: ToolAllow, Approvals: 1},
		{Decision: ToolAsk, Approvals: 17},
		{Decision: ToolAsk, Approvals: -1},
		{Decision: ToolAllow, Message: "x"},
		{Decision: ToolDeny, Prompt: "x"},
		{Decision: ToolDeny, Message: strings.Repeat("x", MaxToolText+1)},
	} {
		if ValidToolDecision(d) == nil {
			t.Errorf("%+v valid", d)
		}
	}
}

// TestToolDecisionTextIsSafe checks that a guest's text is cut and cannot
// carry control characters to a log, a terminal or a model.
func TestToolDecisionTextIsSafe(t *testing.T) {
	b := AppendToolDecision(nil, ToolDecision{Decision: ToolAsk, Prompt: "ok?\n\x1b[31mfake\u202e" + strings.Repeat("é", MaxToolText)})
	d, err := DecodeToolDecision(b)
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(d.Prompt, "\n\x1b\u202e") || !strings.HasPrefix(d.Prompt, `ok?\x0a\x1b[31mfake\u202e`) {
		t.Errorf("prompt not made safe: %q", d.Prompt[:40])
	}
	if len(d.Prompt) > MaxToolText || ValidToolDecision(d) != nil {
		t.Errorf("prompt of %d bytes not cut", len(d.Prompt))
	}
}

func FuzzDecodeToolRequest(f *testing.F) {
	f.Add(AppendToolRequest(nil, &ToolRequest{Step: 1, Tool: "x", Arguments: "{}"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r ToolRequest
		if DecodeToolRequest(b, &r) == nil {
			if got := AppendToolRequest(nil, &r); string(got) != string(b) {
				t.Errorf("re-encoding differs: %x vs %x", got, b)
			}
		}
	})
}

func FuzzDecodeToolDecision(f *testing.F) {
	f.Add(AppendToolDecision(nil, ToolDecision{Decision: ToolAsk, Prompt: "ok?", Approvals: 2}))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeToolDecision(b)
		if err != nil {
			return
		}
		if err := ValidToolDecision(d); err != nil {
			t.Errorf("decoded %+v, which is not valid: %v", d, err)
		}
	})
}

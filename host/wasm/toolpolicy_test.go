package wasm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/host/toolpolicy"
)

func toolCall(name string) toolpolicy.Call {
	return toolpolicy.Call{Tool: name, Server: "fs", Arguments: `{"path":"/tmp/x"}`, CallID: "call_1",
		IdempotencyKey: "r-1/step0/0", Step: 1, RunID: "r-1", ThreadID: "t-1"}
}

func isToolFallback(err error, d toolpolicy.Decision) bool {
	var fb *toolpolicy.FallbackError
	return errors.As(err, &fb) && fb.Decision == d
}

// TestToolPolicyFailures: every way a toolPolicy call can fail is answered
// with the fallback (ask by default), reported and counted; the host goes
// on with the next call.
func TestToolPolicyFailures(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	var failures []Failure
	m := load(t, e, hostile("tooltricks"), Options{MaxInstances: 1, CallTimeout: time.Second,
		OnFailure: func(f Failure) { failures = append(failures, f) }})
	if m.HasHook(guestabi.HookInputPolicy) || m.ToolPolicy() == nil {
		t.Fatalf("hooks %v", m.GuestManifest().Hooks)
	}
	for _, c := range []struct{ tool, err string }{
		{"loop", "deadline exceeded"},
		{"trap", "unreachable"},
		{"bad", "unknown decision code"},
		{"approvals", "more than 16 approvals"},
		{"error", "bad tool config"},
		{"outside", "outside memory"},
	} {
		failures = nil
		d, err := m.DecideTool(context.Background(), toolCall(c.tool))
		if !isToolFallback(err, d) || d.Verdict != toolpolicy.Ask || d.Approvals != 1 ||
			!containsAll(d.Prompt, "tooltricks failed", `"`+c.tool+`"`) || d.Check() != nil {
			t.Errorf("%s: %+v %v", c.tool, d, err)
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want it to say %q", c.tool, err, c.err)
		}
		if len(failures) != 1 || failures[0].Hook != guestabi.HookToolPolicy || failures[0].ToolFallback != d || failures[0].Module != "tooltricks" {
			t.Errorf("%s: failures %+v", c.tool, failures)
		}
		// The next call is answered by the guest.
		if d, err := m.DecideTool(context.Background(), toolCall("fine")); err != nil || d != (toolpolicy.Decision{Verdict: toolpolicy.Allow}) {
			t.Errorf("after %s: %+v %v", c.tool, d, err)
		}
	}
	// Traps, the deadline and a result outside memory throw the instance
	// away; a bad decision or an error result does not.
	if st := m.Stats(); st.Calls != 12 || st.Failures != 6 || st.Fallbacks != 6 || st.Discarded != 3 {
		t.Errorf("stats %+v", st)
	}
	var b strings.Builder
	WriteMetrics(&b, []Hooked{{Hook: HookToolPolicy, Module: m}})
	for _, line := range []string{
		`agenthost_guest_calls_total{module="tooltricks",hook="tool_policy"} 12`,
		`agenthost_guest_failures_total{module="tooltricks",hook="tool_policy"} 6`,
		`agenthost_guest_fallbacks_total{module="tooltricks",hook="tool_policy"} 6`,
	} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("metrics lack %s:\n%s", line, b.String())
		}
	}
}

func TestToolPolicyDecisions(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	m := load(t, e, hostile("tooltricks"), Options{})
	ctx := context.Background()
	d, err := m.DecideTool(ctx, toolCall("noisy"))
	if err != nil || d.Verdict != toolpolicy.Ask || d.Approvals != 1 {
		t.Fatalf("%+v %v", d, err)
	}
	// The guest's prompt is made safe and cut: no control characters reach
	// a person's screen, and the decision stays valid.
	if strings.ContainsAny(d.Prompt, "\n\x1b\x00") || !strings.HasPrefix(d.Prompt, `\x1b[31mred\x0aline\x00`) ||
		!strings.HasSuffix(d.Prompt, "(5996 bytes)") || len(d.Prompt) > toolpolicy.MaxText || d.Check() != nil {
		t.Errorf("prompt of %d bytes: %.60q … %q", len(d.Prompt), d.Prompt, d.Prompt[max(0, len(d.Prompt)-20):])
	}
	// Empty texts are the host's, naming the tool (made safe).
	if d, err := m.DecideTool(ctx, toolCall("drop\ntable")); err != nil || d.Verdict != toolpolicy.Deny || d.Message != `The tool "drop\\x0atable" was not run: the tool policy denied the call.` {
		t.Errorf("deny: %+v %v", d, err)
	}
	if d, err := m.DecideTool(ctx, toolCall("query")); err != nil || d.Verdict != toolpolicy.Ask || d.Prompt != `Run "query"?` || d.Approvals != 1 {
		t.Errorf("ask: %+v %v", d, err)
	}
	if d, err := m.DecideTool(ctx, toolpolicy.Call{}); err != nil || d.Verdict != toolpolicy.Allow {
		t.Errorf("empty call: %+v %v", d, err)
	}
	if _, err := m.DecideTool(ctx, toolpolicy.Call{Tool: "x", Step: -1}); err == nil {
		t.Error("step -1 decided")
	}
	big := toolCall("fine")
	big.Arguments = strings.Repeat("x", guestabi.MaxRequestBytes)
	if d, err := m.DecideTool(ctx, big); !isToolFallback(err, d) || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Errorf("oversized request: %+v %v", d, err)
	}
}

func TestToolFallbackConfigured(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	deny := load(t, e, hostile("tooltricks"), Options{ToolFallback: toolpolicy.Decision{Verdict: toolpolicy.Deny}})
	d, err := deny.DecideTool(context.Background(), toolCall("trap"))
	if !isToolFallback(err, d) || d.Verdict != toolpolicy.Deny || d.Message != `The tool "trap" was not run: the tool policy failed to decide.` {
		t.Errorf("deny fallback: %+v %v", d, err)
	}
	own := toolpolicy.Decision{Verdict: toolpolicy.Ask, Prompt: "Policy down; approve?", Approvals: 2}
	ask := load(t, e, hostile("tooltricks"), Options{ToolFallback: own})
	if d, err := ask.DecideTool(context.Background(), toolCall("trap")); !isToolFallback(err, d) || d != own {
		t.Errorf("own fallback: %+v %v", d, err)
	}
	allow := load(t, e, hostile("tooltricks"), Options{ToolFallback: toolpolicy.Decision{Verdict: toolpolicy.Allow}})
	if d, err := allow.DecideTool(context.Background(), toolCall("trap")); !isToolFallback(err, d) || d != (toolpolicy.Decision{Verdict: toolpolicy.Allow}) {
		t.Errorf("allow fallback: %+v %v", d, err)
	}
	for _, fb := range []toolpolicy.Decision{{Verdict: "maybe"}, {Verdict: toolpolicy.Allow, Approvals: 2}, {Verdict: toolpolicy.Ask, Approvals: 17}} {
		if _, err := e.LoadFile(context.Background(), hostile("tooltricks"), Options{ToolFallback: fb}); err == nil {
			t.Errorf("fallback %+v loaded", fb)
		}
	}
}

// TestToolPolicyLoad: the hook needs its export with its signature; a guest
// without the hook loads as before and has no tool policy.
func TestToolPolicyLoad(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	for name, want := range map[string]string{
		"toolnoexport": "does not export agenthost_tool_policy",
		"toolbadsig":   "export agenthost_tool_policy has signature (i32, i32) -> (i32)",
	} {
		_, err := e.LoadFile(context.Background(), hostile(name), Options{})
		if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	m := load(t, e, hostile("sometimes"), Options{})
	if m.ToolPolicy() != nil {
		t.Error("inputPolicy guest has a tool policy")
	}
	if _, err := m.DecideTool(context.Background(), toolCall("x")); err != ErrNoHook {
		t.Errorf("DecideTool on an inputPolicy guest: %v", err)
	}
}

// TestToolApprovalGuest runs the standard tool-approval guest through the
// real host on the rules of its documentation.
func TestToolApprovalGuest(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	const cfg = `{"rules": [
		{"match": "payments_refund", "when": {"arg": "amount", "gt": 100}, "decision": "ask", "approvals": 2, "prompt": "Refund over 100: two approvals"},
		{"match": "*delete*", "decision": "ask", "prompt": "Deleting needs approval"},
		{"match": "shell_*", "decision": "deny", "message": "No shell access."},
		{"match": "fs_read*", "decision": "allow"}],
	 "default": "deny"}`
	var failures []Failure
	m := load(t, e, goGuest(t, "tool-approval"), Options{Config: []byte(cfg), OnFailure: func(f Failure) { failures = append(failures, f) }})
	if gm := m.GuestManifest(); gm.Name != "tool-approval" || len(gm.Hooks) != 1 || gm.Hooks[0] != guestabi.HookToolPolicy {
		t.Fatalf("manifest %+v", gm)
	}
	allow := toolpolicy.Decision{Verdict: toolpolicy.Allow}
	for _, c := range []struct {
		tool, args string
		want       toolpolicy.Decision
	}{
		{"payments_refund", `{"amount": 250, "order": "o-1"}`, toolpolicy.Decision{Verdict: toolpolicy.Ask, Prompt: "Refund over 100: two approvals", Approvals: 2}},
		{"payments_refund", `{"amount": 40}`, toolpolicy.Decision{Verdict: toolpolicy.Deny, Message: `The tool "payments_refund" was not run: the tool policy denied the call.`}},
		{"fs_delete", `{"path": "/"}`, toolpolicy.Decision{Verdict: toolpolicy.Ask, Prompt: "Deleting needs approval", Approvals: 1}},
		{"delete", `{}`, toolpolicy.Decision{Verdict: toolpolicy.Ask, Prompt: "Deleting needs approval", Approvals: 1}},
		{"shell_exec", `{"cmd": "rm -rf /"}`, toolpolicy.Decision{Verdict: toolpolicy.Deny, Message: "No shell access."}},
		{"fs_read_file", `{"path": "/etc/hosts"}`, allow},
		{"fs_read_file", strings.Repeat(" ", 1<<20) + `{}`, allow},
		{"fs_readdir", `not json`, allow},
	} {
		call := toolCall(c.tool)
		call.Arguments = c.args
		d, err := m.DecideTool(context.Background(), call)
		if err != nil || d != c.want {
			t.Errorf("%s %.40s: got %+v %v, want %+v", c.tool, c.args, d, err, c.want)
		}
	}
	if len(failures) > 0 {
		t.Errorf("failures: %+v", failures)
	}
	for _, bad := range []string{`{"rules": [{"match": "x", "decision": "maybe"}]}`, `{"default": "allow", "x": 1}`} {
		if _, err := e.LoadFile(context.Background(), goGuest(t, "tool-approval"), Options{Config: []byte(bad)}); !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "config") {
			t.Errorf("config %s: %v", bad, err)
		}
	}
	// Without configuration every call is allowed.
	m = load(t, e, goGuest(t, "tool-approval"), Options{})
	if d, err := m.DecideTool(context.Background(), toolCall("fs_delete")); err != nil || d != allow {
		t.Errorf("no config: %+v %v", d, err)
	}
}

const approvalTestConfig = `{"rules": [
	{"match": "payments_refund", "when": {"arg": "amount", "gt": 100}, "decision": "ask", "approvals": 2, "prompt": "Refund over 100"},
	{"match": "*delete*", "decision": "ask"},
	{"match": "shell_*", "decision": "deny", "message": "No shell access."}]}`

func TestRunToolCases(t *testing.T) {
	cases := filepath.Join("testdata", "cases")
	path := goGuest(t, "tool-approval")
	opts := CheckOptions{Config: []byte(approvalTestConfig), CacheDir: cacheDir, CallTimeout: 10 * time.Second}
	var out bytes.Buffer
	if err := RunToolCases(context.Background(), &out, path, filepath.Join(cases, "tool-approval.json"), opts); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !containsAll(out.String(), "CASE", "refund over the limit", `ask ×2 "Refund over 100"`, "5 tool cases, 0 failed") {
		t.Errorf("output:\n%s", out.String())
	}
	out.Reset()
	err := RunToolCases(context.Background(), &out, path, filepath.Join(cases, "tool-approval-wrong.json"), opts)
	if !errors.Is(err, ErrMismatch) || !containsAll(out.String(), "wrong verdict", "deny", "ask ×1", "ask ×2", "FAIL", "3 tool cases, 2 failed") {
		t.Errorf("err = %v, output:\n%s", err, out.String())
	}
	// A failing guest never passes a case on its fallback, even when the
	// fallback is the expected decision.
	out.Reset()
	err = RunToolCases(context.Background(), &out, hostile("tooltricks"), filepath.Join(cases, "tool-approval-wrong.json"), opts)
	if err == nil || !strings.Contains(err.Error(), "agenthost_init") {
		t.Errorf("config for a guest without init: %v", err)
	}
	err = RunToolCases(context.Background(), &out, hostile("tooltricks"), filepath.Join(cases, "tool-approval.json"), CheckOptions{CacheDir: cacheDir, CallTimeout: 10 * time.Second})
	if !errors.Is(err, ErrMismatch) || !containsAll(out.String(), "error:", "region outside memory", "FAIL") {
		t.Errorf("err = %v, output:\n%s", err, out.String())
	}
	// An inputPolicy guest has no tool policy to test.
	if err := RunToolCases(context.Background(), &out, cGuest(), filepath.Join(cases, "tool-approval.json"), CheckOptions{CacheDir: cacheDir}); err == nil || !strings.Contains(err.Error(), "no toolPolicy hook") {
		t.Errorf("inputPolicy guest: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	for _, body := range []string{`[{"tool": "x", "want": "approve"}]`, `[{"tool": "x", "want": "allow", "colour": 1}]`} {
		os.WriteFile(bad, []byte(body), 0o600)
		if _, err := ReadToolCases(bad); err == nil {
			t.Errorf("%s read", body)
		}
	}
}

func TestCheckToolPolicy(t *testing.T) {
	var out bytes.Buffer
	opts := CheckOptions{Config: []byte(approvalTestConfig), CacheDir: cacheDir, CallTimeout: 10 * time.Second}
	if err := Check(context.Background(), &out, goGuest(t, "tool-approval"), opts); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !containsAll(out.String(), "hooks:", "toolPolicy", "tools:", "11 calls, 0 failed", "allow ×8", "deny ×1", "ask ×2") || strings.Contains(out.String(), "decide:") {
		t.Errorf("output:\n%s", out.String())
	}
	out.Reset()
	err := Check(context.Background(), &out, hostile("tooltricks"), CheckOptions{CacheDir: cacheDir, CallTimeout: 150 * time.Millisecond})
	if !errors.Is(err, ErrCheckFailed) || !containsAll(err.Error(), `tool call "t"`, "unreachable", `tool call "list"`, "deadline exceeded", `tool call "broken"`, "unknown decision code") ||
		!containsAll(out.String(), "tools:", "failed", "warning:") {
		t.Errorf("err = %v, output:\n%s", err, out.String())
	}
}

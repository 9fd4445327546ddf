package toolpolicy

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestDecisionCheck(t *testing.T) {
	for _, d := range []Decision{
		{Verdict: Allow},
		{Verdict: Deny, Message: "no"},
		{Verdict: Deny},
		{Verdict: Ask, Prompt: "ok?", Approvals: 1},
		{Verdict: Ask, Approvals: MaxApprovals},
	} {
		if err := d.Check(); err != nil {
			t.Errorf("%+v: %v", d, err)
		}
	}
	for _, d := range []Decision{
		{},
		{Verdict: "maybe"},
		{Verdict: Ask},
		{Verdict: Ask, Approvals: MaxApprovals + 1},
		{Verdict: Allow, Approvals: 1},
		{Verdict: Allow, Message: "x"},
		{Verdict: Deny, Prompt: "x"},
		{Verdict: Deny, Message: strings.Repeat("x", MaxText+1)},
	} {
		if d.Check() == nil {
			t.Errorf("%+v passed", d)
		}
	}
}

func TestParseVerdict(t *testing.T) {
	for _, s := range []string{"allow", "deny", "ask"} {
		if v, err := ParseVerdict(s); err != nil || string(v) != s {
			t.Errorf("%s: %v %v", s, v, err)
		}
	}
	if _, err := ParseVerdict("Allow"); err == nil || !strings.Contains(err.Error(), "want allow, deny or ask") {
		t.Errorf("Allow: %v", err)
	}
}

func TestResolve(t *testing.T) {
	ctx := context.Background()
	fallback := Decision{Verdict: Ask, Prompt: "fallback", Approvals: 1}
	ok := Decision{Verdict: Deny, Message: "no"}
	if d, err := Resolve(ctx, Static(ok), Call{}, fallback); err != nil || d != ok {
		t.Errorf("static: %+v %v", d, err)
	}
	boom := errors.New("boom")
	own := Decision{Verdict: Allow}
	d, err := Resolve(ctx, Func(func(context.Context, Call) (Decision, error) {
		return own, &FallbackError{Decision: own, Err: boom}
	}), Call{}, fallback)
	if d != own || !errors.Is(err, boom) {
		t.Errorf("policy's own fallback: %+v %v", d, err)
	}
	d, err = Resolve(ctx, Func(func(context.Context, Call) (Decision, error) { return Decision{}, boom }), Call{}, fallback)
	if d != fallback || !errors.Is(err, boom) {
		t.Errorf("plain error: %+v %v", d, err)
	}
	d, err = Resolve(ctx, Static(Decision{Verdict: Ask}), Call{}, fallback)
	if d != fallback || err == nil {
		t.Errorf("invalid decision: %+v %v", d, err)
	}
}

func TestWithText(t *testing.T) {
	if d := (Decision{Verdict: Ask, Approvals: 1}).WithText("rm\n-rf"); d.Prompt != `Run "rm\\x0a-rf"?` {
		t.Errorf("ask: %q", d.Prompt)
	}
	if d := (Decision{Verdict: Deny}).WithText("x"); d.Message != `The tool "x" was not run: the tool policy denied the call.` {
		t.Errorf("deny: %q", d.Message)
	}
	for _, d := range []Decision{{Verdict: Allow}, {Verdict: Ask, Prompt: "p", Approvals: 1}, {Verdict: Deny, Message: "m"}} {
		if got := d.WithText("x"); got != d {
			t.Errorf("%+v changed to %+v", d, got)
		}
	}
	if d := (Decision{Verdict: Ask, Approvals: 1}).WithText(strings.Repeat("é", 100)); len(d.Prompt) > 200 || d.Check() != nil {
		t.Errorf("long name: %d bytes", len(d.Prompt))
	}
}

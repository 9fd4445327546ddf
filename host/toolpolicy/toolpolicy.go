// Package toolpolicy defines the tool policy: whether a tool call the model
// asked for may run (allow), is refused with a message the model sees as the
// tool's result (deny), or waits for a person to approve it (ask).
//
// Native Go policies and sandboxed wasm guests (host/wasm, the toolPolicy
// hook of abi/guestabi) implement the same Policy interface. A policy that
// answers with a fallback of its own after a failure (a wasm guest that
// trapped or ran past its deadline) returns the fallback both as its decision
// and in a *FallbackError, so the caller can count the failure and still use
// the decision.
package toolpolicy

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/agenthost/agenthost/abi/guestabi"
)

// Verdict is what a tool policy decides about a call.
type Verdict string

// The verdicts.
const (
	// Allow runs the call.
	Allow Verdict = guestabi.ToolAllow
	// Deny does not run it: the model sees Decision.Message as the tool's
	// result.
	Deny Verdict = guestabi.ToolDeny
	// Ask waits for the call to be answered, showing Decision.Prompt. It
	// runs after Decision.Approvals approve answers: an approve whose key
	// was recorded before is that answer again and is not counted, each
	// keyless approve is counted. These are answers, not people: one
	// client giving two keys is two approvals. A reject or respond decides
	// the call at once, as an edit does a call that needs one approval.
	Ask Verdict = guestabi.ToolAsk
)

// Valid reports whether v is one of the verdicts.
func (v Verdict) Valid() bool { return v == Allow || v == Deny || v == Ask }

// ParseVerdict returns the verdict named s, or an error naming the choices.
func ParseVerdict(s string) (Verdict, error) {
	if v := Verdict(s); v.Valid() {
		return v, nil
	}
	return "", fmt.Errorf("tool decision %q: want allow, deny or ask", s)
}

// MaxApprovals bounds Decision.Approvals; MaxText bounds Message and Prompt.
const (
	MaxApprovals = guestabi.MaxApprovals
	MaxText      = guestabi.MaxToolText
)

// Call is the tool call a policy decides on, before it runs.
type Call struct {
	// Tool is the tool's name as the model called it; Server the MCP server
	// that provides it, empty for a tool of the host's own.
	Tool   string
	Server string
	// Arguments is the JSON text the model produced, not validated.
	Arguments string
	// CallID is the model's id of the call; IdempotencyKey the host's stable
	// key of it, the one the tool receives.
	CallID         string
	IdempotencyKey string
	// Step is the model step that asked for the call, from 1.
	Step     int
	RunID    string
	ThreadID string
}

// Decision is a tool policy's answer.
type Decision struct {
	Verdict Verdict
	// Message, with Deny, is what the model sees as the tool's result.
	Message string
	// Prompt, with Ask, is what the person approving is shown.
	Prompt string
	// Approvals, with Ask, is how many approvals the call needs, 1 to
	// MaxApprovals.
	Approvals int
}

// Check reports what is wrong with d, if anything.
func (d Decision) Check() error {
	if !d.Verdict.Valid() {
		return fmt.Errorf("tool decision %q: want allow, deny or ask", d.Verdict)
	}
	switch {
	case d.Verdict == Ask && (d.Approvals < 1 || d.Approvals > MaxApprovals):
		return fmt.Errorf("tool decision ask: approvals %d, want 1 to %d", d.Approvals, MaxApprovals)
	case d.Verdict != Ask && d.Approvals != 0:
		return fmt.Errorf("tool decision %s: approvals go with ask only", d.Verdict)
	case d.Verdict != Deny && d.Message != "", d.Verdict != Ask && d.Prompt != "":
		return fmt.Errorf("tool decision %s: a message goes with deny, a prompt with ask", d.Verdict)
	case len(d.Message) > MaxText || len(d.Prompt) > MaxText:
		return fmt.Errorf("tool decision %s: text longer than %d bytes", d.Verdict, MaxText)
	}
	return nil
}

// WithText returns d with an empty deny message or ask prompt replaced by
// one of the host's naming the tool, so that the model and the person
// always read why.
func (d Decision) WithText(tool string) Decision {
	switch {
	case d.Verdict == Ask && d.Prompt == "":
		d.Prompt = "Run " + QuoteTool(tool) + "?"
	case d.Verdict == Deny && d.Message == "":
		d.Message = "The tool " + QuoteTool(tool) + " was not run: the tool policy denied the call."
	}
	return d
}

// QuoteTool quotes a tool name, as the model wrote it, for a text of the
// host's: at most 128 bytes of it, made safe by guestabi.SafeText.
func QuoteTool(name string) string {
	return strconv.Quote(guestabi.SafeText([]byte(name), 128))
}

// Policy decides tool calls. Implementations must be safe for concurrent use
// and must be functions of the call: a call may be decided more than once
// (after a crash, when a run resumes).
type Policy interface {
	Decide(ctx context.Context, call Call) (Decision, error)
}

// Func adapts a function to Policy.
type Func func(ctx context.Context, call Call) (Decision, error)

// Decide implements Policy.
func (f Func) Decide(ctx context.Context, call Call) (Decision, error) { return f(ctx, call) }

// Static is a policy that always returns the same decision.
type Static Decision

// Decide implements Policy.
func (s Static) Decide(context.Context, Call) (Decision, error) { return Decision(s), nil }

// FallbackError is returned by a Policy whose call failed and which answers
// with a fallback decision of its own: Decide returns the fallback both as
// its decision and in the error.
type FallbackError struct {
	Decision Decision
	Err      error
}

func (e *FallbackError) Error() string {
	return fmt.Sprintf("tool policy failed (fallback %s): %v", e.Decision.Verdict, e.Err)
}

func (e *FallbackError) Unwrap() error { return e.Err }

// Resolve decides call with p and returns the decision to act on: the
// policy's, or, when the policy failed, its fallback (a *FallbackError) or
// else fallback. The error, if any, is the failure to report; the decision is
// valid either way.
func Resolve(ctx context.Context, p Policy, call Call, fallback Decision) (Decision, error) {
	d, err := p.Decide(ctx, call)
	if err == nil {
		if err = d.Check(); err == nil {
			return d, nil
		}
	}
	var fb *FallbackError
	if errors.As(err, &fb) && fb.Decision.Check() == nil {
		return fb.Decision, err
	}
	return fallback, err
}

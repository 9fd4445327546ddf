// Package policy defines the input policy: what the host does with an input
// that arrives while its thread is busy.
//
// A Policy decides one submission at a time and declares in its Manifest every
// action it can ever return. The host relies on that declaration: a policy
// whose manifest has no inject never gets an injection hook installed, so
// a runtime that cannot inject pays nothing for the capability. A decision
// outside the manifest is treated as a failure of the policy.
//
// Native Go policies (Static, and those built by the runtime's users) and
// sandboxed wasm guests implement the same interface.
package policy

import (
	"context"
	"fmt"
	"slices"

	"github.com/agenthost/agenthost/host/runstate"
)

// Input is the submission being decided.
type Input struct {
	Content  string
	Hint     string // the submitter's hint, e.g. "refine" or "redirect"
	Metadata map[string]string
}

// RunInfo describes one run of the busy thread.
type RunInfo struct {
	RunID string
	Seq   int64
	// Steps is the number of model steps the run has finished (active run).
	Steps int
	// Inputs are the contents of the run's inputs, in order.
	Inputs []string
}

// Request is what a policy decides on.
type Request struct {
	ThreadID string
	Input    Input
	Active   *RunInfo  // the thread's active run, if any
	Queued   []RunInfo // its queued runs, in seq order
}

// Manifest is what a policy declares about itself.
type Manifest struct {
	Name    string
	Version string
	// Actions lists every action Decide can ever return.
	Actions []runstate.Action
}

// CanReturn reports whether the manifest declares action a.
func (m Manifest) CanReturn(a runstate.Action) bool { return slices.Contains(m.Actions, a) }

// Policy decides what happens to an input that arrives at a busy thread.
// Implementations must be safe for concurrent use.
type Policy interface {
	Manifest() Manifest
	Decide(ctx context.Context, req Request) (runstate.Decision, error)
}

// Static is a policy that always returns the same decision.
type Static struct {
	Name     string
	Decision runstate.Decision
}

// Manifest implements Policy.
func (s Static) Manifest() Manifest {
	return Manifest{Name: s.Name, Version: "1", Actions: []runstate.Action{s.Decision.Action}}
}

// Decide implements Policy.
func (s Static) Decide(context.Context, Request) (runstate.Decision, error) { return s.Decision, nil }

// Check validates a decision against the policy's manifest.
func Check(m Manifest, d runstate.Decision) error {
	if !d.Action.Valid() {
		return fmt.Errorf("policy %s returned unknown action %q", m.Name, d.Action)
	}
	if !m.CanReturn(d.Action) {
		return fmt.Errorf("policy %s returned %q, which its manifest does not declare", m.Name, d.Action)
	}
	return nil
}

// FallbackError is returned by a Policy whose call failed and which answers
// with a fallback decision of its own (a wasm guest's configured fallback):
// Decide returns the fallback both as its decision and in the error. The
// runtime counts the failure and admits the input with Decision, which must
// be in the manifest like any other.
type FallbackError struct {
	Decision runstate.Decision
	Err      error
}

func (e *FallbackError) Error() string {
	return fmt.Sprintf("input policy failed (fallback %s): %v", e.Decision.Action, e.Err)
}

func (e *FallbackError) Unwrap() error { return e.Err }

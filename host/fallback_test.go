package host_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// fallbackPolicy fails every call and answers with its own fallback, as a
// wasm guest does.
type fallbackPolicy struct{ fb runstate.Decision }

func (p fallbackPolicy) Manifest() policy.Manifest {
	return policy.Manifest{Name: "failing", Version: "1", Actions: []runstate.Action{runstate.ActionQueue, p.fb.Action}}
}

func (p fallbackPolicy) Decide(context.Context, policy.Request) (runstate.Decision, error) {
	return p.fb, &policy.FallbackError{Decision: p.fb, Err: errors.New("guest trapped")}
}

// TestPolicyFallbackCounted: a policy that fails and answers with its
// fallback is counted in PolicyFallbacks, and its fallback decides.
func TestPolicyFallbackCounted(t *testing.T) {
	h := newHarness(t, memdriver.New(), fallbackPolicy{fb: runstate.Decision{Action: runstate.ActionReject}}, twoSteps)
	h.submit("T", "first", "k1", "")
	_, err := h.rt.Submit(context.Background(), "T", "second", host.SubmitOptions{IdempotencyKey: "k2"})
	if !errors.Is(err, runstate.ErrBusy) {
		t.Fatalf("second submission: %v, want the fallback's rejection", err)
	}
	if st := h.rt.Stats(); st.PolicyFallbacks != 1 || st.InjectHook {
		t.Errorf("stats: fallbacks %d, inject hook %v", st.PolicyFallbacks, st.InjectHook)
	}
}

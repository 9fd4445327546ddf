package host_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// countingPolicy queues every input, counts its calls, and runs during
// each call, if set, a function of the call's number.
type countingPolicy struct {
	calls  atomic.Int64
	during func(n int64)
}

func (p *countingPolicy) Manifest() policy.Manifest {
	return policy.Manifest{Name: "counting", Version: "1", Actions: []runstate.Action{runstate.ActionQueue}}
}

func (p *countingPolicy) Decide(context.Context, policy.Request) (runstate.Decision, error) {
	n := p.calls.Add(1)
	if p.during != nil {
		p.during(n)
	}
	return runstate.Decision{Action: runstate.ActionQueue}, nil
}

// conflicting refuses the next commits it is armed for with a version
// conflict, writing nothing: the thread does not change between the
// admission's attempts.
type conflicting struct {
	driver.Driver
	left atomic.Int64
}

func (c *conflicting) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	if c.left.Add(-1) >= 0 {
		return 0, driver.ErrVersionConflict
	}
	return c.Driver.Commit(ctx, b)
}

// A submission whose commit conflicts without the thread changing asks the
// policy once: the retries reuse its decision.
func TestPolicyNotAskedAgainForTheSameView(t *testing.T) {
	d := &conflicting{Driver: memdriver.New()}
	pol := &countingPolicy{}
	h := newHarness(t, d, pol, twoSteps)
	h.submit("T", "first", "", "") // starts, and waits on the gate
	d.left.Store(10)
	h.submit("T", "second", "", "")
	if n := pol.calls.Load(); n != 1 {
		t.Fatalf("the policy was called %d times for one submission whose view did not change, want 1", n)
	}
}

// A submission whose thread keeps changing under it (each attempt loses
// to another admission) asks the policy at most three times, and is
// admitted with the policy's last decision.
func TestPolicyCallsPerSubmissionBounded(t *testing.T) {
	mem := memdriver.New()
	pol := &countingPolicy{}
	h := newHarness(t, mem, pol, twoSteps)
	h.submit("T", "first", "", "")
	// Another writer to the store admits an input to the thread during
	// each of the policy's first 20 calls: every attempt of the
	// submission then conflicts, and sees a thread that changed.
	rival := store.New(mem, store.Options{})
	queue := func(context.Context, store.ThreadView) (runstate.Decision, error) {
		return runstate.Decision{Action: runstate.ActionQueue}, nil
	}
	var mu sync.Mutex
	var rivalErr error
	pol.during = func(n int64) {
		if n > 20 {
			return
		}
		if _, err := rival.Admit(context.Background(), store.Submission{ThreadID: "T", Content: fmt.Sprintf("rival %d", n)}, queue); err != nil {
			mu.Lock()
			rivalErr = err
			mu.Unlock()
		}
	}
	tk := h.submit("T", "second", "", "")
	if rivalErr != nil {
		t.Fatal(rivalErr)
	}
	if n := pol.calls.Load(); n > 3 {
		t.Fatalf("the policy was called %d times for one submission, want at most 3", n)
	}
	run, err := h.rt.Run(context.Background(), tk.RunID)
	if err != nil || run.State != "queued" {
		t.Fatalf("the submission's run: %+v, %v, want queued", run, err)
	}
}

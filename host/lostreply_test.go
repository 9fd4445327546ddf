package host_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// lossy is the reference driver with replies lost: a commit it is told to
// lose is applied and its caller hears ErrUnavailable, and the reads that
// would settle it (LoadThread for a batch, ReadSteps for steps) then fail
// as often as asked, so that the host's store layer reports the outcome
// unknown and its caller must settle it. With idsFirst, a step whose id is
// stored is refused as invalid before its Seq is checked, as a driver may.
type lossy struct {
	*memdriver.Driver
	mu sync.Mutex
	// loseBatch, loseSteps: whether to lose this commit's reply.
	loseBatch func(driver.Batch) bool
	loseSteps func(driver.StepBatch) bool
	// failLoads, failReads: LoadThread and ReadSteps calls still to fail.
	failLoads, failReads int
	idsFirst             bool
	lost                 []string // what was lost, for the failure message
}

var errLost = fmt.Errorf("%w: the reply was lost", driver.ErrUnavailable)

func (l *lossy) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	v, err := l.Driver.Commit(ctx, b)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && l.loseBatch != nil && l.loseBatch(b) {
		l.loseBatch = nil
		l.failLoads = 2
		l.lost = append(l.lost, "commit "+b.CommitID)
		return 0, errLost
	}
	return v, err
}

func (l *lossy) CommitSteps(ctx context.Context, b driver.StepBatch) error {
	if l.idsFirst {
		got, err := l.Driver.ReadSteps(ctx, b.RunID, 0, 1<<20)
		if err != nil {
			return err
		}
		for _, st := range b.Steps {
			if slices.ContainsFunc(got, func(g record.Step) bool { return g.ID == st.ID }) {
				return fmt.Errorf("%w: step %s exists", driver.ErrInvalidArgument, st.ID)
			}
		}
	}
	err := l.Driver.CommitSteps(ctx, b)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && l.loseSteps != nil && l.loseSteps(b) {
		l.loseSteps = nil
		l.failReads = 2
		l.lost = append(l.lost, "steps "+b.Steps[0].ID)
		return errLost
	}
	return err
}

func (l *lossy) LoadThread(ctx context.Context, id string) (driver.ThreadSnapshot, error) {
	l.mu.Lock()
	fail := l.failLoads > 0
	if fail {
		l.failLoads--
	}
	l.mu.Unlock()
	if fail {
		return driver.ThreadSnapshot{}, fmt.Errorf("%w: not answering", driver.ErrUnavailable)
	}
	return l.Driver.LoadThread(ctx, id)
}

func (l *lossy) ReadSteps(ctx context.Context, runID string, afterSeq int64, limit int) ([]record.Step, error) {
	l.mu.Lock()
	fail := l.failReads > 0
	if fail {
		l.failReads--
	}
	l.mu.Unlock()
	if fail {
		return nil, fmt.Errorf("%w: not answering", driver.ErrUnavailable)
	}
	return l.Driver.ReadSteps(ctx, runID, afterSeq, limit)
}

func (l *lossy) lostAll(t *testing.T, want int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lost) != want {
		t.Fatalf("lost %v, want %d lost replies: the test did not reach its fault", l.lost, want)
	}
}

func hasTake(b driver.Batch) bool {
	return slices.ContainsFunc(b.Steps, func(s record.Step) bool { return s.Kind == record.StepTake })
}

// TestTakeReplyLost: the commit of a take lands but its reply is lost and
// the thread cannot be read to settle it (ErrOutcomeUnknown). The run reads
// its step log back, finds the take, and goes on with the input it took:
// it answers both inputs once, instead of stopping at its next step (whose
// Seq the take holds) and staying active with no executor.
func TestTakeReplyLost(t *testing.T) {
	l := &lossy{Driver: memdriver.New(), loseBatch: hasTake}
	h := newHarness(t, l, hintPolicy{}, twoSteps)
	tA, tB := startS1(h)
	h.release()
	want := "summarise this thread | actually, in bullet points"
	rA, rB := h.wait(tA.RunID), h.wait(tB.RunID)
	if answer(rA) != want || rB.AnsweredByRunID != tA.RunID {
		t.Fatalf("A: %+v\nB: %+v", rA, rB)
	}
	l.lostAll(t, 1)
}

// TestTerminalReplyLost: the completing commit of a run that absorbs lands
// but its reply is lost and the thread cannot be read to settle it. The
// retry finds the run ended; the executor reads it back, finds its own
// commit, and acts on it: the absorbed run is told it was absorbed and the
// terminal event is emitted, instead of "the run moved on".
func TestTerminalReplyLost(t *testing.T) {
	l := &lossy{Driver: memdriver.New()}
	l.loseBatch = func(b driver.Batch) bool {
		return slices.ContainsFunc(b.Runs, func(r record.Run) bool { return r.State == record.StateCompleted })
	}
	h := newHarness(t, l, hintPolicy{}, twoSteps)
	tA, tB := startS1(h)
	h.release()
	h.waitEvent(tA.RunID, host.EventTerminal, "reason", string(record.ReasonCompleted))
	h.waitEvent(tB.RunID, host.EventAbsorbed, "into_run_id", tA.RunID)
	if st := h.rt.Stats(); st.Absorptions != 1 {
		t.Fatalf("absorptions %d, want 1", st.Absorptions)
	}
	l.lostAll(t, 1)
}

// TestStepReplyLost: a tool result's step commit lands but its reply is
// lost and the log cannot be read to settle it; the retried commit is
// refused by a driver that checks ids first (the step exists). The store
// reads it back and finds it: the result the model sees is the tool's, not
// an "unstorable" error, and it is written once.
func TestStepReplyLost(t *testing.T) {
	l := &lossy{Driver: memdriver.New(), idsFirst: true}
	l.loseSteps = func(b driver.StepBatch) bool { return b.Steps[0].Kind == record.StepTool }
	m := &stepsModel{steps: 1, calls: map[int]int{}}
	tool := &keyedTool{}
	rt, err := host.New(context.Background(), host.Config{Driver: l, Model: m, Tools: []model.Tool{tool}, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	tk, err := rt.Submit(context.Background(), "T", "question", host.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r, err := rt.Wait(ctx, tk.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if want := "question [c0.0=r0.0] [c0.1=r0.1]"; answer(r) != want {
		t.Fatalf("answer %q, want %q: the tool's result is not what the model saw", answer(r), want)
	}
	steps, err := rt.Store().ReadSteps(context.Background(), tk.RunID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range steps {
		got = append(got, string(st.Kind)+":"+st.Message.Content)
	}
	if want := []string{"model:", "tool:r0.0", "tool:r0.1", "model:" + answer(r)}; !slices.Equal(got, want) {
		t.Fatalf("step log %q, want %q", got, want)
	}
	if keys := tool.log(); len(keys) != 2 {
		t.Fatalf("tool calls %v, want each of the 2 once", keys)
	}
	l.lostAll(t, 1)
}

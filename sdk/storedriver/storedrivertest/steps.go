package storedrivertest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

// The rules of store protocol 2: step records (driver.StepStore) and thread
// listing (driver.ThreadLister). A driver that implements neither speaks
// protocol 1: the tests say so and skip, and the host restarts its
// recovered runs from their first step and takes no input by injection.

// steps returns d's StepStore and ThreadLister, or skips the test when d
// speaks protocol 1.
func steps(t *testing.T, d driver.Driver) (driver.StepStore, driver.ThreadLister) {
	t.Helper()
	if driver.Speaks(d) < 2 {
		t.Skip("the driver speaks store protocol 1 (it implements neither driver.StepStore nor driver.ThreadLister): " +
			"the step rules do not apply; a host on it restarts recovered runs from their first step and takes no input by injection")
	}
	return d.(driver.StepStore), d.(driver.ThreadLister)
}

// StepOwner and StepAttempt are the owner and attempt of the active runs
// the step tests make.
const (
	StepOwner   = "host-a"
	StepAttempt = 1
)

// Activate returns run r made active by owner at attempt, as the host's
// start of a run writes it.
func Activate(r record.Run, owner string, attempt int) record.Run {
	r.State, r.Owner, r.Attempt, r.StartedAt = record.StateActive, owner, attempt, T0
	return r
}

// Step returns step seq of run r: a model message for seq 1, 4, 7, ...,
// a tool result after it, and a take of the inputs of run "taken" after
// that.
func Step(r record.Run, seq int64) record.Step {
	s := record.Step{ID: fmt.Sprintf("%s-step-%d", r.ID, seq), RunID: r.ID, ThreadID: r.ThreadID, Seq: seq,
		Attempt: r.Attempt, Model: int((seq - 1) / 3), CreatedAt: T0}
	msg := record.Message{ID: s.ID + "-msg", ThreadID: r.ThreadID, RunID: r.ID, CreatedAt: T0}
	switch (seq - 1) % 3 {
	case 0:
		s.Kind = record.StepModel
		msg.Role, msg.Content = record.RoleAssistant, "thinking"
		msg.ToolCalls = []record.ToolCall{{ID: s.ID + "-call", Name: "search", Arguments: `{"q":"x"}`}}
		s.Message = msg
	case 1:
		s.Kind = record.StepTool
		msg.Role, msg.Content, msg.ToolCallID = record.RoleTool, "found", fmt.Sprintf("%s-step-%d-call", r.ID, seq-1)
		s.Message = msg
	default:
		s.Kind = record.StepTake
		s.Taken = []record.Take{{RunID: "taken", InputMessageIDs: []string{"taken-in", "taken-in-2"}}}
	}
	return s
}

// Steps returns steps from to to (inclusive) of run r.
func Steps(r record.Run, from, to int64) []record.Step {
	var out []record.Step
	for seq := from; seq <= to; seq++ {
		out = append(out, Step(r, seq))
	}
	return out
}

// StepBatchOf returns the CommitSteps batch of steps for r as its owner.
func StepBatchOf(r record.Run, steps ...record.Step) driver.StepBatch {
	return driver.StepBatch{ThreadID: r.ThreadID, RunID: r.ID, Owner: r.Owner, Attempt: r.Attempt, Steps: steps}
}

func equalSteps(a, b []record.Step) bool {
	return reflect.DeepEqual(mapSlice(a, record.NormalizeStep), mapSlice(b, record.NormalizeStep))
}

// activeRun admits a run on th and starts it as StepOwner.
func (th *thread) activeRun(id string) record.Run {
	th.t.Helper()
	r, _ := th.admit(id, "")
	r = Activate(r, StepOwner, StepAttempt)
	th.commit(th.Batch(th.Open, []record.Run{r}, nil, nil))
	return r
}

// expectSteps checks the run's whole step log.
func expectSteps(t *testing.T, ss driver.StepStore, runID string, want []record.Step) {
	t.Helper()
	got, err := ss.ReadSteps(context.Background(), runID, 0, 1000)
	if err != nil || !equalSteps(got, want) {
		t.Fatalf("ReadSteps(%s) = %+v, %v; want %+v", runID, got, err, want)
	}
}

func expectVersion(t *testing.T, d driver.Driver, threadID string, v int64) {
	t.Helper()
	snap, err := d.LoadThread(context.Background(), threadID)
	if err != nil || snap.Thread.Version != v {
		t.Fatalf("thread %s: %+v, %v; want version %d", threadID, snap.Thread, err, v)
	}
}

func testStepsCommitAndRead(t *testing.T, d driver.Driver) {
	ss, _ := steps(t, d)
	ctx := context.Background()
	th := newThread(t, d, "thread-steps")
	r := th.activeRun("run-s")
	v := th.Version
	want := Steps(r, 1, 3)
	if err := ss.CommitSteps(ctx, StepBatchOf(r, want...)); err != nil {
		t.Fatalf("CommitSteps 1-3: %v", err)
	}
	expectVersion(t, d, th.ID, v) // steps do not move the version
	expectSteps(t, ss, r.ID, want)
	if err := ss.CommitSteps(ctx, StepBatchOf(r, Step(r, 4))); err != nil {
		t.Fatalf("CommitSteps 4: %v", err)
	}
	want = append(want, Step(r, 4))
	expectVersion(t, d, th.ID, v)
	// The thread's version is still the one the host read: an admission
	// computed before the steps commits.
	th.admit("run-after", "")

	// Paging.
	for _, c := range []struct {
		after int64
		limit int
		want  []record.Step
	}{
		{0, 2, want[:2]}, {1, 2, want[1:3]}, {3, 10, want[3:]}, {4, 10, nil}, {-5, 1, want[:1]}, {100, 1, nil},
	} {
		got, err := ss.ReadSteps(ctx, r.ID, c.after, c.limit)
		if err != nil || !equalSteps(got, c.want) {
			t.Fatalf("ReadSteps(after %d, limit %d) = %+v, %v; want %+v", c.after, c.limit, got, err, c.want)
		}
	}
	if got, err := ss.ReadSteps(ctx, "no-such-run", 0, 10); err != nil || len(got) != 0 {
		t.Fatalf("ReadSteps of an unknown run = %+v, %v; want none", got, err)
	}
	for _, limit := range []int{0, -1} {
		_, err := ss.ReadSteps(ctx, r.ID, 0, limit)
		wantErr(t, fmt.Sprintf("ReadSteps with limit %d", limit), err, driver.ErrInvalidArgument)
	}
	_, err := ss.ReadSteps(ctx, "", 0, 10)
	wantErr(t, "ReadSteps of an empty run id", err, driver.ErrInvalidArgument)
}

func testStepsRefused(t *testing.T, d driver.Driver) {
	ss, _ := steps(t, d)
	ctx := context.Background()
	th := newThread(t, d, "thread-steps-refused")
	r := th.activeRun("run-r")
	if err := ss.CommitSteps(ctx, StepBatchOf(r, Steps(r, 1, 2)...)); err != nil {
		t.Fatal(err)
	}
	queued, _ := th.admit("run-q", "")
	v := th.Version
	want := Steps(r, 1, 2)

	try := func(what string, sentinel error, b driver.StepBatch) {
		t.Helper()
		err := ss.CommitSteps(ctx, b)
		wantErr(t, what, err, sentinel)
		expectSteps(t, ss, r.ID, want)
		expectVersion(t, d, th.ID, v)
	}
	wrongOwner, wrongAttempt := StepBatchOf(r, Step(r, 3)), StepBatchOf(r, Step(r, 3))
	wrongOwner.Owner = "host-b"
	wrongAttempt.Attempt = 2
	try("steps of another owner", driver.ErrVersionConflict, wrongOwner)
	try("steps of another attempt", driver.ErrVersionConflict, wrongAttempt)
	try("steps that skip a seq", driver.ErrVersionConflict, StepBatchOf(r, Steps(r, 4, 5)...))
	try("steps that repeat a seq", driver.ErrVersionConflict, StepBatchOf(r, Steps(r, 2, 3)...))
	try("steps that start again", driver.ErrVersionConflict, StepBatchOf(r, Step(r, 1)))
	q := queued
	q.Owner = StepOwner
	try("steps of a queued run", driver.ErrVersionConflict, StepBatchOf(q, Step(q, 1)))
	ghost := Activate(record.Run{ID: "run-ghost", ThreadID: th.ID}, StepOwner, StepAttempt)
	try("steps of a run never written", driver.ErrVersionConflict, StepBatchOf(ghost, Step(ghost, 1)))
	if _, err := ss.ReadSteps(ctx, q.ID, 0, 10); err != nil {
		t.Fatal(err)
	}
	expectSteps(t, ss, q.ID, nil)
	expectSteps(t, ss, ghost.ID, nil)

	// Shapes every driver refuses before it looks at the store.
	bad := func(what string, mutate func(b *driver.StepBatch)) {
		t.Helper()
		b := StepBatchOf(r, Steps(r, 3, 4)...)
		mutate(&b)
		try(what, driver.ErrInvalidArgument, b)
	}
	bad("no steps", func(b *driver.StepBatch) { b.Steps = nil })
	bad("no run id", func(b *driver.StepBatch) { b.RunID = "" })
	bad("no thread id", func(b *driver.StepBatch) { b.ThreadID = "" })
	bad("no owner", func(b *driver.StepBatch) { b.Owner = "" })
	bad("a step of another run", func(b *driver.StepBatch) { b.Steps[1].RunID = "run-q" })
	bad("a step of another thread", func(b *driver.StepBatch) { b.Steps[1].ThreadID = "elsewhere" })
	bad("steps out of order", func(b *driver.StepBatch) { b.Steps[0], b.Steps[1] = b.Steps[1], b.Steps[0] })
	bad("a step without an id", func(b *driver.StepBatch) { b.Steps[0].ID = "" })
	bad("a step id twice", func(b *driver.StepBatch) { b.Steps[1].ID = b.Steps[0].ID })
	bad("an unknown kind", func(b *driver.StepBatch) { b.Steps[0].Kind = "dream" })
	bad("a take that takes nothing", func(b *driver.StepBatch) { b.Steps[0].Kind, b.Steps[0].Taken = record.StepTake, nil })
	bad("a step id already stored", func(b *driver.StepBatch) { b.Steps[0].ID = want[0].ID })
	if _, ok := d.(driver.Leaser); !ok {
		bad("a fenced batch on a driver without leases", func(b *driver.StepBatch) { b.Fence = 1 })
	}

	// A run that ended takes no more steps; its steps stay.
	r.State, r.TerminalReason, r.EndedAt = record.StateFailed, record.ReasonFailed, T0
	th.commit(th.Batch([]string{q.ID}, []record.Run{r}, nil, nil))
	v = th.Version
	try("steps of a run that ended", driver.ErrVersionConflict, StepBatchOf(Activate(r, StepOwner, StepAttempt), Step(r, 3)))
}

func testBatchSteps(t *testing.T, d driver.Driver) {
	ss, _ := steps(t, d)
	ctx := context.Background()
	th := newThread(t, d, "thread-batch-steps")
	r := th.activeRun("run-b")
	if err := ss.CommitSteps(ctx, StepBatchOf(r, Step(r, 1))); err != nil {
		t.Fatal(err)
	}
	want := Steps(r, 1, 1)

	// Refused: nothing of the batch is written, steps included.
	refused := func(what string, sentinel error, b driver.Batch) {
		t.Helper()
		_, err := d.Commit(ctx, b)
		wantErr(t, what, err, sentinel)
		expectUntouched(t, d, th.ID, th.Version, int(th.NextSeq-1), "run-new")
		expectSteps(t, ss, r.ID, want)
	}
	mk := func(b *Builder, steps ...record.Step) driver.Batch {
		n := b.Run("run-new")
		batch := b.Batch(append(clone(b.Open), n.ID), []record.Run{n}, []record.Message{b.Msg("run-new-in", n.ID)}, nil)
		batch.Steps = steps
		return batch
	}
	refused("a batch whose steps skip a seq", driver.ErrVersionConflict, mk(th.Fork(), Step(r, 3)))
	refused("a batch whose steps repeat a seq", driver.ErrVersionConflict, mk(th.Fork(), Step(r, 1)))
	stale := th.Fork()
	stale.Version--
	refused("a batch at a stale version with good steps", driver.ErrVersionConflict, mk(stale, Steps(r, 2, 3)...))
	bad := mk(th.Fork(), Steps(r, 2, 3)...)
	bad.Steps[0].ThreadID = "elsewhere"
	refused("a batch with a step of another thread", driver.ErrInvalidArgument, bad)

	// Accepted: the steps are written with the rest, and the version moves.
	b := mk(th.Fork(), Steps(r, 2, 3)...)
	th.RunSeq++
	th.NextSeq++
	th.commit(b)
	want = Steps(r, 1, 3)
	expectSteps(t, ss, r.ID, want)
	expectVersion(t, d, th.ID, b.Thread.Version)
	// The next seq follows the batch's steps.
	if err := ss.CommitSteps(ctx, StepBatchOf(r, Step(r, 4))); err != nil {
		t.Fatalf("CommitSteps after a batch with steps: %v", err)
	}
}

func clone(s []string) []string { return append([]string(nil), s...) }

func testConcurrentSteps(t *testing.T, d driver.Driver) {
	ss, _ := steps(t, d)
	ctx := context.Background()
	th := newThread(t, d, "thread-steps-race")
	var runs []record.Run
	for i := range 4 {
		runs = append(runs, th.activeRun(fmt.Sprintf("run-%d", i)))
	}
	// Per run, 8 writers race for seq 1: one wins. The runs' winners do
	// not get in each other's way.
	const writers = 8
	var wg sync.WaitGroup
	wins := make([][]int, len(runs))
	var mu sync.Mutex
	for ri, r := range runs {
		for w := range writers {
			wg.Go(func() {
				s := Step(r, 1)
				s.ID = fmt.Sprintf("%s-writer-%d", r.ID, w)
				err := ss.CommitSteps(ctx, StepBatchOf(r, s))
				switch {
				case err == nil:
					mu.Lock()
					wins[ri] = append(wins[ri], w)
					mu.Unlock()
				case !isConflict(err):
					t.Errorf("run %s writer %d: %v, want nil or ErrVersionConflict", r.ID, w, err)
				}
			})
		}
	}
	wg.Wait()
	for ri, r := range runs {
		if len(wins[ri]) != 1 {
			t.Fatalf("run %s: %d writers of seq 1 won, want 1", r.ID, len(wins[ri]))
		}
		got, err := ss.ReadSteps(ctx, r.ID, 0, 100)
		if err != nil || len(got) != 1 || got[0].ID != fmt.Sprintf("%s-writer-%d", r.ID, wins[ri][0]) {
			t.Fatalf("run %s steps = %+v, %v", r.ID, got, err)
		}
	}
	expectVersion(t, d, th.ID, th.Version)
}

func isConflict(err error) bool { return errors.Is(err, driver.ErrVersionConflict) }

func testListThreads(t *testing.T, d driver.Driver) {
	_, tl := steps(t, d)
	ctx := context.Background()
	got, err := tl.ListThreads(ctx, "", 10)
	if err != nil || len(got) != 0 {
		t.Fatalf("ListThreads of an empty store = %+v, %v", got, err)
	}
	ids := []string{"thread-m", "thread-a", "thread-z", "thread-b", "thread-a1"}
	headers := map[string]record.Thread{}
	for _, id := range ids {
		th := newThread(t, d, id)
		th.admit(id+"-run", "")
		snap, err := d.LoadThread(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		headers[id] = snap.Thread
	}
	sorted := []string{"thread-a", "thread-a1", "thread-b", "thread-m", "thread-z"}
	var all []string
	after := ""
	for {
		page, err := tl.ListThreads(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Fatalf("ListThreads(limit 2) returned %d", len(page))
		}
		for _, h := range page {
			if !reflect.DeepEqual(record.NormalizeThread(h), record.NormalizeThread(headers[h.ID])) {
				t.Fatalf("ListThreads header %+v, want %+v", h, headers[h.ID])
			}
			all = append(all, h.ID)
		}
		after = page[len(page)-1].ID
	}
	if !reflect.DeepEqual(all, sorted) {
		t.Fatalf("ListThreads pages = %v, want %v", all, sorted)
	}
	if page, err := tl.ListThreads(ctx, "thread-a", 10); err != nil || len(page) != 4 || page[0].ID != "thread-a1" {
		t.Fatalf("ListThreads after thread-a = %+v, %v", page, err)
	}
	_, err = tl.ListThreads(ctx, "", 0)
	wantErr(t, "ListThreads with limit 0", err, driver.ErrInvalidArgument)
}

// Package storedrivertest is the store driver contract as a test: a function
// a driver's own tests call, in the manner of testing/fstest.TestFS.
//
// Start at Run. It takes a function that opens a fresh, empty driver, and
// checks what every driver must do: atomic conditional commits, version
// conflicts, idempotency key uniqueness, history order and paging, runs
// listed by state after transitions, argument errors, and ErrClosed after
// Close; and, for a driver of store protocol 2 (driver.StepStore and
// driver.ThreadLister), the step rules: CommitSteps's conditions each
// refused with its sentinel and nothing written, the thread's version
// unchanged, Batch.Steps atomic with the rest of a commit, paging of steps
// and threads. It imports nothing of the host, so a third-party driver can run it.
package storedrivertest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

// Open returns a fresh, empty driver for one subtest. Run closes it.
type Open func(t *testing.T) driver.Driver

// Run runs the contract against the drivers open returns, one per subtest.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(t *testing.T, d driver.Driver)
	}{
		{"Info", testInfo},
		{"EmptyThread", testEmptyThread},
		{"CommitAndRead", testCommitAndRead},
		{"VersionConflict", testVersionConflict},
		{"Atomicity", testAtomicity},
		{"IdempotencyUnique", testIdempotencyUnique},
		{"ConcurrentCommits", testConcurrentCommits},
		{"HistoryPaging", testHistoryPaging},
		{"ListRunsByState", testListRunsByState},
		{"InvalidArguments", testInvalidArguments},
		{"StepsCommitAndRead", testStepsCommitAndRead},
		{"StepsRefused", testStepsRefused},
		{"BatchSteps", testBatchSteps},
		{"ConcurrentSteps", testConcurrentSteps},
		{"ListThreads", testListThreads},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := open(t)
			t.Cleanup(func() { _ = d.Close(context.Background()) })
			tc.fn(t, d)
		})
	}
}

var t0 = T0

// thread commits the batches a Builder makes for one thread, and fails the
// test when one that must succeed does not.
type thread struct {
	*Builder
	t *testing.T
	d driver.Driver
}

func newThread(t *testing.T, d driver.Driver, id string) *thread {
	return &thread{Builder: NewBuilder(id), t: t, d: d}
}

// commit commits b and expects success.
func (th *thread) commit(b driver.Batch) {
	th.t.Helper()
	v, err := th.d.Commit(context.Background(), b)
	if err != nil {
		th.t.Fatalf("commit %s: %v", b.CommitID, err)
	}
	if v != b.Thread.Version {
		th.t.Fatalf("commit %s returned version %d, want %d", b.CommitID, v, b.Thread.Version)
	}
	th.Committed(b)
}

// admit commits a new queued run with its input message and, if key is not
// empty, an idempotency record.
func (th *thread) admit(runID, key string) (record.Run, record.Message) {
	th.t.Helper()
	r := th.Run(runID)
	m := th.Msg(runID+"-in", runID)
	var keys []record.Idempotency
	if key != "" {
		keys = []record.Idempotency{th.Key(key, runID, m.ID)}
	}
	th.commit(th.Batch(append(slices.Clone(th.Open), runID), []record.Run{r}, []record.Message{m}, keys))
	return r, m
}

// Equality up to representation: times compare by instant, and nil and
// empty slices and maps are the same.

func mapSlice[T any](xs []T, f func(T) T) []T {
	out := make([]T, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func equalRuns(a, b []record.Run) bool {
	return reflect.DeepEqual(mapSlice(a, record.NormalizeRun), mapSlice(b, record.NormalizeRun))
}

func equalMessages(a, b []record.Message) bool {
	return reflect.DeepEqual(mapSlice(a, record.NormalizeMessage), mapSlice(b, record.NormalizeMessage))
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func testInfo(t *testing.T, d driver.Driver) {
	info, err := d.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.ProtocolVersion < driver.OldestProtocolVersion || info.ProtocolVersion > driver.ProtocolVersion || info.Name == "" {
		t.Fatalf("Info = %+v, want a protocol version from %d to %d and a name", info, driver.OldestProtocolVersion, driver.ProtocolVersion)
	}
	switch speaks := driver.Speaks(d); {
	case info.ProtocolVersion > speaks:
		// Across the plugin boundary the driver speaks what it implements.
		t.Logf("Info claims store protocol %d, but the driver implements protocol %d only (driver.StepStore and driver.ThreadLister are both needed for 2): it is served as protocol %d",
			info.ProtocolVersion, speaks, speaks)
	case speaks < driver.ProtocolVersion:
		t.Logf("the driver speaks store protocol %d: the step rules are skipped; a host on it restarts recovered runs from their first step and takes no input by injection", speaks)
	}
}

func testEmptyThread(t *testing.T, d driver.Driver) {
	snap, err := d.LoadThread(context.Background(), "never-written")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Thread.ID != "never-written" || snap.Thread.Version != 0 || len(snap.Runs) != 0 {
		t.Fatalf("LoadThread of an unknown thread = %+v, want version 0 and no runs", snap)
	}
	msgs, err := d.ReadHistory(context.Background(), "never-written", 0, 10)
	if err != nil || len(msgs) != 0 {
		t.Fatalf("ReadHistory of an unknown thread = %v, %v; want empty", msgs, err)
	}
}

func testCommitAndRead(t *testing.T, d driver.Driver) {
	ctx := context.Background()
	th := newThread(t, d, "thread-a")
	r1 := th.Run("run-1")
	r2 := th.Run("run-2")
	m1 := th.Msg("msg-1", r1.ID)
	m2 := th.Msg("msg-2", r2.ID)
	m2.Role, m2.ToolCalls, m2.Hint = record.RoleAssistant, []record.ToolCall{{ID: "call-1", Name: "search", Arguments: `{"q":"x"}`}}, "hint"
	k := record.Idempotency{ThreadID: th.ID, Key: "key-1", RunID: r1.ID, InputMessageID: m1.ID, ContentHash: "abc", CreatedAt: t0}
	r2.TakenBy, r1.TranscriptIDs = r1.ID, []string{m1.ID, m2.ID} // fields of store protocol 2, kept by every driver
	b := th.Batch([]string{r2.ID, r1.ID}, []record.Run{r1, r2}, []record.Message{m1, m2}, []record.Idempotency{k})
	th.commit(b)

	snap, err := d.LoadThread(ctx, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(record.NormalizeThread(snap.Thread), record.NormalizeThread(b.Thread)) {
		t.Fatalf("LoadThread header = %+v, want %+v", snap.Thread, b.Thread)
	}
	if !equalRuns(snap.Runs, []record.Run{r2, r1}) {
		t.Fatalf("LoadThread runs = %+v, want the open runs in header order", snap.Runs)
	}
	runs, err := d.GetRuns(ctx, []string{r2.ID, r1.ID, r2.ID})
	if err != nil || !equalRuns(runs, []record.Run{r2, r1, r2}) {
		t.Fatalf("GetRuns = %+v, %v", runs, err)
	}
	got, err := d.GetIdempotency(ctx, th.ID, k.Key)
	if err != nil || record.NormalizeIdempotency(got) != record.NormalizeIdempotency(k) {
		t.Fatalf("GetIdempotency = %+v, %v; want %+v", got, err, k)
	}
	msgs, err := d.ReadHistory(ctx, th.ID, 0, 10)
	if err != nil || !equalMessages(msgs, []record.Message{m1, m2}) {
		t.Fatalf("ReadHistory = %+v, %v", msgs, err)
	}

	// A second commit replaces a run and closes it.
	r1.State, r1.TerminalReason, r1.EndSeq, r1.EndedAt = record.StateCompleted, record.ReasonCompleted, 2, t0.Add(time.Minute)
	th.commit(th.Batch([]string{r2.ID}, []record.Run{r1}, nil, nil))
	snap, err = d.LoadThread(ctx, th.ID)
	if err != nil || snap.Thread.Version != 2 || !equalRuns(snap.Runs, []record.Run{r2}) {
		t.Fatalf("after the second commit LoadThread = %+v, %v", snap, err)
	}
	runs, err = d.GetRuns(ctx, []string{r1.ID})
	if err != nil || !equalRuns(runs, []record.Run{r1}) {
		t.Fatalf("GetRuns after replace = %+v, %v", runs, err)
	}
	// Other threads are untouched.
	snap, err = d.LoadThread(ctx, "thread-b")
	if err != nil || snap.Thread.Version != 0 {
		t.Fatalf("another thread: %+v, %v", snap, err)
	}
}

// expectUntouched checks that the thread is still at version v with the
// given history length and that none of the runs exist.
func expectUntouched(t *testing.T, d driver.Driver, threadID string, v int64, historyLen int, runIDs ...string) {
	t.Helper()
	ctx := context.Background()
	snap, err := d.LoadThread(ctx, threadID)
	if err != nil || snap.Thread.Version != v {
		t.Fatalf("thread %s: %+v, %v; want version %d", threadID, snap.Thread, err, v)
	}
	msgs, err := d.ReadHistory(ctx, threadID, 0, 1000)
	if err != nil || len(msgs) != historyLen {
		t.Fatalf("thread %s history: %d messages, %v; want %d", threadID, len(msgs), err, historyLen)
	}
	for _, id := range runIDs {
		if _, err := d.GetRuns(ctx, []string{id}); !errors.Is(err, driver.ErrNotFound) {
			t.Fatalf("run %s of a refused batch: got %v, want ErrNotFound", id, err)
		}
		for _, st := range record.RunStates {
			runs, err := d.ListRuns(ctx, st, "", 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range runs {
				if r.ID == id {
					t.Fatalf("run %s of a refused batch is listed as %s", id, st)
				}
			}
		}
	}
}

func testVersionConflict(t *testing.T, d driver.Driver) {
	ctx := context.Background()
	th := newThread(t, d, "thread-v")
	th.admit("run-1", "")

	for _, expected := range []int64{0, 2, 7} {
		th2 := *th
		th2.Builder = th.Fork()
		th2.Version = expected
		r := th2.Run("run-x")
		b := th2.Batch([]string{"run-1", "run-x"}, []record.Run{r}, []record.Message{th2.Msg("msg-x", "run-x")}, nil)
		_, err := d.Commit(ctx, b)
		wantErr(t, fmt.Sprintf("commit expecting version %d of a thread at 1", expected), err, driver.ErrVersionConflict)
	}
	expectUntouched(t, d, th.ID, 1, 1, "run-x")
	// The right version still commits.
	th.admit("run-2", "")
}

func testAtomicity(t *testing.T, d driver.Driver) {
	ctx := context.Background()
	th := newThread(t, d, "thread-atom")
	th.admit("run-1", "key-1")

	try := func(what string, want error, mutate func(b *driver.Batch)) {
		t.Helper()
		th2 := *th
		th2.Builder = th.Fork()
		r := th2.Run("run-bad")
		m := th2.Msg("msg-bad", r.ID)
		k := record.Idempotency{ThreadID: th.ID, Key: "key-bad", RunID: r.ID, InputMessageID: m.ID, CreatedAt: t0}
		b := th2.Batch([]string{"run-1", r.ID}, []record.Run{r}, []record.Message{m}, []record.Idempotency{k})
		mutate(&b)
		_, err := d.Commit(ctx, b)
		wantErr(t, what, err, want)
		expectUntouched(t, d, th.ID, 1, 1, "run-bad")
		if _, err := d.GetIdempotency(ctx, th.ID, "key-bad"); !errors.Is(err, driver.ErrNotFound) {
			t.Fatalf("%s: the refused batch's key: got %v, want ErrNotFound", what, err)
		}
	}
	try("existing idempotency key", driver.ErrVersionConflict, func(b *driver.Batch) {
		b.Idempotency = append(b.Idempotency, record.Idempotency{ThreadID: th.ID, Key: "key-1", RunID: "run-bad", InputMessageID: "msg-bad"})
	})
	try("existing message id", driver.ErrInvalidArgument, func(b *driver.Batch) {
		dup := b.Messages[0]
		dup.ID, dup.Seq = "run-1-in", dup.Seq+1
		b.Messages = append(b.Messages, dup)
	})
	try("message seq not after the history", driver.ErrInvalidArgument, func(b *driver.Batch) {
		b.Messages[0].Seq = 1
	})
	try("run of another thread", driver.ErrInvalidArgument, func(b *driver.Batch) {
		b.Runs = append(b.Runs, record.Run{ID: "run-other", ThreadID: "thread-other", State: record.StateQueued})
	})
	try("empty commit id", driver.ErrInvalidArgument, func(b *driver.Batch) {
		b.CommitID, b.Thread.LastCommitID = "", ""
	})
	try("unknown run state", driver.ErrInvalidArgument, func(b *driver.Batch) {
		b.Runs[0].State = "sleeping"
	})

	// A run already stored for another thread cannot be taken over.
	other := newThread(t, d, "thread-atom-other")
	other.admit("run-owned", "")
	try("run stored for another thread", driver.ErrInvalidArgument, func(b *driver.Batch) {
		r := b.Runs[0]
		r.ID = "run-owned"
		b.Runs = append(b.Runs, r)
	})
}

func testIdempotencyUnique(t *testing.T, d driver.Driver) {
	ctx := context.Background()
	th := newThread(t, d, "thread-idem")
	th.admit("run-1", "key")
	// The same key again, at the right version: refused as a conflict.
	th2 := *th
	th2.Builder = th.Fork()
	r := th2.Run("run-2")
	m := th2.Msg("msg-2", r.ID)
	b := th2.Batch([]string{"run-1", "run-2"}, []record.Run{r}, []record.Message{m},
		[]record.Idempotency{{ThreadID: th.ID, Key: "key", RunID: r.ID, InputMessageID: m.ID}})
	_, err := d.Commit(ctx, b)
	wantErr(t, "second commit of a key", err, driver.ErrVersionConflict)
	expectUntouched(t, d, th.ID, 1, 1, "run-2")
	k, err := d.GetIdempotency(ctx, th.ID, "key")
	if err != nil || k.RunID != "run-1" {
		t.Fatalf("the key: %+v, %v; want the first admission", k, err)
	}
	// The same key on another thread is another key.
	other := newThread(t, d, "thread-idem-2")
	other.admit("run-3", "key")
	if _, err := d.GetIdempotency(ctx, th.ID, "other"); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("unknown key: %v, want ErrNotFound", err)
	}

	// Racing admissions of one key on a fresh thread: exactly one wins.
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			th := newThread(t, d, "thread-idem-race")
			id := fmt.Sprintf("run-race-%d", i)
			r := th.Run(id)
			m := th.Msg(id+"-in", id)
			b := th.Batch([]string{id}, []record.Run{r}, []record.Message{m},
				[]record.Idempotency{{ThreadID: th.ID, Key: "race", RunID: id, InputMessageID: m.ID}})
			b.CommitID = fmt.Sprintf("race-%d", i)
			b.Thread.LastCommitID = b.CommitID
			_, errs[i] = d.Commit(ctx, b)
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, driver.ErrVersionConflict):
			t.Fatalf("racing admission: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d racing admissions of one key won, want 1", won)
	}
}

func testConcurrentCommits(t *testing.T, d driver.Driver) {
	ctx := context.Background()
	const workers, each = 4, 10
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := 0; i < each; i++ {
				for {
					snap, err := d.LoadThread(ctx, "thread-hot")
					if err != nil {
						errc <- err
						return
					}
					v := snap.Thread.Version
					id := fmt.Sprintf("m-%d-%d", w, i)
					cid := "c-" + id
					b := driver.Batch{CommitID: cid, ThreadID: "thread-hot", ExpectedVersion: v,
						Thread:   record.Thread{ID: "thread-hot", Version: v + 1, NextMessageSeq: v + 2, LastCommitID: cid},
						Messages: []record.Message{{ID: id, ThreadID: "thread-hot", Seq: v + 1, Role: record.RoleUser}}}
					_, err = d.Commit(ctx, b)
					if err == nil {
						break
					}
					if !errors.Is(err, driver.ErrVersionConflict) {
						errc <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	snap, err := d.LoadThread(ctx, "thread-hot")
	if err != nil || snap.Thread.Version != workers*each {
		t.Fatalf("after %d commits: %+v, %v", workers*each, snap.Thread, err)
	}
	msgs, err := d.ReadHistory(ctx, "thread-hot", 0, 1000)
	if err != nil || len(msgs) != workers*each {
		t.Fatalf("history: %d messages, %v", len(msgs), err)
	}
	for i, m := range msgs {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d has seq %d", i, m.Seq)
		}
	}
}

func testHistoryPaging(t *testing.T, d driver.Driver) {
	ctx := context.Background()
	th := newThread(t, d, "thread-h")
	var want []record.Message
	for c := 0; c < 5; c++ {
		var msgs []record.Message
		for i := 0; i < 5; i++ {
			m := th.Msg(fmt.Sprintf("m-%d-%d", c, i), "run")
			th.NextSeq += int64(c) // gaps in seq are allowed
			msgs = append(msgs, m)
		}
		th.commit(th.Batch(nil, nil, msgs, nil))
		want = append(want, msgs...)
	}
	// Another thread interleaved must not show up.
	other := newThread(t, d, "thread-h2")
	other.admit("run-o", "")

	for _, limit := range []int{1, 3, 7, 25, 100} {
		var got []record.Message
		after := int64(0)
		for {
			page, err := d.ReadHistory(ctx, th.ID, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(page))
			}
			if len(page) == 0 {
				break
			}
			for _, m := range page {
				if m.Seq <= after {
					t.Fatalf("limit %d: seq %d not after %d", limit, m.Seq, after)
				}
				after = m.Seq
			}
			got = append(got, page...)
		}
		if !equalMessages(got, want) {
			t.Fatalf("limit %d: paged history differs from what was committed", limit)
		}
	}
	// Starting in a gap.
	page, err := d.ReadHistory(ctx, th.ID, want[7].Seq+1, 1)
	if err != nil || len(page) != 1 || page[0].ID != want[8].ID {
		t.Fatalf("ReadHistory from inside a gap = %+v, %v; want %s", page, err, want[8].ID)
	}
}

func testListRunsByState(t *testing.T, d driver.Driver) {
	ctx := context.Background()
	want := map[record.RunState][]string{}
	var ths []*thread
	for i := 0; i < 3; i++ {
		ths = append(ths, newThread(t, d, fmt.Sprintf("thread-l%d", i)))
	}
	runs := map[string]record.Run{}
	// Each thread admits 4 runs.
	for i, th := range ths {
		for j := 0; j < 4; j++ {
			r, _ := th.admit(fmt.Sprintf("run-%d-%d", j, i), "")
			runs[r.ID] = r
		}
	}
	// Transitions: on every thread the first run goes active then completed,
	// the second active, the third interrupted; the fourth stays queued.
	for i, th := range ths {
		id := func(j int) string { return fmt.Sprintf("run-%d-%d", j, i) }
		r0 := runs[id(0)]
		r0.State, r0.Owner = record.StateActive, "host-1"
		th.commit(th.Batch(th.Open, []record.Run{r0}, nil, nil))
		r0.State, r0.TerminalReason = record.StateCompleted, record.ReasonCompleted
		r1 := runs[id(1)]
		r1.State, r1.Owner = record.StateActive, "host-1"
		r2 := runs[id(2)]
		r2.State, r2.TerminalReason = record.StateInterrupted, record.ReasonCanceled
		th.commit(th.Batch([]string{id(1), id(3)}, []record.Run{r0, r1, r2}, nil, nil))
		for _, r := range []record.Run{r0, r1, r2, runs[id(3)]} {
			runs[r.ID] = r
			want[r.State] = append(want[r.State], r.ID)
		}
	}
	for _, st := range record.RunStates {
		slices.Sort(want[st])
		for _, limit := range []int{1, 2, 5, 100} {
			var got []string
			after := ""
			for {
				page, err := d.ListRuns(ctx, st, after, limit)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > limit {
					t.Fatalf("%s limit %d: page of %d", st, limit, len(page))
				}
				if len(page) == 0 {
					break
				}
				for _, r := range page {
					if r.State != st {
						t.Fatalf("ListRuns(%s) returned run %s in state %s", st, r.ID, r.State)
					}
					if !equalRuns([]record.Run{r}, []record.Run{runs[r.ID]}) {
						t.Fatalf("ListRuns(%s) returned %+v, want %+v", st, r, runs[r.ID])
					}
					got = append(got, r.ID)
				}
				after = page[len(page)-1].ID
			}
			if !slices.Equal(got, want[st]) {
				t.Fatalf("ListRuns(%s) limit %d = %v, want %v", st, limit, got, want[st])
			}
		}
	}
	// A cursor that is not a run id starts after it.
	page, err := d.ListRuns(ctx, record.StateQueued, "run-3-0\x00", 10)
	if err != nil || len(page) != 2 || page[0].ID != "run-3-1" {
		t.Fatalf("ListRuns after a non-id cursor = %v, %v", page, err)
	}
	// LoadThread returns the open runs as they are now.
	snap, err := d.LoadThread(ctx, ths[0].ID)
	if err != nil || len(snap.Runs) != 2 || snap.Runs[0].State != record.StateActive || snap.Runs[1].State != record.StateQueued {
		t.Fatalf("LoadThread after transitions = %+v, %v", snap, err)
	}
}

func testInvalidArguments(t *testing.T, d driver.Driver) {
	ctx := context.Background()
	th := newThread(t, d, "thread-i")
	th.admit("run-1", "key")
	_, err := d.LoadThread(ctx, "")
	wantErr(t, "LoadThread of an empty id", err, driver.ErrInvalidArgument)
	_, err = d.ReadHistory(ctx, "", 0, 10)
	wantErr(t, "ReadHistory of an empty id", err, driver.ErrInvalidArgument)
	_, err = d.ReadHistory(ctx, th.ID, 0, 0)
	wantErr(t, "ReadHistory with limit 0", err, driver.ErrInvalidArgument)
	_, err = d.ListRuns(ctx, "sleeping", "", 10)
	wantErr(t, "ListRuns of an unknown state", err, driver.ErrInvalidArgument)
	_, err = d.ListRuns(ctx, record.StateQueued, "", 0)
	wantErr(t, "ListRuns with limit 0", err, driver.ErrInvalidArgument)
	_, err = d.GetIdempotency(ctx, "", "key")
	wantErr(t, "GetIdempotency without a thread", err, driver.ErrInvalidArgument)
	_, err = d.GetIdempotency(ctx, th.ID, "")
	wantErr(t, "GetIdempotency without a key", err, driver.ErrInvalidArgument)
	_, err = d.GetIdempotency(ctx, "thread-unknown", "key")
	wantErr(t, "GetIdempotency on an unknown thread", err, driver.ErrNotFound)
	_, err = d.GetRuns(ctx, []string{"run-1", "run-unknown"})
	wantErr(t, "GetRuns with an unknown id", err, driver.ErrNotFound)
	_, err = d.Commit(ctx, driver.Batch{})
	wantErr(t, "empty batch", err, driver.ErrInvalidArgument)
	b := th.Batch([]string{"run-1"}, nil, nil, nil)
	b.Thread.ID = "thread-unknown"
	_, err = d.Commit(ctx, b)
	wantErr(t, "header of another thread", err, driver.ErrInvalidArgument)
	expectUntouched(t, d, th.ID, 1, 1)
	expectUntouched(t, d, "thread-unknown", 0, 0)
	// Still serving.
	th.admit("run-2", "")
}

func testClose(t *testing.T, d driver.Driver) {
	ctx := context.Background()
	th := newThread(t, d, "thread-c")
	th.admit("run-1", "")
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := d.LoadThread(ctx, th.ID)
	wantErr(t, "LoadThread after Close", err, driver.ErrClosed)
	_, err = d.Commit(ctx, th.Batch(nil, nil, nil, nil))
	wantErr(t, "Commit after Close", err, driver.ErrClosed)
	_, err = d.ListRuns(ctx, record.StateQueued, "", 1)
	wantErr(t, "ListRuns after Close", err, driver.ErrClosed)
	if err := d.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

package store_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// reads counts the driver's reads of a thread, its runs and its history.
type reads struct {
	*memdriver.Driver
	n atomic.Int64
}

func (r *reads) LoadThread(ctx context.Context, id string) (driver.ThreadSnapshot, error) {
	r.n.Add(1)
	return r.Driver.LoadThread(ctx, id)
}
func (r *reads) GetRuns(ctx context.Context, ids []string) ([]record.Run, error) {
	r.n.Add(1)
	return r.Driver.GetRuns(ctx, ids)
}
func (r *reads) ReadHistory(ctx context.Context, th string, after int64, n int) ([]record.Message, error) {
	r.n.Add(1)
	return r.Driver.ReadHistory(ctx, th, after, n)
}

// Two store layers over one driver, as two hosts: a admits, b learns from
// a's notice what a's commit left, and starts the run without reading; a
// late notice (an older version) is ignored, and a snapshot gone stale
// under a learned one only costs the start a conflict and a read.
func TestLearnedSnapshotServesTheStart(t *testing.T) {
	ctx := context.Background()
	d := memdriver.New()
	a := store.New(d, store.Options{})
	rb := &reads{Driver: d}
	b := store.New(rb, store.Options{})

	first := mustAdmit(t, a, store.Submission{ThreadID: "T", Content: "one"}, nil)
	if first.Committed == nil || len(first.Appended) != 1 || first.Appended[0].ID != first.InputMessageID {
		t.Fatalf("admission: committed %+v, appended %+v", first.Committed, first.Appended)
	}
	bad := *first.Committed
	bad.Runs = nil // open runs that do not match the header
	if b.Learn(bad, first.Appended) {
		t.Fatal("learned a snapshot whose runs do not match its header")
	}
	if !b.Learn(*first.Committed, first.Appended) {
		t.Fatal("did not learn the admission's snapshot")
	}
	run, err := b.Start(ctx, "T", "hb")
	if err != nil || run.ID != first.RunID {
		t.Fatalf("start: %+v %v", run, err)
	}
	if n := rb.n.Load(); n != 0 {
		t.Fatalf("the start from a learned snapshot read the store %d times", n)
	}
	if b.Learn(*first.Committed, first.Appended) {
		t.Fatal("learned a snapshot older than the one held")
	}

	// b learns of a second admission, then a third lands unannounced: the
	// learned snapshot is stale, and the next mutation reads afresh.
	second := mustAdmit(t, a, store.Submission{ThreadID: "T", Content: "two"}, func(context.Context, store.ThreadView) (runstate.Decision, error) {
		return runstate.Decision{Action: runstate.ActionQueue}, nil
	})
	if second.Committed == nil || !b.Learn(*second.Committed, second.Appended) {
		t.Fatalf("did not learn the second admission's snapshot %+v", second.Committed)
	}
	third := mustAdmit(t, store.New(d, store.Options{}), store.Submission{ThreadID: "T", Content: "three"}, func(context.Context, store.ThreadView) (runstate.Decision, error) {
		return runstate.Decision{Action: runstate.ActionQueue}, nil
	})
	done, _, err := b.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: "T", RunID: first.RunID, Owner: "hb", Reason: record.ReasonCompleted, Answer: "done"})
	if err != nil || done.State != record.StateCompleted {
		t.Fatalf("terminal commit from a stale learned snapshot: %+v %v", done, err)
	}
	next, err := b.Start(ctx, "T", "hb")
	if err != nil || next.ID != second.RunID {
		t.Fatalf("next start: %+v %v (want %s, then %s)", next, err, second.RunID, third.RunID)
	}
}

// A notice that runs settled carries their terminal records and answers:
// a host that learns them answers Result without reading. Records that do
// not hold together are not taken (Result reads instead), and an answer
// too large for a notice is left out by the sender.
func TestLearnSettledAnswersWithoutReading(t *testing.T) {
	ctx := context.Background()
	d := memdriver.New()
	a := store.New(d, store.Options{})
	adm := mustAdmit(t, a, store.Submission{ThreadID: "T", Content: "q", StartAs: "ha"}, nil)
	if adm.Started == nil {
		t.Fatal("the admission did not start its run")
	}
	if _, _, err := a.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: "T", RunID: adm.RunID, Owner: "ha", Reason: record.ReasonCompleted, Answer: "the answer"}); err != nil {
		t.Fatal(err)
	}
	ids := []string{adm.RunID}
	runs, msgs := a.SettledRecords("T", ids, 1<<10)
	if len(runs) != 1 || len(msgs) != 1 || msgs[0].Content != "the answer" {
		t.Fatalf("settled records: %+v %+v", runs, msgs)
	}
	if r, m := a.SettledRecords("T", ids, 4); r != nil || m != nil {
		t.Fatalf("an answer over the bound was carried: %+v %+v", r, m)
	}
	if r, _ := a.SettledRecords("other", ids, 1<<10); r != nil {
		t.Fatalf("records of another thread: %+v", r)
	}

	// Tampered records are refused: the answer at another position, of
	// another thread, a run that is not terminal, a run not asked about.
	tampered := []struct {
		name string
		edit func(r *record.Run, m *record.Message)
		ids  []string
	}{
		{"answer position", func(r *record.Run, m *record.Message) { m.Seq++ }, ids},
		{"answer thread", func(r *record.Run, m *record.Message) { m.ThreadID = "U" }, ids},
		{"answer id", func(r *record.Run, m *record.Message) { m.ID = "msg_other" }, ids},
		{"not terminal", func(r *record.Run, m *record.Message) { r.State = record.StateActive }, ids},
		{"not asked", func(r *record.Run, m *record.Message) {}, []string{"run_other"}},
	}
	for _, tc := range tampered {
		rb := &reads{Driver: d}
		b := store.New(rb, store.Options{})
		r, m := record.CloneRun(runs[0]), record.CloneMessage(msgs[0])
		tc.edit(&r, &m)
		if n := b.LearnSettled("T", tc.ids, []record.Run{r}, []record.Message{m}); n != 0 {
			t.Fatalf("%s: took %d records", tc.name, n)
		}
		res, err := b.Result(ctx, adm.RunID)
		if err != nil || !res.Settled || res.Answer == nil || res.Answer.Content != "the answer" || rb.n.Load() == 0 {
			t.Fatalf("%s: result %+v %v after %d reads; want the answer, read from the store", tc.name, res, err, rb.n.Load())
		}
	}

	rb := &reads{Driver: d}
	b := store.New(rb, store.Options{})
	if n := b.LearnSettled("T", ids, runs, msgs); n != 1 {
		t.Fatalf("took %d records, want 1", n)
	}
	res, err := b.Result(ctx, adm.RunID)
	if err != nil || !res.Settled || res.AnsweredByRunID != adm.RunID || res.Answer == nil || res.Answer.Content != "the answer" {
		t.Fatalf("result from the notice: %+v %v", res, err)
	}
	if n := rb.n.Load(); n != 0 {
		t.Fatalf("answering from a notice's records read the store %d times", n)
	}
	if !b.KnownSettled(adm.RunID) {
		t.Fatal("the run learned settled is not known settled")
	}
	// A large answer: none is carried.
	big := mustAdmit(t, a, store.Submission{ThreadID: "T", Content: "q2", StartAs: "ha"}, nil)
	if _, _, err := a.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: "T", RunID: big.RunID, Owner: "ha", Reason: record.ReasonCompleted, Answer: strings.Repeat("x", 10_000)}); err != nil {
		t.Fatal(err)
	}
	if r, m := a.SettledRecords("T", []string{big.RunID}, 6<<10); r != nil || m != nil {
		t.Fatalf("a 10,000-byte answer was carried: %d runs, %d messages", len(r), len(m))
	}
}

// A host that admits to a thread another live host owns reads the thread
// first (its own last commit on it is stale), unless the owner told it the
// thread as its last commit left it, with the notice that the thread's run
// settled: then the admission commits from that snapshot without reading.
func TestToldSnapshotServesAnotherHostsThread(t *testing.T) {
	ctx := context.Background()
	d := memdriver.NewShared(nil)
	la, err := d.AcquireLease(ctx, "a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const lb = int64(1 << 40) // b's epoch: never an owner here
	a := store.New(d, store.Options{Fence: func(string) int64 { return la.Epoch }, OwnEpoch: func() int64 { return la.Epoch }})
	rb := &reads{Driver: d}
	b := store.New(rb, store.Options{OwnEpoch: func() int64 { return lb }, OwnerLive: func(e int64) bool { return e == la.Epoch }})

	// run admits on b and runs on a, which owns the thread from then on;
	// it returns what a would tell of the thread.
	run := func(content string) driver.ThreadSnapshot {
		t.Helper()
		adm := mustAdmit(t, b, store.Submission{ThreadID: "T", Content: content}, nil)
		if _, err := a.Start(ctx, "T", "a"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := a.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: "T", RunID: adm.RunID, Owner: "a", Reason: record.ReasonCompleted, Answer: "re " + content}); err != nil {
			t.Fatal(err)
		}
		ts, ok := a.Snapshot("T")
		if !ok || ts.Thread.Owner != la.Epoch || len(ts.Thread.OpenRunIDs) != 0 {
			t.Fatalf("a's snapshot %+v %v", ts.Thread, ok)
		}
		return ts
	}
	run("one")
	rb.n.Store(0)
	ts := run("two")
	if n := rb.n.Load(); n != 1 {
		t.Fatalf("an admission to a's thread from b's own stale snapshot read %d times, want 1", n)
	}
	bad := ts.Thread
	bad.OpenRunIDs = []string{"run_missing"}
	if b.LearnOpen(bad, nil) {
		t.Fatal("learned a header whose open runs were not carried")
	}
	if !b.LearnOpen(ts.Thread, ts.Runs) {
		t.Fatal("did not learn a's snapshot")
	}
	rb.n.Store(0)
	run("three")
	if n := rb.n.Load(); n != 0 {
		t.Fatalf("an admission from a told snapshot read %d times", n)
	}
	// Told again, then the snapshot goes stale under it: the admission's
	// commit conflicts and is redone from a read, nothing lost.
	if ts, _ := a.Snapshot("T"); !b.LearnOpen(ts.Thread, ts.Runs) {
		t.Fatal("did not learn a's second snapshot")
	}
	mustAdmit(t, a, store.Submission{ThreadID: "T", Content: "four"}, nil)
	rb.n.Store(0)
	five := mustAdmit(t, b, store.Submission{ThreadID: "T", Content: "five"}, func(context.Context, store.ThreadView) (runstate.Decision, error) {
		return runstate.Decision{Action: runstate.ActionQueue}, nil
	})
	if rb.n.Load() == 0 || five.Decision == nil || five.Decision.Action != runstate.ActionQueue {
		t.Fatalf("an admission from a stale told snapshot: %+v after %d reads", five, rb.n.Load())
	}
	tsNow, err := d.LoadThread(ctx, "T")
	if err != nil || len(tsNow.Thread.OpenRunIDs) != 2 {
		t.Fatalf("thread after: %+v %v", tsNow.Thread, err)
	}
}

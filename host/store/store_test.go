package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

func decideAlways(a runstate.Action, coalesce bool) store.Decider {
	return func(context.Context, store.ThreadView) (runstate.Decision, error) {
		return runstate.Decision{Action: a, CoalescePending: coalesce}, nil
	}
}

func newStore(t *testing.T) (*store.Store, *memdriver.Driver) {
	t.Helper()
	d := memdriver.New()
	t.Cleanup(func() { d.Close(context.Background()) })
	return store.New(d, store.Options{}), d
}

func mustAdmit(t *testing.T, s *store.Store, sub store.Submission, dec store.Decider) store.Admission {
	t.Helper()
	adm, err := s.Admit(context.Background(), sub, dec)
	if err != nil {
		t.Fatalf("admit %+v: %v", sub, err)
	}
	return adm
}

func TestAdmitIdempotency(t *testing.T) {
	ctx := context.Background()
	s, d := newStore(t)
	first := mustAdmit(t, s, store.Submission{ThreadID: "T", Key: "k", Content: "hello"}, nil)
	again := mustAdmit(t, s, store.Submission{ThreadID: "T", Key: "k", Content: "hello"}, nil)
	if !again.Duplicate || again.RunID != first.RunID || again.InputMessageID != first.InputMessageID {
		t.Fatalf("retry = %+v, want the admission %+v", again, first)
	}
	_, err := s.Admit(ctx, store.Submission{ThreadID: "T", Key: "k", Content: "other"}, nil)
	if !errors.Is(err, runstate.ErrKeyReused) {
		t.Fatalf("same key, other content: %v, want ErrKeyReused", err)
	}
	// The key is per thread.
	other := mustAdmit(t, s, store.Submission{ThreadID: "U", Key: "k", Content: "other"}, nil)
	if other.Duplicate {
		t.Fatal("a key on another thread was taken as a duplicate")
	}
	msgs, _ := s.Messages(ctx, "T")
	if len(msgs) != 1 {
		t.Fatalf("thread T holds %d messages, want 1", len(msgs))
	}
	ts, _ := d.LoadThread(ctx, "T")
	if ts.Thread.Version != 1 {
		t.Fatalf("thread T at version %d after one admission and two refusals", ts.Thread.Version)
	}
}

func TestPolicyConsultedOnlyWhenBusy(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	var calls atomic.Int32
	dec := func(_ context.Context, v store.ThreadView) (runstate.Decision, error) {
		calls.Add(1)
		if v.Input.Content != "second" || len(v.Queued) != 1 {
			t.Errorf("view = %+v", v)
		}
		return runstate.Decision{Action: runstate.ActionReject}, nil
	}
	mustAdmit(t, s, store.Submission{ThreadID: "T", Content: "first"}, dec)
	if calls.Load() != 0 {
		t.Fatal("the policy was asked about an idle thread")
	}
	_, err := s.Admit(ctx, store.Submission{ThreadID: "T", Key: "k2", Content: "second"}, dec)
	if !errors.Is(err, runstate.ErrBusy) || calls.Load() != 1 {
		t.Fatalf("reject: err %v, %d calls", err, calls.Load())
	}
	// Rejected: no idempotency record, so the key is free once the thread is idle.
	run, _ := s.Start(ctx, "T", "h1")
	if _, _, err := s.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: "T", RunID: run.ID, Owner: "h1", Reason: record.ReasonCompleted, Answer: "ok"}); err != nil {
		t.Fatal(err)
	}
	if adm := mustAdmit(t, s, store.Submission{ThreadID: "T", Key: "k2", Content: "second"}, dec); adm.Duplicate {
		t.Fatal("a rejected key came back as a duplicate")
	}
	// A policy error is returned, nothing written.
	boom := errors.New("boom")
	_, err = s.Admit(ctx, store.Submission{ThreadID: "T", Content: "third"}, func(context.Context, store.ThreadView) (runstate.Decision, error) {
		return runstate.Decision{}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("policy error: %v", err)
	}
	if _, err := s.Admit(ctx, store.Submission{ThreadID: "T", Content: "third"}, nil); !errors.Is(err, runstate.ErrDecisionRequired) {
		t.Fatalf("busy thread, no policy: %v", err)
	}
}

// TestAbsorbedKeyFollowsPointer: S1 and S10 at the store level.
func TestAbsorbedKeyFollowsPointer(t *testing.T) {
	ctx := context.Background()
	s, d := newStore(t)
	a := mustAdmit(t, s, store.Submission{ThreadID: "T", Key: "ka", Content: "summarise this thread"}, nil)
	runA, err := s.Start(ctx, "T", "h1")
	if err != nil || runA.ID != a.RunID {
		t.Fatalf("start: %v %v", runA, err)
	}
	b := mustAdmit(t, s, store.Submission{ThreadID: "T", Key: "kb", Content: "actually, in bullet points"}, decideAlways(runstate.ActionInject, false))
	if !b.Offer || b.ActiveRunID != a.RunID {
		t.Fatalf("inject admission = %+v", b)
	}
	taken, err := s.Messages(ctx, "T")
	if err != nil || len(taken) != 2 {
		t.Fatalf("messages before the commit: %+v %v", taken, err)
	}
	prompt, err := s.Prompt(ctx, runA, taken[1:])
	if err != nil || len(prompt) != 2 {
		t.Fatalf("prompt %v %v", prompt, err)
	}
	// A takes b (the store keeps steps: a run absorbs only what it took).
	if res, err := s.Take(ctx, runA, []record.Take{{RunID: b.RunID, InputMessageIDs: []string{b.InputMessageID}}}, "take-1", 1, 1); err != nil || res.Step == nil {
		t.Fatalf("take: %+v %v", res, err)
	}
	done, dropped, err := s.CommitTerminal(ctx, runstate.CommitTerminal{
		ThreadID: "T", RunID: a.RunID, Owner: "h1", Reason: record.ReasonCompleted, Answer: "• point",
		Absorb: []runstate.AbsorbEntry{{RunID: b.RunID, InputMessageIDs: []string{b.InputMessageID}}},
	})
	if err != nil || len(dropped) != 0 || len(done.InputMessageIDs) != 2 {
		t.Fatalf("commit: %+v %v %v", done, dropped, err)
	}
	res, err := s.Result(ctx, b.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != record.StateSuperseded || res.TerminalReason != record.ReasonAbsorbed || res.AnsweredByRunID != a.RunID || res.Answer == nil || res.Answer.Content != "• point" {
		t.Fatalf("result of the absorbed run = %+v", res)
	}
	// A retry of b's key, also through a fresh store layer over the same
	// driver (as after a restart), reaches A's answer.
	for _, st := range []*store.Store{s, store.New(d, store.Options{})} {
		again := mustAdmit(t, st, store.Submission{ThreadID: "T", Key: "kb", Content: "actually, in bullet points"}, nil)
		if !again.Duplicate || again.RunID != b.RunID || again.AnsweredByRunID != a.RunID {
			t.Fatalf("retry of b's key = %+v", again)
		}
	}
	hist, _ := s.History(ctx, "T")
	if len(hist) != 3 || hist[0].ID != a.InputMessageID || hist[1].ID != b.InputMessageID || hist[2].ID != done.AssistantMessageID {
		t.Fatalf("history = %+v", hist)
	}
	runs, _ := s.ThreadRuns(ctx, "T")
	if len(runs) != 2 || runs[0].ID != a.RunID || runs[1].ID != b.RunID {
		t.Fatalf("thread runs = %+v", runs)
	}
	// The absorbed run wrote no message under its reserved id (read after
	// the commit, through a fresh store layer too).
	for _, st := range []*store.Store{s, store.New(d, store.Options{})} {
		after, err := st.Messages(ctx, "T")
		if err != nil || len(after) != 3 {
			t.Fatalf("messages after the commit: %+v %v", after, err)
		}
		for _, m := range after {
			if m.ID == runs[1].AssistantMessageID {
				t.Fatal("the absorbed run has an assistant message")
			}
		}
	}
}

// TestConcurrentAdmissions hammers one thread from many goroutines: every
// admission lands exactly once, with distinct consecutive seqs, through the
// optimistic retry loop; the same key from many goroutines lands once.
func TestConcurrentAdmissions(t *testing.T) {
	ctx := context.Background()
	s, d := newStore(t)
	const P, N = 8, 25
	var wg sync.WaitGroup
	admissions := make(chan store.Admission, P*N)
	sharedAdm := make(chan store.Admission, P*N)
	for p := range P {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range N {
				adm, err := s.Admit(ctx, store.Submission{ThreadID: "T", Key: fmt.Sprintf("k%d-%d", p, n), Content: "x"}, decideAlways(runstate.ActionQueue, false))
				if err != nil {
					t.Error(err)
					return
				}
				admissions <- adm
				adm, err = s.Admit(ctx, store.Submission{ThreadID: "T", Key: "shared", Content: "same"}, decideAlways(runstate.ActionQueue, false))
				if err != nil {
					t.Error(err)
					return
				}
				sharedAdm <- adm
			}
		}()
	}
	wg.Wait()
	close(admissions)
	close(sharedAdm)
	runs := map[string]bool{}
	for adm := range admissions {
		if adm.Duplicate || runs[adm.RunID] {
			t.Fatalf("distinct keys gave a duplicate admission %+v", adm)
		}
		runs[adm.RunID] = true
	}
	fresh := 0
	for adm := range sharedAdm {
		if !adm.Duplicate {
			fresh++
		}
		runs[adm.RunID] = true
	}
	if fresh != 1 {
		t.Fatalf("the shared key was admitted fresh %d times", fresh)
	}
	ts, _ := d.LoadThread(ctx, "T")
	if len(ts.Runs) != P*N+1 {
		t.Fatalf("%d open runs, want %d", len(ts.Runs), P*N+1)
	}
	for i, r := range ts.Runs {
		if r.Seq != int64(i+1) {
			t.Fatalf("run %d has seq %d", i, r.Seq)
		}
	}
	k, err := d.GetIdempotency(ctx, "T", "shared")
	if err != nil {
		t.Fatal(err)
	}
	if shared := k.RunID; !runs[shared] || len(runs) != P*N+1 {
		t.Fatalf("%d distinct runs admitted, shared key on %s", len(runs), shared)
	}
}

// flaky wraps a driver and loses the reply of the next commit.
type flaky struct {
	driver.Driver
	lose atomic.Int32 // 1: apply, then report unavailable; 2: fail without applying
}

func (f *flaky) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	switch f.lose.Swap(0) {
	case 1:
		if _, err := f.Driver.Commit(ctx, b); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: connection reset", driver.ErrUnavailable)
	case 2:
		return 0, fmt.Errorf("%w: connection refused", driver.ErrUnavailable)
	}
	return f.Driver.Commit(ctx, b)
}

func TestCommitOutcomeSettledByReading(t *testing.T) {
	ctx := context.Background()
	f := &flaky{Driver: memdriver.New()}
	s := store.New(f, store.Options{})
	f.lose.Store(1)
	adm, err := s.Admit(ctx, store.Submission{ThreadID: "T", Key: "k", Content: "a"}, nil)
	if err != nil {
		t.Fatalf("a commit that landed but lost its reply: %v", err)
	}
	if again := mustAdmit(t, s, store.Submission{ThreadID: "T", Key: "k", Content: "a"}, nil); again.RunID != adm.RunID {
		t.Fatal("the settled admission is not the durable one")
	}
	f.lose.Store(2)
	_, err = s.Admit(ctx, store.Submission{ThreadID: "T", Key: "k2", Content: "b"}, decideAlways(runstate.ActionQueue, false))
	if !errors.Is(err, driver.ErrUnavailable) || errors.Is(err, store.ErrOutcomeUnknown) {
		t.Fatalf("a commit that did not land: %v", err)
	}
	if _, err := f.GetIdempotency(ctx, "T", "k2"); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("key k2: %v", err)
	}
}

func TestScanRecoverableAndRecover(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	for _, th := range []string{"T1", "T2", "T3"} {
		mustAdmit(t, s, store.Submission{ThreadID: th, Content: "a"}, nil)
		mustAdmit(t, s, store.Submission{ThreadID: th, Content: "b"}, decideAlways(runstate.ActionQueue, false))
	}
	old, _ := s.Start(ctx, "T1", "epoch-1")
	live, _ := s.Start(ctx, "T2", "epoch-2")
	var got []record.Run
	for r, err := range s.ScanRecoverable(ctx, func(o string) bool { return o == "epoch-2" }) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	// T1's active run (owner gone), and the queued runs: T1's b, T2's b, T3's a and b.
	if len(got) != 5 {
		t.Fatalf("scan found %d runs: %+v", len(got), got)
	}
	for _, r := range got {
		if r.ID == live.ID {
			t.Fatal("the scan returned a run whose owner is live")
		}
	}
	n := 0
	for r, err := range s.ListActive(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		_ = r
	}
	if n != 2 {
		t.Fatalf("ListActive found %d", n)
	}
	rec, err := s.Recover(ctx, old, "epoch-1", "epoch-2")
	if err != nil || rec.State != record.StateQueued || rec.Attempt != 2 {
		t.Fatalf("recover: %+v %v", rec, err)
	}
	if _, err := s.Recover(ctx, live, "epoch-1", "epoch-2"); !errors.Is(err, runstate.ErrNotOwner) {
		t.Fatalf("recovering a live run: %v", err)
	}
	// Canceling: queued only.
	if _, err := s.Cancel(ctx, live.ID); !errors.Is(err, runstate.ErrNotQueued) {
		t.Fatalf("cancel active: %v", err)
	}
	c, err := s.Cancel(ctx, rec.ID)
	if err != nil || c.TerminalReason != record.ReasonCanceled {
		t.Fatalf("cancel: %+v %v", c, err)
	}
	if _, err := s.Cancel(ctx, "run_nope"); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("cancel unknown: %v", err)
	}
}

// A store layer starts a mutation from the snapshot its own last commit left;
// another writer makes that stale, and nothing is then decided from it: a
// commit from it conflicts and is redone, and a refusal (nothing queued) is
// checked against a fresh read.
func TestStaleSnapshotDecidesNothing(t *testing.T) {
	ctx := context.Background()
	s1, d := newStore(t)
	s2 := store.New(d, store.Options{})
	a := mustAdmit(t, s1, store.Submission{ThreadID: "T", Content: "one"}, nil)
	if _, err := s1.Start(ctx, "T", "h1"); err != nil {
		t.Fatal(err)
	}
	// s2 queues a run behind the active one: s1's snapshot is now stale.
	b := mustAdmit(t, s2, store.Submission{ThreadID: "T", Content: "two"}, decideAlways(runstate.ActionQueue, false))
	done, _, err := s1.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: "T", RunID: a.RunID, Owner: "h1", Reason: record.ReasonCompleted, Answer: "ok"})
	if err != nil || done.State != record.StateCompleted {
		t.Fatalf("terminal commit from a stale snapshot: %+v, %v", done, err)
	}
	snap, err := d.LoadThread(ctx, "T")
	if err != nil || len(snap.Runs) != 1 || snap.Runs[0].ID != b.RunID || snap.Runs[0].State != record.StateQueued {
		t.Fatalf("after the commit: %+v, %v; want %s still queued", snap, err, b.RunID)
	}
	// s1's snapshot now says nothing is queued after its commit... but s2
	// admits again before s1 starts: the start must find it.
	if _, _, err := s2.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: "T", RunID: b.RunID, Owner: "h2", Reason: record.ReasonCompleted}); err == nil {
		t.Fatal("b is queued, not active: its terminal commit must be refused")
	}
	c := mustAdmit(t, s2, store.Submission{ThreadID: "T", Content: "three"}, decideAlways(runstate.ActionQueue, false))
	for _, want := range []string{b.RunID, c.RunID} {
		run, err := s1.Start(ctx, "T", "h1")
		if err != nil || run.ID != want {
			t.Fatalf("start: %s, %v; want %s", run.ID, err, want)
		}
		if _, _, err := s1.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: "T", RunID: want, Owner: "h1", Reason: record.ReasonCompleted, Answer: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	s2Admit := mustAdmit(t, s2, store.Submission{ThreadID: "T", Content: "four"}, nil)
	if run, err := s1.Start(ctx, "T", "h1"); err != nil || run.ID != s2Admit.RunID {
		t.Fatalf("start after another writer's admission to the idle thread: %s, %v; want %s", run.ID, err, s2Admit.RunID)
	}
}

// Histories and terminal runs are cached as read; what another writer adds
// later, and runs that were not yet terminal, are read again.
func TestHistoryCacheSeesOtherWriters(t *testing.T) {
	ctx := context.Background()
	s1, d := newStore(t)
	s2 := store.New(d, store.Options{})
	a := mustAdmit(t, s1, store.Submission{ThreadID: "T", Content: "one"}, nil)
	if runs, err := s1.ThreadRuns(ctx, "T"); err != nil || len(runs) != 1 || runs[0].State != record.StateQueued {
		t.Fatalf("runs %+v, %v", runs, err)
	}
	if _, err := s2.Start(ctx, "T", "h2"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s2.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: "T", RunID: a.RunID, Owner: "h2", Reason: record.ReasonCompleted, Answer: "ok"}); err != nil {
		t.Fatal(err)
	}
	runs, err := s1.ThreadRuns(ctx, "T")
	if err != nil || len(runs) != 1 || runs[0].State != record.StateCompleted {
		t.Fatalf("after another writer completed the run: %+v, %v", runs, err)
	}
	hist, err := s1.History(ctx, "T")
	if err != nil || len(hist) != 2 || hist[1].Content != "ok" {
		t.Fatalf("history after another writer answered: %+v, %v", hist, err)
	}
	b := mustAdmit(t, s2, store.Submission{ThreadID: "T", Content: "two"}, nil)
	msgs, err := s1.Messages(ctx, "T")
	if err != nil || len(msgs) != 3 || msgs[2].RunID != b.RunID {
		t.Fatalf("messages after another writer's admission: %+v, %v", msgs, err)
	}
}

// An admission from the cached snapshot does not look its key up: the
// driver's refusal of a second copy of the key sends it back to a fresh
// read, which finds the first admission.
func TestCachedAdmissionKeepsKeys(t *testing.T) {
	ctx := context.Background()
	s1, d := newStore(t)
	s2 := store.New(d, store.Options{})
	first := mustAdmit(t, s1, store.Submission{ThreadID: "T", Key: "k1", Content: "one"}, nil)
	// Again through s1, its snapshot current: a duplicate all the same.
	again, err := s1.Admit(ctx, store.Submission{ThreadID: "T", Key: "k1", Content: "one"}, decideAlways(runstate.ActionQueue, false))
	if err != nil || !again.Duplicate || again.RunID != first.RunID {
		t.Fatalf("same key through the same store layer: %+v, %v", again, err)
	}
	// Another writer admits k2; s1, its snapshot now stale, admits k2 too.
	other := mustAdmit(t, s2, store.Submission{ThreadID: "T", Key: "k2", Content: "two"}, decideAlways(runstate.ActionQueue, false))
	dup, err := s1.Admit(ctx, store.Submission{ThreadID: "T", Key: "k2", Content: "two"}, decideAlways(runstate.ActionQueue, false))
	if err != nil || !dup.Duplicate || dup.RunID != other.RunID {
		t.Fatalf("a key another writer admitted: %+v, %v", dup, err)
	}
	runs, err := s1.ThreadRuns(ctx, "T")
	if err != nil || len(runs) != 2 {
		t.Fatalf("runs %+v, %v; want the two admissions only", runs, err)
	}
}

// An admission that would start its run on a thread another live lease owns
// (this host's view of the leases being stale) is admitted all the same,
// without starting it.
func TestAdmissionStartFencedStillAdmits(t *testing.T) {
	ctx := context.Background()
	d := memdriver.NewShared(nil)
	owner, err := d.AcquireLease(ctx, "A", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := d.AcquireLease(ctx, "B", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	fence := func(o string) int64 {
		switch o {
		case "A":
			return owner.Epoch
		case "B":
			return mine.Epoch
		}
		return 0
	}
	a := store.New(d, store.Options{Fence: fence})
	first := mustAdmit(t, a, store.Submission{ThreadID: "T", Content: "one", StartAs: "A"}, nil)
	if first.Started == nil {
		t.Fatal("the first admission did not start its run")
	}
	if _, _, err := a.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: "T", RunID: first.RunID, Owner: "A", Reason: record.ReasonCompleted, Answer: "ok"}); err != nil {
		t.Fatal(err)
	}
	// B believes A's lease dead (OwnerLive false): the driver refuses the
	// start, and the input is admitted as a queued run.
	b := store.New(d, store.Options{Fence: fence, OwnerLive: func(int64) bool { return false }})
	adm, err := b.Admit(ctx, store.Submission{ThreadID: "T", Content: "two", StartAs: "B"}, nil)
	if err != nil || adm.Started != nil || adm.ThreadOwner != owner.Epoch {
		t.Fatalf("admission under a stale view of the leases: %+v, %v; want admitted, not started, owner %d", adm, err, owner.Epoch)
	}
	if r, err := b.GetRun(ctx, adm.RunID); err != nil || r.State != record.StateQueued {
		t.Fatalf("run %+v, %v; want queued", r, err)
	}
}

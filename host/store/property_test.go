package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/internal/invariant"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// model is what the property test remembers of what it was told.
type model struct {
	s       *store.Store
	d       *memdriver.Driver
	epoch   int
	threads []string
	// accepted: every admission the store acknowledged, by thread/key (or by
	// input id for submissions without a key).
	accepted map[string]acceptedInput
	// absorptions counts the runs absorbed in this sequence.
	absorptions int
}

type acceptedInput struct {
	sub store.Submission
	adm store.Admission
}

func (m *model) owner() string { return fmt.Sprintf("epoch-%d", m.epoch) }

// TestStoreProperties drives random sequences of mutations through the store
// layer over the in-memory driver and checks invariants I1, I2, I3, I4 and
// I6 after every step. Every terminal commit is judged against the test's
// own account of which queued runs it must absorb (absorbed), computed from
// the queue and the entries sent, not by the reducer. Submissions and ends
// are drawn more often than the rest, so that most sequences absorb.
func TestStoreProperties(t *testing.T) {
	var sequences, absorbing atomic.Int64
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		d := memdriver.New()
		m := &model{
			d: d, s: store.New(d, store.Options{MaxAttempts: 3}), epoch: 1,
			threads: []string{"T1", "T2"}, accepted: map[string]acceptedInput{},
		}
		submit := func(t *rapid.T) { m.submit(ctx, t) }
		end := func(t *rapid.T) { m.end(ctx, t) }
		t.Repeat(map[string]func(*rapid.T){
			"submit": submit, "submit2": submit, "submit3": submit, "submit4": submit,
			"start": func(t *rapid.T) {
				th := rapid.SampledFrom(m.threads).Draw(t, "thread")
				_, err := m.s.Start(ctx, th, m.owner())
				if err != nil && !errors.Is(err, runstate.ErrThreadActive) && !errors.Is(err, runstate.ErrNothingQueued) {
					t.Fatalf("start %s: %v", th, err)
				}
			},
			"end": end, "end2": end,
			"burst": func(t *rapid.T) { m.burst(ctx, t) }, "burst2": func(t *rapid.T) { m.burst(ctx, t) },
			"cancel": func(t *rapid.T) { m.cancel(ctx, t) },
			"crash":  func(t *rapid.T) { m.crash(ctx, t) },
			"":       func(t *rapid.T) { m.check(ctx, t) },
		})
		sequences.Add(1)
		if m.absorptions > 0 {
			absorbing.Add(1)
		}
	})
	// The test is only as good as the absorptions it reaches.
	if n, a := sequences.Load(), absorbing.Load(); n >= 50 && a*4 < n {
		t.Fatalf("only %d of %d sequences absorbed a run", a, n)
	} else {
		t.Logf("%d of %d sequences absorbed a run", a, n)
	}
}

func (m *model) submit(ctx context.Context, t *rapid.T) {
	m.submitTo(ctx, t, rapid.SampledFrom(m.threads).Draw(t, "thread"))
}

// burst submits several inputs to one thread and ends its active run: the
// shape (a run in progress, inputs arriving behind it) where runs are
// absorbed.
func (m *model) burst(ctx context.Context, t *rapid.T) {
	th := rapid.SampledFrom(m.threads).Draw(t, "thread")
	m.submitTo(ctx, t, th)
	if _, err := m.s.Start(ctx, th, m.owner()); err != nil && !errors.Is(err, runstate.ErrThreadActive) && !errors.Is(err, runstate.ErrNothingQueued) {
		t.Fatalf("start %s: %v", th, err)
	}
	for range 1 + rapid.IntRange(0, 3).Draw(t, "inputs") {
		m.submitTo(ctx, t, th)
	}
	m.endOn(ctx, t, th)
}

func (m *model) submitTo(ctx context.Context, t *rapid.T, th string) {
	key := rapid.SampledFrom([]string{"", "k1", "k2", "k3", "k4"}).Draw(t, "key")
	content := rapid.SampledFrom([]string{"summarise", "actually, bullets", "also this", "stop"}).Draw(t, "content")
	act := rapid.SampledFrom([]runstate.Action{runstate.ActionInject, runstate.ActionQueue, runstate.ActionInterrupt, runstate.ActionInject, runstate.ActionInject, runstate.ActionQueue, runstate.ActionReject}).Draw(t, "action")
	coalesce := rapid.SampledFrom([]bool{false, true}).Draw(t, "coalesce")
	sub := store.Submission{ThreadID: th, Key: key, Content: content}
	if rapid.IntRange(0, 3).Draw(t, "start-with-admission") == 0 {
		sub.StartAs = m.owner() // an idle thread's run starts in the admission's commit
	}
	adm, err := m.s.Admit(ctx, sub, decideAlways(act, coalesce))
	prev, seen := m.accepted[th+"/"+key]
	seen = seen && key != ""
	switch {
	case seen && prev.sub.Content != content:
		if !errors.Is(err, runstate.ErrKeyReused) {
			t.Fatalf("key %s reused with other content: %v", key, err)
		}
	case seen:
		if err != nil || !adm.Duplicate || adm.RunID != prev.adm.RunID || adm.InputMessageID != prev.adm.InputMessageID {
			t.Fatalf("I4: retry of %s = %+v, %v; first admission %+v", key, adm, err, prev.adm)
		}
	case errors.Is(err, runstate.ErrBusy):
		if act != runstate.ActionReject {
			t.Fatalf("busy without a reject decision (%s)", act)
		}
	case err != nil:
		// I8: inject with coalescePending (or anything else) never refuses a
		// legitimate submission.
		t.Fatalf("admit %+v with %s coalesce=%v: %v", sub, act, coalesce, err)
	default:
		id := key
		if key == "" {
			id = adm.InputMessageID
		}
		m.accepted[th+"/"+id] = acceptedInput{sub: sub, adm: adm}
	}
}

// end ends the active run of a thread, if this epoch owns one.
func (m *model) end(ctx context.Context, t *rapid.T) {
	m.endOn(ctx, t, rapid.SampledFrom(m.threads).Draw(t, "thread"))
}

func (m *model) endOn(ctx context.Context, t *rapid.T, th string) {
	snap, err := m.d.LoadThread(ctx, th)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Runs) == 0 || snap.Runs[0].State != record.StateActive || snap.Runs[0].Owner != m.owner() {
		return
	}
	run := snap.Runs[0]
	reason := rapid.SampledFrom([]record.TerminalReason{record.ReasonCompleted, record.ReasonFailed, record.ReasonCompleted, record.ReasonInterrupted}).Draw(t, "reason")
	// Absorb entries as an executor would send them: most often the queued
	// runs next in line, with their inputs; sometimes one skipped, one stale
	// (an input missing), one named twice, or out of order.
	var absorb []runstate.AbsorbEntry
	queue := snap.Runs[1:]
	// (rapid favours small draws: 0 is the common case of every choice.)
	n := len(queue) - rapid.IntRange(0, len(queue)).Draw(t, "leave")
	for i, q := range queue[:n] {
		ids := slices.Clone(q.InputMessageIDs)
		switch rapid.IntRange(0, 9).Draw(t, "entry") {
		case 9:
			continue // skipped
		case 8:
			if len(ids) > 1 {
				ids = ids[:len(ids)-1] // stale: an input joined after it was taken
			} else {
				ids = append(ids, "msg-never-admitted")
			}
		case 7:
			absorb = append(absorb, runstate.AbsorbEntry{RunID: q.ID, InputMessageIDs: ids})
		case 6:
			if i+1 < len(queue) {
				absorb = append(absorb, runstate.AbsorbEntry{RunID: queue[i+1].ID, InputMessageIDs: slices.Clone(queue[i+1].InputMessageIDs)})
			}
		}
		absorb = append(absorb, runstate.AbsorbEntry{RunID: q.ID, InputMessageIDs: ids})
	}
	if len(absorb) > 1 && rapid.IntRange(0, 3).Draw(t, "shuffle") == 3 {
		absorb[0], absorb[len(absorb)-1] = absorb[len(absorb)-1], absorb[0]
	}
	c := runstate.CommitTerminal{ThreadID: th, RunID: run.ID, Owner: m.owner(), Reason: reason, Absorb: absorb}
	if reason == record.ReasonCompleted {
		c.Answer = "answer of " + run.ID
	} else {
		c.Error = "stopped"
	}
	before := snap.Thread.Version
	done, _, err := m.s.CommitTerminal(ctx, c)
	if reason != record.ReasonCompleted && len(absorb) > 0 {
		// I3: a run that does not complete never absorbs; nothing is written.
		if !errors.Is(err, runstate.ErrAbsorbNotCompleted) {
			t.Fatalf("I3: %s commit with absorb: %v", reason, err)
		}
		after, _ := m.d.LoadThread(ctx, th)
		if after.Thread.Version != before {
			t.Fatal("I3: a refused absorbing commit wrote something")
		}
		return
	}
	if err != nil {
		t.Fatalf("commit %+v: %v", c, err)
	}
	// The test's own account: the longest prefix of the queue each of whose
	// runs is named, by its first entry, with exactly its inputs.
	var want []record.Run
	wantInputs := slices.Clone(run.InputMessageIDs)
	for _, q := range queue {
		i := slices.IndexFunc(absorb, func(e runstate.AbsorbEntry) bool { return e.RunID == q.ID })
		if i < 0 || !sameInputs(absorb[i].InputMessageIDs, q.InputMessageIDs) {
			break
		}
		want = append(want, q)
		wantInputs = append(wantInputs, q.InputMessageIDs...)
	}
	if !slices.Equal(done.InputMessageIDs, wantInputs) {
		t.Fatalf("run %s ended holding inputs %v, want %v (queue %v, entries %+v)", run.ID, done.InputMessageIDs, wantInputs, queue, absorb)
	}
	after, err := m.d.LoadThread(ctx, th)
	if err != nil {
		t.Fatal(err)
	}
	var open []string
	for _, q := range queue[len(want):] {
		open = append(open, q.ID)
	}
	if !slices.Equal(after.Thread.OpenRunIDs, open) {
		t.Fatalf("after %s ended absorbing %d runs, the queue is %v, want %v", run.ID, len(want), after.Thread.OpenRunIDs, open)
	}
	for _, q := range want {
		rs, err := m.d.GetRuns(ctx, []string{q.ID})
		if err != nil || rs[0].State != record.StateSuperseded || rs[0].AbsorbedIntoRunID != run.ID {
			t.Fatalf("run %s should be absorbed into %s: %+v %v", q.ID, run.ID, rs, err)
		}
	}
	m.absorptions += len(want)
}

// sameInputs reports whether a and b hold the same inputs, each once.
func sameInputs(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, x := range a {
		if seen[x] || !slices.Contains(b, x) {
			return false
		}
		seen[x] = true
	}
	return true
}

func (m *model) cancel(ctx context.Context, t *rapid.T) {
	var queued []record.Run
	for r, err := range m.s.Runs(ctx, record.StateQueued) {
		if err != nil {
			t.Fatal(err)
		}
		queued = append(queued, r)
	}
	if len(queued) == 0 {
		return
	}
	r := rapid.SampledFrom(queued).Draw(t, "run")
	if _, err := m.s.Cancel(ctx, r.ID); err != nil {
		t.Fatalf("cancel queued %s: %v", r.ID, err)
	}
}

// crash loses the host: a new epoch recovers every run the old one held.
func (m *model) crash(ctx context.Context, t *rapid.T) {
	dead := m.owner()
	m.epoch++
	var todo []record.Run
	for r, err := range m.s.ScanRecoverable(ctx, func(o string) bool { return o == m.owner() }) {
		if err != nil {
			t.Fatal(err)
		}
		todo = append(todo, r)
	}
	for _, r := range todo {
		if r.State != record.StateActive {
			continue
		}
		if r.Owner != dead {
			t.Fatalf("active run %s owned by %s, which died before %s", r.ID, r.Owner, dead)
		}
		if _, err := m.s.Recover(ctx, r, dead, "recoverer"); err != nil {
			t.Fatalf("recover %s: %v", r.ID, err)
		}
	}
}

func (m *model) check(ctx context.Context, t *rapid.T) {
	st, err := invariant.Load(ctx, m.s, m.threads)
	if err != nil {
		t.Fatal(err)
	}
	if err := invariant.Check(st); err != nil {
		t.Fatal(err)
	}
	runs := st.Runs
	for id, acc := range m.accepted {
		// I1: the input is held by its run, which answered it, or is
		// durably queued or recoverable, or ended with a reason.
		r, ok := runs[acc.adm.RunID]
		if !ok || !slices.Contains(r.InputMessageIDs, acc.adm.InputMessageID) {
			t.Fatalf("I1: input %s lost (run %+v)", id, r)
		}
		if runstate.IsTerminal(r.State) && r.TerminalReason == "" {
			t.Fatalf("I1: input %s: run %s is terminal without a reason", id, r.ID)
		}
		if !runstate.IsTerminal(r.State) {
			ts, err := m.d.LoadThread(ctx, r.ThreadID)
			if err != nil || !slices.Contains(ts.Thread.OpenRunIDs, r.ID) {
				t.Fatalf("I1: open run %s is not open on its thread: %v", r.ID, err)
			}
		}
		// I4: a retry returns the same admission, and after absorption the
		// absorbing run's answer; nothing is written.
		if acc.sub.Key == "" {
			continue
		}
		before, _ := m.d.LoadThread(ctx, acc.sub.ThreadID)
		again, err := m.s.Admit(ctx, acc.sub, nil)
		if err != nil || !again.Duplicate || again.RunID != acc.adm.RunID || again.InputMessageID != acc.adm.InputMessageID {
			t.Fatalf("I4: retry of %s = %+v, %v", id, again, err)
		}
		if r.TerminalReason == record.ReasonAbsorbed && again.AnsweredByRunID != r.AbsorbedIntoRunID {
			t.Fatalf("I4: retry of absorbed %s answered by %q, want %s", id, again.AnsweredByRunID, r.AbsorbedIntoRunID)
		}
		if r.TerminalReason == record.ReasonAbsorbed {
			res, err := m.s.Result(ctx, r.ID)
			if err != nil || res.Answer == nil || res.Answer.ID != runs[r.AbsorbedIntoRunID].AssistantMessageID {
				t.Fatalf("I4: result of absorbed %s = %+v, %v", r.ID, res, err)
			}
		}
		after, _ := m.d.LoadThread(ctx, acc.sub.ThreadID)
		if after.Thread.Version != before.Thread.Version {
			t.Fatal("I4: a retry wrote something")
		}
	}
}

package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
)

// The semantics group runs the host's store layer (package host/store) over
// the driver through the scenarios that settle more than one run in one
// commit (S1, S5, S6, S7, S10, S13 of docs/design.md#scenarios), and checks
// the invariants I1-I4 and I6 on what the driver then returns.

func init() {
	cases = append(cases,
		testCase{"semantics", "S1-inject-absorbed", TierBasic, false, testS1},
		testCase{"semantics", "S5-coalesced-absorbed", TierBasic, false, testS5},
		testCase{"semantics", "S6-late-coalesce-dropped", TierBasic, false, testS6},
		testCase{"semantics", "S7-failed-run-absorbs-nothing", TierBasic, false, testS7},
		testCase{"semantics", "S10-idempotency", TierBasic, false, testS10},
		testCase{"semantics", "S13-canceled-successor", TierBasic, false, testS13},
	)
}

const owner = "conformance-host"

func inject(context.Context, store.ThreadView) (runstate.Decision, error) {
	return runstate.Decision{Action: runstate.ActionInject}, nil
}

func injectCoalesce(context.Context, store.ThreadView) (runstate.Decision, error) {
	return runstate.Decision{Action: runstate.ActionInject, CoalescePending: true}, nil
}

// hostStore returns the store layer over the suite's shared instance, with
// small pages so that the scans page.
func (c *C) hostStore() (*store.Store, Instance) {
	d := c.sharedInstance()
	return store.New(d, store.Options{PageSize: 2}), d
}

func (c *C) admit(rule string, s *store.Store, thread, key, content string, decide store.Decider) store.Admission {
	a, err := s.Admit(c.ctx, store.Submission{ThreadID: thread, Key: key, Content: content}, decide)
	c.ok(rule, "admitting "+content, err)
	return a
}

func (c *C) startRun(rule string, s *store.Store, thread string) record.Run {
	r, err := s.Start(c.ctx, thread, owner)
	c.ok(rule, "starting the head of "+thread, err)
	return r
}

func (c *C) complete(rule string, s *store.Store, thread, runID, answer string, absorb ...runstate.AbsorbEntry) (record.Run, []runstate.DroppedAbsorb) {
	r, dropped, err := s.CommitTerminal(c.ctx, runstate.CommitTerminal{ThreadID: thread, RunID: runID, Owner: owner,
		Reason: record.ReasonCompleted, Answer: answer, Absorb: absorb})
	c.ok(rule, "completing run "+runID, err)
	return r, dropped
}

// took has the active run take entries at a step boundary, as its executor
// does before the model sees them, when the store keeps step records: over
// it a completing run absorbs only runs it took. Over a driver of store
// protocol 1 nothing is taken, and absorption is judged on the queue alone.
func (c *C) took(rule string, s *store.Store, run record.Run, entries ...runstate.AbsorbEntry) {
	if !s.StepsKept() {
		return
	}
	steps, err := s.ReadSteps(c.ctx, run.ID, 0, 0)
	c.ok(rule, "reading the steps of run "+run.ID, err)
	var takes []record.Take
	for _, e := range entries {
		takes = append(takes, record.Take{RunID: e.RunID, InputMessageIDs: e.InputMessageIDs})
	}
	seq := int64(len(steps) + 1)
	res, err := s.Take(c.ctx, run, takes, fmt.Sprintf("%s-take-%d", run.ID, seq), seq, 1)
	c.ok(rule, "run "+run.ID+" taking its offered inputs", err)
	if res.Step == nil || len(res.Refused) != 0 {
		c.Fatalf(rule, "run %s's take of %+v took %+v, refused %v", run.ID, entries, res.Step, res.Refused)
	}
}

// answer fails rule unless run id's result is the answer want.
func (c *C) answer(rule string, s *store.Store, id, want string) {
	res, err := s.Result(c.ctx, id)
	if err != nil || res.Answer == nil || res.Answer.Content != want {
		c.Fatalf(rule, "the result of run %s is %+v, %v; want the answer %q", id, res, err, want)
	}
}

func entry(a store.Admission, inputs ...string) runstate.AbsorbEntry {
	return runstate.AbsorbEntry{RunID: a.RunID, InputMessageIDs: inputs}
}

// invariants checks I1, I2, I3 and I6 on a thread, from the driver's records.
func (c *C) invariants(s *store.Store, thread string) {
	msgs, err := s.Messages(c.ctx, thread)
	c.ok("invariant.I1", "reading history", err)
	runs, err := s.ThreadRuns(c.ctx, thread)
	c.ok("invariant.I1", "reading runs", err)
	byID := map[string]record.Run{}
	for _, r := range runs {
		byID[r.ID] = r
	}
	inHistory := map[string]bool{}
	for _, m := range msgs {
		inHistory[m.ID] = true
	}
	active := 0
	for _, r := range runs {
		if r.State == record.StateActive {
			active++
		}
		switch {
		case r.TerminalReason == record.ReasonAbsorbed:
			into, ok := byID[r.AbsorbedIntoRunID]
			switch {
			case r.State != record.StateSuperseded:
				c.Fatalf("invariant.I2", "absorbed run %s is %s, not superseded", r.ID, r.State)
			case !ok || into.State != record.StateCompleted:
				c.Fatalf("invariant.I3", "run %s was absorbed into %q, which is %s, not completed", r.ID, r.AbsorbedIntoRunID, into.State)
			case inHistory[r.AssistantMessageID] || r.AnswerSeq != 0:
				c.Fatalf("invariant.I2", "absorbed run %s has an assistant message", r.ID)
			}
			for _, in := range r.InputMessageIDs {
				if !slices.Contains(into.InputMessageIDs, in) {
					c.Fatalf("invariant.I2", "absorbed run %s's input %s is not among the inputs %v of run %s", r.ID, in, into.InputMessageIDs, into.ID)
				}
			}
		case r.State == record.StateCompleted:
			if !inHistory[r.AssistantMessageID] || r.AnswerSeq == 0 {
				c.Fatalf("invariant.I1", "completed run %s has no answer in the history", r.ID)
			}
		case runstate.IsTerminal(r.State):
			if inHistory[r.AssistantMessageID] {
				c.Fatalf("invariant.I1", "run %s ended %s but wrote an answer", r.ID, r.State)
			}
		}
	}
	if active > 1 {
		c.Fatalf("invariant.I6", "thread %s has %d active runs", thread, active)
	}
	// I1: every accepted input belongs to a run that answered it, or is
	// still open.
	for _, m := range msgs {
		if m.Role != record.RoleUser {
			continue
		}
		found := false
		for _, r := range runs {
			if slices.Contains(r.InputMessageIDs, m.ID) {
				found = true
			}
		}
		if !found {
			c.Fatalf("invariant.I1", "input %s of thread %s belongs to no run", m.ID, thread)
		}
	}
}

func testS1(c *C) {
	const rule, th = "semantics.S1", "s1"
	s, _ := c.hostStore()
	a := c.admit(rule, s, th, "ka", "summarise this thread", nil)
	A := c.startRun(rule, s, th)
	b := c.admit(rule, s, th, "kb", "in bullet points", inject)
	if !b.Offer || b.ActiveRunID != A.ID {
		c.Fatalf(rule, "b admitted with inject: %+v, want an offer to %s", b, A.ID)
	}
	c.took(rule, s, A, entry(b, b.InputMessageID))
	done, dropped := c.complete(rule, s, th, A.ID, "answer A", entry(b, b.InputMessageID))
	if len(dropped) != 0 || !slices.Equal(done.InputMessageIDs, []string{a.InputMessageID, b.InputMessageID}) {
		c.Fatalf(rule, "A committed %+v, dropped %v; want inputs [a b]", done, dropped)
	}
	B := c.getRun(rule, s.Driver(), b.RunID)
	if B.State != record.StateSuperseded || B.TerminalReason != record.ReasonAbsorbed || B.AbsorbedIntoRunID != A.ID {
		c.Fatalf(rule, "B is %s/%s into %q, want superseded/absorbed into %s", B.State, B.TerminalReason, B.AbsorbedIntoRunID, A.ID)
	}
	c.answer(rule, s, b.RunID, "answer A")
	hist, err := s.History(c.ctx, th)
	c.ok(rule, "history", err)
	var got []string
	for _, m := range hist {
		got = append(got, m.ID)
	}
	if want := []string{a.InputMessageID, b.InputMessageID, A.AssistantMessageID}; !slices.Equal(got, want) {
		c.Fatalf(rule, "history %v, want a, b, answer(A) = %v", got, want)
	}
	c.invariants(s, th)
}

// testAbsorbingPair is S14: the absorbing run, the absorbed run and the
// answer land together.
func testAbsorbingPair(c *C) {
	const rule, th = "atomicity.absorbing-pair", "s14"
	s, d := c.hostStore()
	c.admit(rule, s, th, "", "a", nil)
	A := c.startRun(rule, s, th)
	b := c.admit(rule, s, th, "", "b", inject)
	c.took(rule, s, A, entry(b, b.InputMessageID))
	snap, err := d.LoadThread(c.ctx, th)
	c.ok(rule, "LoadThread", err)
	_, _, err = s.CommitTerminal(c.ctx, runstate.CommitTerminal{ThreadID: th, RunID: A.ID, Owner: owner,
		Reason: record.ReasonCompleted, Answer: "answer", Absorb: []runstate.AbsorbEntry{entry(b, b.InputMessageID)}})
	runs, rerr := d.GetRuns(c.ctx, []string{A.ID, b.RunID})
	c.ok(rule, "reading the pair", rerr)
	hist := c.allHistory(rule, d, th, 100)
	answered := slices.ContainsFunc(hist, func(m record.Message) bool { return m.ID == A.AssistantMessageID })
	after, lerr := d.LoadThread(c.ctx, th)
	c.ok(rule, "LoadThread", lerr)
	parts := []bool{runs[0].State == record.StateCompleted, runs[1].State == record.StateSuperseded, answered, after.Thread.Version == snap.Thread.Version+1}
	all := !slices.Contains(parts, false)
	some := slices.Contains(parts, true)
	switch {
	case err == nil && !all:
		c.Fatalf(rule, "S14: the absorbing commit was acknowledged but only part of it landed: absorbing run %s, absorbed run %s, answer written %v, thread version %d -> %d (the pair and the history must land together)",
			runs[0].State, runs[1].State, answered, snap.Thread.Version, after.Thread.Version)
	case err != nil && some && !all:
		c.Fatalf(rule, "S14: the absorbing commit failed (%v) and left part of it: absorbing run %s, absorbed run %s, answer written %v", err, runs[0].State, runs[1].State, answered)
	case err != nil:
		c.Fatalf(rule, "S14: the absorbing commit failed: %v", err)
	}
	c.invariants(s, th)
}

func testS5(c *C) {
	const rule, th = "semantics.S5", "s5"
	s, _ := c.hostStore()
	a := c.admit(rule, s, th, "", "a", nil)
	A := c.startRun(rule, s, th)
	b := c.admit(rule, s, th, "kb", "b", inject)
	cc := c.admit(rule, s, th, "kc", "c", injectCoalesce)
	if !cc.Coalesced || cc.RunID != b.RunID {
		c.Fatalf(rule, "c with inject+coalescePending = %+v, want it to join run %s", cc, b.RunID)
	}
	c.took(rule, s, A, entry(b, b.InputMessageID, cc.InputMessageID))
	done, dropped := c.complete(rule, s, th, A.ID, "answer A", entry(b, b.InputMessageID, cc.InputMessageID))
	if len(dropped) != 0 || !slices.Equal(done.InputMessageIDs, []string{a.InputMessageID, b.InputMessageID, cc.InputMessageID}) {
		c.Fatalf(rule, "A committed with inputs %v, dropped %v; want [a b c], nothing dropped", done.InputMessageIDs, dropped)
	}
	c.answer(rule, s, b.RunID, "answer A")
	dup := c.admit(rule, s, th, "kc", "c", injectCoalesce)
	if !dup.Duplicate || dup.AnsweredByRunID != A.ID {
		c.Fatalf(rule, "retrying c's key = %+v, want a duplicate answered by %s", dup, A.ID)
	}
	c.invariants(s, th)
}

func testS6(c *C) {
	const rule, th = "semantics.S6", "s6"
	s, _ := c.hostStore()
	a := c.admit(rule, s, th, "", "a", nil)
	A := c.startRun(rule, s, th)
	b := c.admit(rule, s, th, "", "b", inject)
	// A took b at its last boundary; then c arrives with coalescePending.
	c.took(rule, s, A, entry(b, b.InputMessageID))
	cc := c.admit(rule, s, th, "", "c", injectCoalesce)
	done, dropped := c.complete(rule, s, th, A.ID, "answer A", entry(b, b.InputMessageID))
	if s.StepsKept() {
		// The take is durable: c does not join the taken run, which is
		// absorbed whole; c gets a run of its own.
		if len(dropped) != 0 || !slices.Equal(done.InputMessageIDs, []string{a.InputMessageID, b.InputMessageID}) || cc.Coalesced {
			c.Fatalf(rule, "A committed with inputs %v, dropped %v, c coalesced %v; want [a b], nothing dropped, c on its own", done.InputMessageIDs, dropped, cc.Coalesced)
		}
		C := c.getRun(rule, s.Driver(), cc.RunID)
		if C.State != record.StateQueued || !slices.Equal(C.InputMessageIDs, []string{cc.InputMessageID}) {
			c.Fatalf(rule, "C is %s with inputs %v, want queued with [c]", C.State, C.InputMessageIDs)
		}
		c.startRun(rule, s, th)
		c.complete(rule, s, th, C.ID, "answer C")
		c.answer(rule, s, b.RunID, "answer A")
		c.answer(rule, s, cc.RunID, "answer C")
		c.invariants(s, th)
		return
	}
	// The take was the executor's alone: c joined B, and the entry is stale.
	if len(dropped) != 1 || dropped[0].RunID != b.RunID || !slices.Equal(done.InputMessageIDs, []string{a.InputMessageID}) {
		c.Fatalf(rule, "A committed with inputs %v, dropped %v; want the entry for B dropped", done.InputMessageIDs, dropped)
	}
	B := c.getRun(rule, s.Driver(), b.RunID)
	if B.State != record.StateQueued || !slices.Equal(B.InputMessageIDs, []string{b.InputMessageID, cc.InputMessageID}) {
		c.Fatalf(rule, "B is %s with inputs %v, want queued with [b c]", B.State, B.InputMessageIDs)
	}
	c.startRun(rule, s, th)
	c.complete(rule, s, th, B.ID, "answer B")
	c.answer(rule, s, b.RunID, "answer B")
	c.invariants(s, th)
}

func testS7(c *C) {
	const rule, th = "semantics.S7", "s7"
	s, d := c.hostStore()
	c.admit(rule, s, th, "", "a", nil)
	A := c.startRun(rule, s, th)
	b := c.admit(rule, s, th, "", "b", inject)
	// S12 on the way: a failed run carrying absorb is refused, nothing written.
	before, err := d.LoadThread(c.ctx, th)
	c.ok(rule, "LoadThread", err)
	_, _, err = s.CommitTerminal(c.ctx, runstate.CommitTerminal{ThreadID: th, RunID: A.ID, Owner: owner, Reason: record.ReasonFailed,
		Error: "model failed", Absorb: []runstate.AbsorbEntry{entry(b, b.InputMessageID)}})
	if !errors.Is(err, runstate.ErrAbsorbNotCompleted) {
		c.Fatalf("semantics.S12", "a failed run carrying absorb: %v, want it refused", err)
	}
	if after, _ := d.LoadThread(c.ctx, th); after.Thread.Version != before.Thread.Version {
		c.Fatalf("semantics.S12", "a refused terminal commit moved the thread from version %d to %d", before.Thread.Version, after.Thread.Version)
	}
	// A took b, then the model fails: no absorption.
	c.took(rule, s, A, entry(b, b.InputMessageID))
	failed, _, err := s.CommitTerminal(c.ctx, runstate.CommitTerminal{ThreadID: th, RunID: A.ID, Owner: owner, Reason: record.ReasonFailed, Error: "model failed"})
	c.ok(rule, "failing A", err)
	if failed.State != record.StateFailed || failed.Error == "" {
		c.Fatalf(rule, "A is %+v, want failed with its error", failed)
	}
	if B := c.getRun(rule, d, b.RunID); B.State != record.StateQueued {
		c.Fatalf(rule, "after A failed, B is %s, want queued", B.State)
	}
	c.startRun(rule, s, th)
	c.complete(rule, s, th, b.RunID, "answer B")
	c.answer(rule, s, b.RunID, "answer B")
	c.invariants(s, th)
}

func testS10(c *C) {
	const rule, th = "semantics.S10", "s10"
	d, dir := c.start()
	s := store.New(d, store.Options{PageSize: 2})
	a := c.admit(rule, s, th, "ka", "a", nil)
	again := c.admit(rule, s, th, "ka", "a", nil)
	if !again.Duplicate || again.RunID != a.RunID || again.InputMessageID != a.InputMessageID {
		c.Fatalf("invariant.I4", "the same key twice = %+v, want the first admission %+v", again, a)
	}
	v, err := d.LoadThread(c.ctx, th)
	c.ok(rule, "LoadThread", err)
	if _, err := s.Admit(c.ctx, store.Submission{ThreadID: th, Key: "ka", Content: "other"}, nil); !errors.Is(err, runstate.ErrKeyReused) {
		c.Fatalf(rule, "the same key with other content: %v, want key reused", err)
	}
	if after, _ := d.LoadThread(c.ctx, th); after.Thread.Version != v.Thread.Version {
		c.Fatalf(rule, "a refused reuse of a key wrote to the thread")
	}
	A := c.startRun(rule, s, th)
	b := c.admit(rule, s, th, "kb", "b", inject)
	c.took(rule, s, A, entry(b, b.InputMessageID))
	c.complete(rule, s, th, A.ID, "answer A", entry(b, b.InputMessageID))
	dup := c.admit(rule, s, th, "kb", "b", inject)
	if !dup.Duplicate || dup.AnsweredByRunID != A.ID {
		c.Fatalf("invariant.I4", "b's key after absorption = %+v, want a duplicate answered by %s", dup, A.ID)
	}
	// After a restart: a durable driver is relaunched on its data; any
	// driver gets a fresh store layer.
	if c.s.info.Durable {
		_ = d.Close(c.ctx)
		d = c.startOn(dir)
	}
	s = store.New(d, store.Options{PageSize: 2})
	dup = c.admit(rule, s, th, "kb", "b", inject)
	if !dup.Duplicate || dup.AnsweredByRunID != A.ID {
		c.Fatalf("invariant.I4", "b's key after a restart = %+v, want a duplicate answered by %s", dup, A.ID)
	}
	c.answer("invariant.I4", s, dup.RunID, "answer A")
	c.invariants(s, th)
}

func testS13(c *C) {
	const rule, th = "semantics.S13", "s13"
	s, _ := c.hostStore()
	a := c.admit(rule, s, th, "", "a", nil)
	A := c.startRun(rule, s, th)
	b := c.admit(rule, s, th, "", "b", inject)
	canceled, err := s.Cancel(c.ctx, b.RunID)
	c.ok(rule, "canceling B", err)
	if canceled.State != record.StateInterrupted || canceled.TerminalReason != record.ReasonCanceled {
		c.Fatalf(rule, "canceled B is %s/%s", canceled.State, canceled.TerminalReason)
	}
	done, dropped := c.complete(rule, s, th, A.ID, "answer A", entry(b, b.InputMessageID))
	if len(dropped) != 1 || done.State != record.StateCompleted || !slices.Equal(done.InputMessageIDs, []string{a.InputMessageID}) {
		c.Fatalf(rule, "A committed %+v, dropped %v; want A completed on its own and the entry dropped", done, dropped)
	}
	c.invariants(s, th)
}

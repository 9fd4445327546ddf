package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/agenthost/agenthost/abi/driver"
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
	// absorptions counts the runs absorbed in this sequence; takes and
	// steps, the takes and step records committed.
	absorptions, takes, steps int
	// ids numbers the step records and tool calls the test makes.
	ids int
}

type acceptedInput struct {
	sub store.Submission
	adm store.Admission
}

func (m *model) owner() string { return fmt.Sprintf("epoch-%d", m.epoch) }

// TestStoreProperties drives random sequences of mutations through the store
// layer over the in-memory driver and checks invariants I1, I2, I3, I4 and
// I6, and I9-I12 as the records show them, after every step. Active runs
// commit step records (model messages with tool calls, tool results) and
// take queued runs' inputs at boundaries, as an executor does, with stale
// and repeated tries among them. Every take and terminal commit is judged
// against the test's own account of what it must take or absorb, computed
// from the queue and the entries sent, not by the reducer. Submissions,
// takes and ends are drawn more often than the rest, so that most
// sequences absorb.
func TestStoreProperties(t *testing.T) {
	var sequences, absorbing, takes, steps atomic.Int64
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		d := memdriver.New()
		m := &model{
			// A window of a few messages, so that it moves along the threads.
			d: d, s: store.New(d, store.Options{MaxAttempts: 3, HistoryWindow: rapid.IntRange(1, 12).Draw(t, "window"), PageSize: 4}), epoch: 1,
			threads: []string{"T1", "T2"}, accepted: map[string]acceptedInput{},
		}
		submit := func(t *rapid.T) { m.submit(ctx, t) }
		end := func(t *rapid.T) { m.end(ctx, t) }
		take := func(t *rapid.T) { m.take(ctx, t) }
		step := func(t *rapid.T) { m.step(ctx, t) }
		t.Repeat(map[string]func(*rapid.T){
			"submit": submit, "submit2": submit, "submit3": submit, "submit4": submit,
			"take": take, "take2": take, "step": step, "step2": step,
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
		takes.Add(int64(m.takes))
		steps.Add(int64(m.steps))
	})
	if n := sequences.Load(); n >= 50 && (takes.Load() < n || steps.Load() < n) {
		t.Fatalf("%d sequences made only %d takes and %d step records", n, takes.Load(), steps.Load())
	}
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
	for range rapid.IntRange(0, 3).Draw(t, "steps") {
		m.stepOn(ctx, t, th)
	}
	m.takeOn(ctx, t, th)
	m.stepOn(ctx, t, th)
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
	// Most often exactly the runs it took; sometimes the next untaken
	// ones too, which it may not absorb.
	n := 0
	for n < len(queue) && queue[n].TakenBy == run.ID {
		n++
	}
	n = min(len(queue), max(0, n+rapid.IntRange(-1, 2).Draw(t, "beyond-taken")))
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
	// Its prompt, which the store layer computes twice in tests (the memo
	// of the thread's projection, and the window's), failing if they differ.
	if _, err := m.s.Prompt(ctx, run, nil); err != nil {
		t.Fatalf("prompt of %s: %v", run.ID, err)
	}
	c := runstate.CommitTerminal{ThreadID: th, RunID: run.ID, Owner: m.owner(), Reason: reason, Absorb: absorb}
	if reason == record.ReasonCompleted {
		c.Answer = "answer of " + run.ID
		c.Steps = m.exchanges(ctx, t, run.ID) // as the executor sends them
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
		if i < 0 || !sameInputs(absorb[i].InputMessageIDs, q.InputMessageIDs) || q.TakenBy != run.ID {
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
	// The runs it took and did not absorb are ordinary queued runs again.
	for _, q := range queue[len(want):] {
		rs, err := m.d.GetRuns(ctx, []string{q.ID})
		if err != nil || rs[0].TakenBy == run.ID {
			t.Fatalf("run %s, taken by %s, which ended without absorbing it, is still taken: %+v %v", q.ID, run.ID, rs, err)
		}
	}
	m.absorptions += len(want)
}

// active returns the active run of thread th if this epoch owns it.
func (m *model) active(ctx context.Context, t *rapid.T, th string) (driver.ThreadSnapshot, bool) {
	snap, err := m.d.LoadThread(ctx, th)
	if err != nil {
		t.Fatal(err)
	}
	return snap, len(snap.Runs) > 0 && snap.Runs[0].State == record.StateActive && snap.Runs[0].Owner == m.owner()
}

func (m *model) log(ctx context.Context, t *rapid.T, runID string) []record.Step {
	steps, err := m.s.ReadSteps(ctx, runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return steps
}

func (m *model) id(prefix string) string {
	m.ids++
	return fmt.Sprintf("%s-%d", prefix, m.ids)
}

// exchanges are a run's tool exchanges from its step log, as the executor
// sends them at completion: every model message that asked for tools, with
// the results, leaving out an exchange whose calls are not all answered.
func (m *model) exchanges(ctx context.Context, t *rapid.T, runID string) []record.Message {
	var out []record.Message
	var cur []record.Message
	open := 0
	for _, st := range m.log(ctx, t, runID) {
		switch st.Kind {
		case record.StepModel:
			if open == 0 {
				out = append(out, cur...)
			}
			cur, open = nil, len(st.Message.ToolCalls)
			if open > 0 {
				cur = []record.Message{st.Message}
			}
		case record.StepTool:
			cur = append(cur, st.Message)
			open--
		}
	}
	if open == 0 {
		out = append(out, cur...)
	}
	return out
}

func (m *model) take(ctx context.Context, t *rapid.T) {
	m.takeOn(ctx, t, rapid.SampledFrom(m.threads).Draw(t, "thread"))
}

// takeOn has the active run of th (if this epoch owns it) take queued
// runs at a boundary, as the injection hook does: most often the untaken
// prefix of the queue, sometimes with an entry skipped, stale or of a run
// taken before. The result is judged against the test's own account: the
// runs taken are the longest prefix, past the runs it took before, each
// named with exactly its inputs; a take refused whole writes nothing.
func (m *model) takeOn(ctx context.Context, t *rapid.T, th string) {
	snap, ok := m.active(ctx, t, th)
	if !ok {
		return
	}
	run := snap.Runs[0]
	queue := snap.Runs[1:]
	pos := 0
	for pos < len(queue) && queue[pos].TakenBy == run.ID {
		pos++
	}
	var entries []record.Take
	for i, q := range queue[pos:] {
		ids := slices.Clone(q.InputMessageIDs)
		switch rapid.IntRange(0, 9).Draw(t, "take-entry") {
		case 9:
			continue // skipped: what is behind it is not taken
		case 8:
			ids = append(ids, "msg-never-admitted") // stale
		case 7:
			if pos > 0 && i == 0 {
				entries = append(entries, record.Take{RunID: queue[0].ID, InputMessageIDs: slices.Clone(queue[0].InputMessageIDs)}) // taken before
			}
		}
		entries = append(entries, record.Take{RunID: q.ID, InputMessageIDs: ids})
		if rapid.IntRange(0, 2).Draw(t, "take-more") == 2 {
			break
		}
	}
	if len(entries) == 0 {
		return
	}
	// The account: entries are judged in queue order; the first that is not
	// the next untaken run with exactly its inputs ends the take.
	var want []string
	next := pos
	for _, q := range queue[pos:] {
		i := slices.IndexFunc(entries, func(e record.Take) bool { return e.RunID == q.ID })
		if i < 0 || !sameInputs(entries[i].InputMessageIDs, q.InputMessageIDs) || q.ID != queue[next].ID {
			break
		}
		// A second entry for a run, or one for a run taken before, is
		// refused and ends the take there.
		if slices.ContainsFunc(entries[:i], func(e record.Take) bool {
			return e.RunID == q.ID || slices.ContainsFunc(queue[:pos], func(p record.Run) bool { return p.ID == e.RunID })
		}) {
			break
		}
		want = append(want, q.ID)
		next++
	}
	seq := int64(len(m.log(ctx, t, run.ID)) + 1)
	stepID := m.id("take")
	res, err := m.s.Take(ctx, run, entries, stepID, seq, 1)
	if err != nil {
		t.Fatalf("take %+v by %s: %v", entries, run.ID, err)
	}
	var got []string
	if res.Step != nil {
		for _, tk := range res.Step.Taken {
			got = append(got, tk.RunID)
		}
	}
	after, err := m.d.LoadThread(ctx, th)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("take by %s of %+v took %v, want %v (queue %+v, refused %v)", run.ID, entries, got, want, queue, res.Refused)
	}
	for _, q := range after.Runs[1:] {
		if slices.Contains(want, q.ID) && q.TakenBy != run.ID {
			t.Fatalf("run %s was taken by %s but records TakenBy %q", q.ID, run.ID, q.TakenBy)
		}
	}
	steps := m.log(ctx, t, run.ID)
	switch {
	case len(want) == 0 && (after.Thread.Version != snap.Thread.Version || int64(len(steps)) != seq-1):
		t.Fatalf("a take that took nothing wrote something (version %d -> %d, %d steps)", snap.Thread.Version, after.Thread.Version, len(steps))
	case len(want) > 0 && (int64(len(steps)) != seq || steps[seq-1].ID != stepID || steps[seq-1].Kind != record.StepTake):
		t.Fatalf("the take of %v left no take record at seq %d: %+v", want, seq, steps)
	}
	if len(want) > 0 {
		m.takes++
	}
}

func (m *model) step(ctx context.Context, t *rapid.T) {
	m.stepOn(ctx, t, rapid.SampledFrom(m.threads).Draw(t, "thread"))
}

// stepOn has the active run of th (if this epoch owns it) commit its next
// step record: a tool result for the next unanswered call of its last model
// record, else a model record asking for tools; sometimes a stale writer of
// a written Seq (refused) or a retry of the last record (applied once).
func (m *model) stepOn(ctx context.Context, t *rapid.T, th string) {
	snap, ok := m.active(ctx, t, th)
	if !ok {
		return
	}
	run := snap.Runs[0]
	log := m.log(ctx, t, run.ID)
	// Where the run is: the last model record, and its calls answered.
	var last *record.Step
	answered := map[string]bool{}
	for i := range log {
		switch log[i].Kind {
		case record.StepModel:
			last, answered = &log[i], map[string]bool{}
		case record.StepTool:
			answered[log[i].Message.ToolCallID] = true
		}
	}
	seq := int64(len(log) + 1)
	st := record.Step{ID: m.id("step"), RunID: run.ID, ThreadID: th, Seq: seq, Attempt: run.Attempt, CreatedAt: time.Now()}
	var pending []record.ToolCall
	if last != nil {
		for _, c := range last.Message.ToolCalls {
			if !answered[c.ID] {
				pending = append(pending, c)
			}
		}
	}
	if len(pending) > 0 {
		st.Kind, st.Model = record.StepTool, last.Model
		st.Message = record.Message{ID: m.id("msg"), ThreadID: th, RunID: run.ID, Role: record.RoleTool, ToolCallID: pending[0].ID, Content: "result"}
	} else {
		st.Kind = record.StepModel
		if last != nil {
			st.Model = last.Model + 1
		}
		st.Message = record.Message{ID: m.id("msg"), ThreadID: th, RunID: run.ID, Role: record.RoleAssistant}
		for range 1 + rapid.IntRange(0, 1).Draw(t, "calls") {
			st.Message.ToolCalls = append(st.Message.ToolCalls, record.ToolCall{ID: m.id("call"), Name: "lookup"})
		}
	}
	switch rapid.IntRange(0, 5).Draw(t, "step-kind") {
	case 5:
		// A stale writer of a Seq already written (a new record, not a
		// retry): refused, nothing written.
		if len(log) > 0 {
			st.Seq = int64(len(log))
			err := m.s.CommitSteps(ctx, run, []record.Step{st})
			if !errors.Is(err, driver.ErrVersionConflict) {
				t.Fatalf("a step at seq %d, written already: %v, want a conflict", st.Seq, err)
			}
			if got := m.log(ctx, t, run.ID); len(got) != len(log) {
				t.Fatalf("a refused step wrote something: %d steps, was %d", len(got), len(log))
			}
			return
		}
	case 4:
		// A retry of the last record, whose first try landed (its reply
		// lost): accepted as applied, written once.
		if len(log) > 0 && log[len(log)-1].Kind != record.StepTake {
			if err := m.s.CommitSteps(ctx, run, []record.Step{log[len(log)-1]}); err != nil {
				t.Fatalf("retry of step %s, which landed: %v", log[len(log)-1].ID, err)
			}
			if got := m.log(ctx, t, run.ID); len(got) != len(log) {
				t.Fatalf("a retried step was written twice: %d steps, was %d", len(got), len(log))
			}
			return
		}
	}
	if err := m.s.CommitSteps(ctx, run, []record.Step{st}); err != nil {
		t.Fatalf("step %+v of %s: %v", st, run.ID, err)
	}
	m.steps++
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
	_, err := m.s.Cancel(ctx, r.ID)
	switch {
	case r.TakenBy != "":
		// I11: a taken input cannot be withdrawn behind its taker's back.
		var te *runstate.TakenError
		if !errors.As(err, &te) || te.TakenBy != r.TakenBy {
			t.Fatalf("I11: cancel of %s, taken by %s: %v, want ErrTaken naming the taker", r.ID, r.TakenBy, err)
		}
	case err != nil:
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
	m.checkSteps(ctx, t, st)
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

// checkSteps checks I9-I12 on the records (docs/design.md#invariants), as
// far as records show them: what a model or tool call was is known here
// only by its record.
func (m *model) checkSteps(ctx context.Context, t *rapid.T, st invariant.State) {
	stepIDs := map[string]bool{}
	keys := map[string]bool{}
	stepMsgs := map[string]string{} // step message id -> its run
	for _, r := range st.Runs {
		log := m.log(ctx, t, r.ID)
		lastModel := -1
		var calls []record.ToolCall
		results := map[string]bool{}
		for i, s := range log {
			if s.Seq != int64(i+1) || s.RunID != r.ID {
				t.Fatalf("I9: run %s's step log has seq %d (run %s) at position %d", r.ID, s.Seq, s.RunID, i+1)
			}
			if stepIDs[s.ID] {
				t.Fatalf("I9: step id %s written twice", s.ID)
			}
			stepIDs[s.ID] = true
			if s.Attempt > r.Attempt || (i > 0 && s.Attempt < log[i-1].Attempt) {
				t.Fatalf("I9: run %s (attempt %d) has step %d of attempt %d after attempt %d", r.ID, r.Attempt, s.Seq, s.Attempt, log[max(i-1, 0)].Attempt)
			}
			switch s.Kind {
			case record.StepModel:
				// I9: a model step recorded is never made again: its number
				// grows along the log, across attempts.
				if s.Model <= lastModel {
					t.Fatalf("I9: run %s records model step %d again (after %d)", r.ID, s.Model, lastModel)
				}
				if len(calls) > len(results) {
					t.Fatalf("I9/I12: run %s's model step %d follows calls left unanswered", r.ID, s.Model)
				}
				lastModel, calls, results = s.Model, s.Message.ToolCalls, map[string]bool{}
				stepMsgs[s.Message.ID] = r.ID
			case record.StepTool:
				// I10: a result answers a call of its model step, once;
				// its key (runID/stepN/callIndex) is that call's alone.
				i := slices.IndexFunc(calls, func(c record.ToolCall) bool { return c.ID == s.Message.ToolCallID })
				if i < 0 || s.Model != lastModel || results[s.Message.ToolCallID] {
					t.Fatalf("I10/I12: run %s's tool record %d answers call %q, not an open call of model step %d", r.ID, s.Seq, s.Message.ToolCallID, lastModel)
				}
				results[s.Message.ToolCallID] = true
				key := fmt.Sprintf("%s/step%d/%d", r.ID, s.Model, i)
				if keys[key] {
					t.Fatalf("I10: key %s executed twice", key)
				}
				keys[key] = true
				stepMsgs[s.Message.ID] = r.ID
			case record.StepTake:
				for _, tk := range s.Taken {
					q, ok := st.Runs[tk.RunID]
					if !ok || q.ThreadID != r.ThreadID {
						t.Fatalf("I11: run %s took run %s, not of its thread", r.ID, tk.RunID)
					}
				}
			}
		}
		// A taken run is queued behind the run that took it, which is open.
		if r.TakenBy != "" && r.State == record.StateQueued {
			taker, ok := st.Runs[r.TakenBy]
			if !ok || runstate.IsTerminal(taker.State) || taker.ThreadID != r.ThreadID || taker.Seq >= r.Seq {
				t.Fatalf("I11: queued run %s is taken by %+v, which is not open ahead of it", r.ID, taker)
			}
		}
	}
	// I11: no answer holds a canceled run's input, and (I11b) each input
	// is in at most one answer.
	answeredBy := map[string]string{}
	for _, r := range st.Runs {
		if r.State != record.StateCompleted {
			continue
		}
		for _, in := range r.InputMessageIDs {
			if o, ok := answeredBy[in]; ok {
				t.Fatalf("I11b: input %s is answered by runs %s and %s", in, o, r.ID)
			}
			answeredBy[in] = r.ID
			owner := st.Runs[st.Messages[in].RunID]
			if owner.TerminalReason == record.ReasonCanceled {
				t.Fatalf("I11: run %s's answer holds input %s of canceled run %s", r.ID, in, owner.ID)
			}
		}
	}
	// I12: a thread's history is a well-formed conversation: every tool
	// call answered before the next assistant message, and no message of a
	// run that did not complete (its steps stay in its log).
	for _, th := range m.threads {
		hist, err := m.s.History(ctx, th)
		if err != nil {
			t.Fatal(err)
		}
		open := map[string]bool{}
		for _, msg := range hist {
			if msg.Role != record.RoleUser {
				if r := st.Runs[msg.RunID]; r.State != record.StateCompleted {
					t.Fatalf("I12: history of %s holds message %s of run %s, which is %s", th, msg.ID, r.ID, r.State)
				}
			}
			switch msg.Role {
			case record.RoleAssistant:
				if len(open) > 0 {
					t.Fatalf("I12: history of %s: assistant message %s follows unanswered calls %v", th, msg.ID, open)
				}
				for _, c := range msg.ToolCalls {
					open[c.ID] = true
				}
			case record.RoleTool:
				if !open[msg.ToolCallID] {
					t.Fatalf("I12: history of %s: tool message %s answers no open call", th, msg.ID)
				}
				delete(open, msg.ToolCallID)
			}
			if run, ok := stepMsgs[msg.ID]; ok && st.Runs[run].State != record.StateCompleted {
				t.Fatalf("I12: step message %s of run %s, not completed, is in the history", msg.ID, run)
			}
		}
	}
}

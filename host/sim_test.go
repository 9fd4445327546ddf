package host_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/faultstore"
	"github.com/agenthost/agenthost/host/internal/invariant"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/host/toolpolicy"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// raceEnabled is set when the race detector is on (race_test.go).
var raceEnabled bool

var (
	simSeeds = flag.Int("sim.seeds", 2000, "number of seeds TestSimulation runs")
	simSeed  = flag.Uint64("sim.seed", 0, "run TestSimulation for this one seed (replay)")
	simOps   = flag.Int("sim.ops", 40, "operations per seed")
)

// TestSimulation is a simulation of the runtime under a fake clock: one
// seed drives submissions on several threads with random hints (the policy
// reads them), model delays and failures, cancels, retries, close() calls,
// and faults of the store (host/internal/faultstore): lost replies, refused
// commits, outages, group commits, crashes that land at any driver call
// (between a commit and its reply, in the middle of a group), and paused
// processes whose requests reach the store after their successor started.
// After every operation it checks invariants I1 to I8 from the durable
// records, and the oracle (sim_oracle_test.go) judges every batch that
// reached the store against its own model of the threads. A failure prints
// the seed and the operation log; -sim.seed=N replays one seed (as far as
// the scheduling of goroutines repeats).
func TestSimulation(t *testing.T) {
	n := *simSeeds
	if raceEnabled && !flagSet("sim.seeds") {
		n /= 10
	}
	seeds := make([]uint64, 0, n)
	if *simSeed != 0 {
		seeds = append(seeds, *simSeed)
	} else {
		for i := range n {
			seeds = append(seeds, uint64(i+1))
		}
	}
	for _, seed := range seeds {
		var log []string
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t, seed)
				defer func() { log = s.log }()
				defer s.shutdown()
				s.play(*simOps)
				if *simSeed != 0 {
					t.Logf("operations:\n  %s", strings.Join(s.log, "\n  "))
				}
			})
		})
		if len(seeds) >= 10000 && seed%10000 == 0 {
			fmt.Printf("simulation: %d seeds passed\n", seed) // progress of a long run
		}
		if !ok {
			t.Fatalf("simulation failed with seed %d; replay: go test ./host -run 'TestSimulation' -sim.seed=%d -v\noperations:\n  %s",
				seed, seed, strings.Join(log, "\n  "))
		}
	}
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

type simInput struct {
	thread, content, key, hint string
	runID, msgID               string // empty while the admission's outcome is unknown
}

type sim struct {
	t           *testing.T
	seed        uint64
	rng         *rand.Rand
	mem         *memdriver.Driver // the durable store: what survives every crash
	fs          *faultstore.Driver
	faults      faultstore.Faults
	rt          *host.Runtime
	zombie      *host.Runtime // a paused process, its requests held by zfs
	zfs         *faultstore.Driver
	epoch       string // the running process's epoch as the oracle knows it
	or          *oracle
	ids         atomic.Int64
	log         []string
	inputs      []*simInput // every submission accepted, or whose outcome is unknown
	taken       map[string][]string
	dead        map[string]bool // epochs of processes gone
	threads     []string
	maxAttempts int
	approvalFor time.Duration
	answers     []givenAnswer // answers the runtime accepted, to give again
}

// givenAnswer is an answer the runtime accepted (or whose outcome is
// unknown: ok false).
type givenAnswer struct {
	run, call string
	a         host.Approval
	stepID    string
	ok        bool
}

// simToolPolicy asks about the calls of about a third of the runs (by the
// run's id: a policy is a function of the call), and allows the rest.
var simToolPolicy = toolpolicy.Func(func(_ context.Context, c toolpolicy.Call) (toolpolicy.Decision, error) {
	h := fnv.New32a()
	h.Write([]byte(c.RunID))
	if h.Sum32()%3 == 0 {
		return toolpolicy.Decision{Verdict: toolpolicy.Ask, Prompt: "look it up?", Approvals: 1}, nil
	}
	return toolpolicy.Decision{Verdict: toolpolicy.Allow}, nil
})

func newSim(t *testing.T, seed uint64) *sim {
	s := &sim{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), mem: memdriver.New(), taken: map[string][]string{}, dead: map[string]bool{}, threads: []string{"T1", "T2", "T3"}}
	s.maxAttempts = 1 + s.rng.IntN(3)
	s.approvalFor = time.Duration(1+s.rng.IntN(4)) * time.Second
	s.or = newOracle(s.maxAttempts)
	// A quarter of the seeds run over a store without faults; the rest lose
	// replies, refuse commits and fail reads, and half of those have
	// outages and group commits too.
	switch seed % 4 {
	case 1:
		s.faults = faultstore.Faults{LoseReply: 0.03, Refuse: 0.03, ReadFail: 0.01}
	case 2, 3:
		s.faults = faultstore.Faults{LoseReply: 0.03, Refuse: 0.02, ReadFail: 0.01, Outage: 0.005, OutageFor: time.Duration(1+s.rng.IntN(8)) * 100 * time.Millisecond, GroupWindow: time.Millisecond}
	}
	s.logf("seed=%d max_attempts=%d approval_timeout=%s faults=%+v", seed, s.maxAttempts, s.approvalFor, s.faults)
	s.start()
	return s
}

func (s *sim) logf(format string, args ...any) { s.log = append(s.log, fmt.Sprintf(format, args...)) }

// start starts a runtime over the durable store, as a new process would,
// through a fault wrapper of its own. A start the store's faults make fail
// is tried again, as a supervisor would.
func (s *sim) start() {
	delay := func() model.Duration { return model.Duration(time.Duration(s.rng.IntN(4)) * 50 * time.Millisecond) }
	script := model.Script{
		Steps: []model.ScriptStep{{Delay: delay(), Tool: &model.ScriptTool{Name: "lookup"}}, {Delay: delay()}},
		When: []model.ScriptCase{{Input: "fail", Steps: []model.ScriptStep{
			{Delay: delay(), Tool: &model.ScriptTool{Name: "lookup"}}, {Delay: delay(), Fail: "model error"},
		}}},
	}
	m, err := model.NewScripted(script)
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; ; i++ {
		s.fs = faultstore.New(s.mem, rand.New(rand.NewPCG(s.seed, uint64(s.ids.Add(1)))), s.faults, s.or.applied)
		rec := &recordingModel{m: m, log: &s.or.execs, oracle: s.or}
		s.fs.OnSteps(func(b driver.StepBatch) { s.or.stepBatchApplied(rec.epoch, b) })
		rt, err := host.New(context.Background(), host.Config{
			Driver: s.fs, Policy: hintPolicy{}, Model: rec, Tools: []model.Tool{recordingTool{s.or, rec}},
			MaxConcurrentRuns: 2, MaxAttempts: s.maxAttempts,
			ToolPolicy: simToolPolicy, ApprovalTimeout: s.approvalFor,
			Logger: simLogger(),
			NewID: func(p string) string {
				id := fmt.Sprintf("%s%04d", p, s.ids.Add(1))
				if p == "epoch" {
					rec.epoch = id
				}
				return id
			},
		})
		if err == nil {
			s.or.owners[rec.epoch] = rt.Epoch()
			s.rt, s.epoch = rt, rec.epoch
			s.logf("start epoch=%s", rt.Epoch())
			return
		}
		if !transientErr(err) || i == 100 {
			s.t.Fatalf("start: %v", err)
		}
		s.logf("start failed: %v", err)
		s.dead[rec.epoch] = true
		time.Sleep(time.Second)
	}
}

// transientErr reports whether err is a failure the store's faults explain.
func transientErr(err error) bool {
	return errors.Is(err, driver.ErrUnavailable) || errors.Is(err, store.ErrOutcomeUnknown) ||
		errors.Is(err, store.ErrContention) || errors.Is(err, context.DeadlineExceeded)
}

func (s *sim) play(ops int) {
	for i := range ops {
		if s.fs.Dead() {
			s.restart("crashed")
		}
		switch n := s.rng.IntN(100); {
		case n < 42:
			s.submit()
		case n < 58:
			d := time.Duration(s.rng.IntN(8)) * 25 * time.Millisecond
			s.logf("advance %s", d)
			time.Sleep(d)
		case n < 68:
			s.answer()
		case n < 70:
			s.answerAgain()
		case n < 77:
			s.cancel()
		case n < 83:
			s.retry()
		case n < 88:
			s.closeAndRestart()
		case n < 91:
			s.logf("crash now")
			s.fs.Kill()
		case n < 96:
			k := 1 + s.rng.IntN(30)
			s.logf("crash armed: at the %d-th driver call from now", k)
			s.fs.CrashIn(k)
		default:
			if s.zombie == nil {
				s.pause()
			} else {
				s.releaseZombie()
			}
		}
		synctest.Wait()
		s.collectEvents(s.rt)
		s.check(fmt.Sprintf("after op %d", i))
	}
	s.drain()
}

func (s *sim) submit() {
	th := s.threads[s.rng.IntN(len(s.threads))]
	n := s.ids.Add(1)
	content := fmt.Sprintf("in%d", n)
	if s.rng.IntN(6) == 0 {
		content += " fail"
	}
	key := ""
	if s.rng.IntN(2) == 0 {
		key = fmt.Sprintf("k%d", n)
	}
	hint := []string{"queue", "inject", "inject+coalesce", "interrupt", "reject", "queue+coalesce", "inject"}[s.rng.IntN(7)]
	tk, err := s.rt.Submit(context.Background(), th, content, host.SubmitOptions{IdempotencyKey: key, Hint: hint})
	s.logf("submit %s %q key=%s hint=%s -> %v %v", th, content, key, hint, ticketStr(tk), err)
	in := &simInput{thread: th, content: content, key: key, hint: hint}
	switch {
	case err == nil:
		in.runID, in.msgID = tk.RunID, tk.InputMessageID
		s.inputs = append(s.inputs, in)
	case errors.Is(err, runstate.ErrBusy) && strings.HasPrefix(hint, "reject"):
	case transientErr(err) || s.fs.Dead():
		s.inputs = append(s.inputs, in) // it may have landed: resolved at the end
	default:
		// I8: nothing else refuses a legitimate submission.
		s.t.Fatalf("I8: submission %q with %s refused: %v", content, hint, err)
	}
}

// answer answers a call a waiting run waits on, with a random action and
// key.
func (s *sim) answer() {
	var waiting []record.Run
	for r, err := range s.reader().Runs(context.Background(), record.StateActive) {
		if err != nil {
			s.t.Fatal(err)
		}
		if len(r.Pending) > 0 {
			waiting = append(waiting, r)
		}
	}
	if len(waiting) == 0 {
		return
	}
	r := waiting[s.rng.IntN(len(waiting))]
	call := r.Pending[s.rng.IntN(len(r.Pending))]
	a := []host.Approval{
		{Action: record.AnswerApprove},
		{Action: record.AnswerEdit, Arguments: `{"q":"edited"}`},
		{Action: record.AnswerReject, Message: "no"},
		{Action: record.AnswerRespond, Message: "answered by a person"},
	}[s.rng.IntN(4)]
	if s.rng.IntN(3) > 0 {
		a.Key = fmt.Sprintf("ak%d", s.ids.Add(1))
	}
	res, err := s.rt.Answer(context.Background(), r.ID, call, a)
	s.logf("answer %s/%s %s key=%s -> dup=%v resumed=%v %v", r.ID, call, a.Action, a.Key, res.Duplicate, res.Resumed, err)
	switch {
	case err == nil:
		s.answers = append(s.answers, givenAnswer{run: r.ID, call: call, a: a, stepID: res.Step.ID, ok: true})
	case transientErr(err) || s.fs.Dead():
		s.answers = append(s.answers, givenAnswer{run: r.ID, call: call, a: a})
	case errors.Is(err, host.ErrAnswered), errors.Is(err, host.ErrNotWaiting):
		// The time limit answered it, or the run ended, since it was read.
	default:
		s.t.Fatalf("answer %s/%s: %v", r.ID, call, err)
	}
}

// answerAgain gives an answer again: with its key, the recorded one comes
// back (whatever the run did since); without, it is the recorded answer or
// refused as answered.
func (s *sim) answerAgain() {
	if len(s.answers) == 0 {
		return
	}
	g := s.answers[s.rng.IntN(len(s.answers))]
	res, err := s.rt.Answer(context.Background(), g.run, g.call, g.a)
	s.logf("answer again %s/%s %s key=%s -> dup=%v %v", g.run, g.call, g.a.Action, g.a.Key, res.Duplicate, err)
	switch {
	case transientErr(err) || s.fs.Dead():
	case !g.ok:
		// Its first outcome is unknown: either it landed, or not.
	case g.a.Key != "" && (err != nil || !res.Duplicate || res.Step.ID != g.stepID):
		s.t.Fatalf("answer of %s/%s with key %s again: %+v %v; first recorded as step %s", g.run, g.call, g.a.Key, res, err, g.stepID)
	case g.a.Key == "" && err == nil && !res.Duplicate:
		s.t.Fatalf("answer of %s/%s again, without a key, recorded a second answer: %+v", g.run, g.call, res)
	case g.a.Key == "" && err != nil && !errors.Is(err, host.ErrAnswered):
		s.t.Fatalf("answer of %s/%s again: %v", g.run, g.call, err)
	}
}

func ticketStr(tk *host.Ticket) string {
	if tk == nil {
		return "-"
	}
	return tk.RunID
}

// durableInput returns the input message holding content, if the store has
// it.
func (s *sim) durableInput(thread, content string) (record.Message, bool) {
	msgs, err := s.reader().Messages(context.Background(), thread)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, m := range msgs {
		if m.Role == record.RoleUser && m.Content == content {
			return m, true
		}
	}
	return record.Message{}, false
}

// retry resubmits an input with its key: I4. An input whose admission's
// outcome was unknown learns it here.
func (s *sim) retry() {
	var keyed []*simInput
	for _, in := range s.inputs {
		if in.key != "" {
			keyed = append(keyed, in)
		}
	}
	if len(keyed) == 0 {
		return
	}
	in := keyed[s.rng.IntN(len(keyed))]
	if in.runID == "" {
		if m, ok := s.durableInput(in.thread, in.content); ok {
			in.runID, in.msgID = m.RunID, m.ID
		}
	}
	tk, err := s.rt.Submit(context.Background(), in.thread, in.content, host.SubmitOptions{IdempotencyKey: in.key, Hint: in.hint})
	s.logf("retry %s key=%s -> %v %v", in.thread, in.key, ticketStr(tk), err)
	switch {
	case err != nil && (transientErr(err) || s.fs.Dead()):
		return
	case err != nil && errors.Is(err, runstate.ErrBusy) && in.runID == "" && strings.HasPrefix(in.hint, "reject"):
		s.inputs = slices.DeleteFunc(s.inputs, func(x *simInput) bool { return x == in })
		return
	case err == nil && in.runID == "":
		if tk.Duplicate {
			s.t.Fatalf("I4: retry of key %s, never admitted, is a duplicate of %+v", in.key, tk)
		}
		in.runID, in.msgID = tk.RunID, tk.InputMessageID
		return
	case err != nil || !tk.Duplicate || tk.RunID != in.runID || tk.InputMessageID != in.msgID:
		s.t.Fatalf("I4: retry of key %s gave %+v, %v; first admission run %s input %s", in.key, tk, err, in.runID, in.msgID)
	}
	_, err = s.rt.Submit(context.Background(), in.thread, in.content+" changed", host.SubmitOptions{IdempotencyKey: in.key})
	if !errors.Is(err, runstate.ErrKeyReused) && !transientErr(err) && !s.fs.Dead() {
		s.t.Fatalf("key %s reused with other content: %v", in.key, err)
	}
}

// cancel cancels a queued or active run: only a queued one may end so.
func (s *sim) cancel() {
	var open []record.Run
	for _, st := range []record.RunState{record.StateQueued, record.StateActive} {
		for r, err := range s.reader().Runs(context.Background(), st) {
			if err != nil {
				s.t.Fatal(err)
			}
			open = append(open, r)
		}
	}
	if len(open) == 0 {
		return
	}
	r := open[s.rng.IntN(len(open))]
	_, err := s.rt.Cancel(context.Background(), r.ID)
	s.logf("cancel %s (%s) -> %v", r.ID, r.State, err)
	switch {
	case err == nil, errors.Is(err, runstate.ErrNotQueued), transientErr(err), s.fs.Dead():
	case errors.Is(err, runstate.ErrTaken):
		// Rule 5: the active run took its inputs (checked by the oracle:
		// no cancel of a taken run ever lands).
	default:
		s.t.Fatalf("cancel %s: %v", r.ID, err)
	}
}

func (s *sim) closeAndRestart() {
	d := time.Duration(s.rng.IntN(4)) * 60 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), d)
	rep, err := s.rt.Close(ctx)
	cancel()
	s.logf("close deadline=%s -> settled=%v abandoned=%v queued=%d err=%v", d, rep.Settled, rep.Abandoned, len(rep.Queued), err)
	switch {
	case err != nil && (transientErr(err) || s.fs.Dead()):
	case err != nil:
		s.t.Fatal(err)
	case s.zombie == nil:
		// The report is truthful: abandoned runs are still active, queued
		// runs queued, and settled means nothing is left. (Not while a
		// paused process may yet write.)
		s.checkCloseReport(rep)
	}
	s.collectEvents(s.rt)
	s.dead[s.rt.Epoch()] = true
	s.start()
}

func (s *sim) checkCloseReport(rep host.CloseReport) {
	// A run whose terminal commit was in flight at the deadline (a group
	// commit waiting out a group window or a retry) is listed abandoned though the commit
	// landed: the report errs on the side of the run not being done.
	stillActive := 0
	for _, id := range rep.Abandoned {
		switch r := s.run(id); {
		case runstate.IsTerminal(r.State) && s.faults != (faultstore.Faults{}):
		case r.State != record.StateActive || r.Owner != s.rt.Epoch():
			s.t.Fatalf("close report: abandoned run %s is %s owned by %s", id, r.State, r.Owner)
		default:
			stillActive++
		}
	}
	left := 0
	for _, st := range []record.RunState{record.StateQueued, record.StateActive} {
		for _, err := range s.reader().Runs(context.Background(), st) {
			if err != nil {
				s.t.Fatal(err)
			}
			left++
		}
	}
	for _, id := range rep.Waiting {
		if r := s.run(id); r.State != record.StateActive || len(r.Pending) == 0 {
			s.t.Fatalf("close report: waiting run %s is %s with pending %v", id, r.State, r.Pending)
		}
	}
	left -= len(rep.Waiting)
	if rep.Settled != (left == 0 && stillActive == len(rep.Abandoned)) || stillActive+len(rep.Queued) != left {
		s.t.Fatalf("close report %+v, but %d runs are left", rep, left)
	}
}

// restart replaces a crashed process: nothing of it runs on, nothing more
// of it reaches the store, and its registry is lost. The new process sees
// what was durable.
func (s *sim) restart(why string) {
	s.fs.Kill()
	s.or.superseded(s.epoch)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.rt.Close(ctx)
	s.logf("restart (%s); faults so far: %s", why, strings.Join(s.fs.Log(), "; "))
	s.collectEvents(s.rt)
	s.dead[s.rt.Epoch()] = true
	s.start()
}

// pause stops the process where it is (its requests held, as a stopped or
// cut-off process's are) and starts its successor, which recovers its runs.
func (s *sim) pause() {
	s.logf("pause epoch=%s", s.rt.Epoch())
	s.fs.Pause()
	s.or.superseded(s.epoch)
	s.zombie, s.zfs = s.rt, s.fs
	s.dead[s.rt.Epoch()] = true
	s.start()
}

// releaseZombie lets the paused process's held requests reach the store,
// late, then kills it. What it did meanwhile (a run it started, say) is its
// successor's to recover: the successor restarts.
func (s *sim) releaseZombie() {
	s.logf("release paused epoch=%s", s.zombie.Epoch())
	s.zfs.Release()
	synctest.Wait()
	s.zfs.Kill()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.zombie.Close(ctx)
	s.collectEvents(s.zombie)
	s.zombie, s.zfs = nil, nil
	s.check("after the paused process's requests landed")
	s.restart("after a paused process")
}

// shutdown stops every process left, so that a failed seed ends cleanly.
func (s *sim) shutdown() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, p := range []struct {
		fs *faultstore.Driver
		rt *host.Runtime
	}{{s.zfs, s.zombie}, {s.fs, s.rt}} {
		if p.rt == nil {
			continue
		}
		p.fs.Release()
		p.fs.Kill()
		p.rt.Close(ctx)
	}
}

// reader reads the durable store directly, past the faults.
func (s *sim) reader() *store.Store {
	return store.New(s.mem, store.Options{MaxAttempts: s.maxAttempts})
}

// drain ends the faults, lets the last runtime finish everything, then
// checks that every accepted input resolves.
func (s *sim) drain() {
	if s.zombie != nil {
		s.releaseZombie()
	}
	s.faults = faultstore.Faults{}
	s.fs.SetFaults(s.faults)
	s.fs.CrashIn(1 << 30)
	if s.fs.Dead() {
		s.restart("crashed")
	}
	s.logf("faults end")
	for i := 0; ; i++ {
		left := 0
		for _, st := range []record.RunState{record.StateQueued, record.StateActive} {
			for _, err := range s.reader().Runs(context.Background(), st) {
				if err != nil {
					s.t.Fatal(err)
				}
				left++
			}
		}
		if left == 0 {
			break
		}
		if i == 10000 {
			for _, st := range []record.RunState{record.StateQueued, record.StateActive} {
				for r := range s.reader().Runs(context.Background(), st) {
					steps, _ := s.reader().ReadSteps(context.Background(), r.ID, 0, 0)
					var kinds []string
					for _, x := range steps {
						kinds = append(kinds, fmt.Sprintf("%s@%d/%s%s%s", x.Kind, x.Attempt, x.Message.ToolCallID, x.Ask.CallID, x.Answer.CallID))
					}
					s.logf("left: %s %s owner=%s attempt=%d pending=%v steps=%v", r.ID, r.State, r.Owner, r.Attempt, r.Pending, kinds)
				}
			}
			s.t.Fatalf("I1: %d runs never settled", left)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
	}
	s.collectEvents(s.rt)
	st := s.rt.Stats()
	s.logf("last process: waits=%d resumes=%d approval timeouts=%d answers=%v", st.Waits, st.Resumes, st.ApprovalTimeouts, st.Answers)
	s.check("at the end")
	for _, in := range s.inputs {
		if in.runID == "" {
			m, ok := s.durableInput(in.thread, in.content)
			if !ok {
				continue // never landed; its caller was told so, or heard nothing
			}
			in.runID, in.msgID = m.RunID, m.ID
		}
		res, err := s.rt.Wait(context.Background(), in.runID)
		if err != nil || !res.Settled {
			s.t.Fatalf("I1: ticket of %q: %+v %v", in.content, res, err)
		}
		r := s.run(in.runID)
		if r.TerminalReason == record.ReasonAbsorbed && (res.Answer == nil || res.AnsweredByRunID != r.AbsorbedIntoRunID) {
			s.t.Fatalf("I4: absorbed run %s resolves to %+v", r.ID, res)
		}
		if (r.State == record.StateCompleted || r.State == record.StateSuperseded) && (res.Answer == nil || !slices.Contains(answerParts(res.Answer.Content), in.content)) {
			s.t.Fatalf("I1: %q answered by %+v", in.content, res.Answer)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if rep, err := s.rt.Close(ctx); err != nil || !rep.Settled {
		s.t.Fatalf("final close: %+v %v", rep, err)
	}
}

func (s *sim) run(id string) record.Run {
	r, err := s.reader().GetRun(context.Background(), id)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// collectEvents records which inputs each run took, from a runtime's events
// (they are lost with the process, so gather them before).
func (s *sim) collectEvents(rt *host.Runtime) {
	runs, _ := s.allRuns()
	for _, r := range runs {
		evs, _ := rt.Events(r.ID, 0)
		for _, e := range evs {
			if e.Type == host.EventInputTaken && !slices.Contains(s.taken[r.ID], e.Data["input_message_id"]) {
				s.taken[r.ID] = append(s.taken[r.ID], e.Data["input_message_id"])
			}
		}
	}
}

func (s *sim) allRuns() ([]record.Run, error) {
	var out []record.Run
	for _, st := range record.RunStates {
		for r, err := range s.reader().Runs(context.Background(), st) {
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func (s *sim) check(when string) {
	t := s.t
	if bad := s.or.judge(); bad != "" {
		t.Fatalf("%s: %s", when, bad)
	}
	st, err := invariant.Load(context.Background(), s.reader(), s.threads)
	if err != nil {
		t.Fatal(err)
	}
	if err := invariant.Check(st); err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	runs, msgs := st.Runs, st.Messages
	for _, r := range runs {
		if r.State != record.StateCompleted {
			continue
		}
		// I5: the echo answer names only the run's own inputs, inputs it
		// took, and inputs of runs that ended before it.
		ans := msgs[r.AssistantMessageID]
		allowed := map[string]bool{}
		for _, id := range append(slices.Clone(r.InputMessageIDs), s.taken[r.ID]...) {
			allowed[msgs[id].Content] = true
		}
		for _, o := range runs {
			if o.ThreadID == r.ThreadID && runstate.IsTerminal(o.State) && o.EndSeq < r.EndSeq && o.TerminalReason != record.ReasonCanceled {
				for _, id := range o.InputMessageIDs {
					allowed[msgs[id].Content] = true
				}
			}
		}
		for _, part := range answerParts(ans.Content) {
			if !allowed[part] {
				t.Fatalf("I5 %s: run %s answered %q: %q was neither its input, taken, nor earlier history", when, r.ID, ans.Content, part)
			}
		}
	}
	// I1: every accepted input is held by its run.
	for _, in := range s.inputs {
		if in.runID == "" {
			continue
		}
		r, ok := runs[in.runID]
		if !ok || !slices.Contains(r.InputMessageIDs, in.msgID) {
			t.Fatalf("I1 %s: input %q lost (run %+v)", when, in.content, r)
		}
	}
}

// simLogger is the runtimes' log: discarded, or with SIMLOG set (when
// replaying a seed) written to stderr.
func simLogger() *slog.Logger {
	if os.Getenv("SIMLOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

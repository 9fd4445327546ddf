package host_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/invariant"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// raceEnabled is set when the race detector is on (race_test.go).
var raceEnabled bool

var (
	simSeeds = flag.Int("sim.seeds", 2000, "number of seeds TestSimulation runs")
	simSeed  = flag.Uint64("sim.seed", 0, "run TestSimulation for this one seed (replay)")
	simOps   = flag.Int("sim.ops", 40, "operations per seed")
)

// TestSimulation is a deterministic simulation of the runtime: one seed
// drives submissions on several threads with random hints (the policy reads
// them), model delays and failures, cancels, close() calls and crashes (the
// process-local state is dropped, the durable store kept), under a fake
// clock. After every operation it checks invariants I1 to I8. A failure
// prints the seed and the operation log; -sim.seed=N replays one seed.
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
				s.play(*simOps)
				if *simSeed != 0 {
					t.Logf("operations:\n  %s", strings.Join(s.log, "\n  "))
				}
			})
		})
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
	ticket                     *host.Ticket
}

type sim struct {
	t       *testing.T
	rng     *rand.Rand
	d       *memdriver.Driver
	rt      *host.Runtime
	ids     atomic.Int64
	log     []string
	inputs  []*simInput         // every accepted submission
	taken   map[string][]string // run → input ids it took, from events
	threads []string
	closed  bool
}

func newSim(t *testing.T, seed uint64) *sim {
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), d: memdriver.New(), taken: map[string][]string{}, threads: []string{"T1", "T2", "T3"}}
	s.start()
	return s
}

func (s *sim) logf(format string, args ...any) { s.log = append(s.log, fmt.Sprintf(format, args...)) }

// start starts a runtime over the durable store, as a new process would.
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
	rt, err := host.New(context.Background(), host.Config{
		Driver: s.d, Policy: hintPolicy{}, Model: m, Tools: []model.Tool{lookupTool{}},
		MaxConcurrentRuns: 2, MaxAttempts: 3,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NewID:  func(p string) string { return fmt.Sprintf("%s%04d", p, s.ids.Add(1)) },
	})
	if err != nil {
		s.t.Fatalf("start: %v", err)
	}
	s.rt, s.closed = rt, false
	s.logf("start epoch=%s", rt.Epoch())
}

func (s *sim) play(ops int) {
	for i := range ops {
		switch n := s.rng.IntN(100); {
		case n < 45:
			s.submit()
		case n < 75:
			d := time.Duration(s.rng.IntN(8)) * 25 * time.Millisecond
			s.logf("advance %s", d)
			time.Sleep(d)
		case n < 82:
			s.cancel()
		case n < 88:
			s.retry()
		case n < 94:
			s.closeAndRestart()
		default:
			s.crashAndRestart()
		}
		synctest.Wait()
		s.collectEvents()
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
	switch {
	case err == nil:
		s.inputs = append(s.inputs, &simInput{thread: th, content: content, key: key, hint: hint, ticket: tk})
	case errors.Is(err, runstate.ErrBusy) && strings.HasPrefix(hint, "reject"):
	default:
		// I8: nothing else refuses a legitimate submission.
		s.t.Fatalf("I8: submission %q with %s refused: %v", content, hint, err)
	}
}

func ticketStr(tk *host.Ticket) string {
	if tk == nil {
		return "-"
	}
	return tk.RunID
}

// retry resubmits an accepted input with its key: I4.
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
	tk, err := s.rt.Submit(context.Background(), in.thread, in.content, host.SubmitOptions{IdempotencyKey: in.key, Hint: in.hint})
	s.logf("retry %s key=%s -> %v %v", in.thread, in.key, ticketStr(tk), err)
	if err != nil || !tk.Duplicate || tk.RunID != in.ticket.RunID || tk.InputMessageID != in.ticket.InputMessageID {
		s.t.Fatalf("I4: retry of key %s gave %+v, %v; first admission %+v", in.key, tk, err, in.ticket)
	}
	if _, err := s.rt.Submit(context.Background(), in.thread, in.content+" changed", host.SubmitOptions{IdempotencyKey: in.key}); !errors.Is(err, runstate.ErrKeyReused) {
		s.t.Fatalf("key %s reused with other content: %v", in.key, err)
	}
}

func (s *sim) cancel() {
	var queued []record.Run
	for r, err := range s.rt.Store().Runs(context.Background(), record.StateQueued) {
		if err != nil {
			s.t.Fatal(err)
		}
		queued = append(queued, r)
	}
	if len(queued) == 0 {
		return
	}
	r := queued[s.rng.IntN(len(queued))]
	_, err := s.rt.Cancel(context.Background(), r.ID)
	s.logf("cancel %s -> %v", r.ID, err)
	if err != nil && !errors.Is(err, runstate.ErrNotQueued) { // it may have started meanwhile
		s.t.Fatalf("cancel %s: %v", r.ID, err)
	}
}

func (s *sim) closeAndRestart() {
	d := time.Duration(s.rng.IntN(4)) * 60 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), d)
	rep, err := s.rt.Close(ctx)
	cancel()
	s.logf("close deadline=%s -> settled=%v abandoned=%v queued=%d err=%v", d, rep.Settled, rep.Abandoned, len(rep.Queued), err)
	if err != nil {
		s.t.Fatal(err)
	}
	// The report is truthful: abandoned runs are still active, queued runs
	// queued, and settled means nothing is left.
	for _, id := range rep.Abandoned {
		if r := s.run(id); r.State != record.StateActive || r.Owner != s.rt.Epoch() {
			s.t.Fatalf("close report: abandoned run %s is %s owned by %s", id, r.State, r.Owner)
		}
	}
	left := 0
	for _, st := range []record.RunState{record.StateQueued, record.StateActive} {
		for _, err := range s.rt.Store().Runs(context.Background(), st) {
			if err != nil {
				s.t.Fatal(err)
			}
			left++
		}
	}
	if rep.Settled != (left == 0) || len(rep.Abandoned)+len(rep.Queued) != left {
		s.t.Fatalf("close report %+v, but %d runs are left", rep, left)
	}
	s.collectEvents()
	s.start()
}

// crashAndRestart drops the runtime as a killed process would: nothing runs
// on, nothing more is committed, and the registry is lost.
func (s *sim) crashAndRestart() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.rt.Close(ctx)
	s.logf("crash")
	s.collectEvents()
	s.start()
}

// drain lets the last runtime finish everything, then checks that every
// accepted input resolves.
func (s *sim) drain() {
	for i := 0; ; i++ {
		left := 0
		for _, st := range []record.RunState{record.StateQueued, record.StateActive} {
			for _, err := range s.rt.Store().Runs(context.Background(), st) {
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
			s.t.Fatalf("I1: %d runs never settled", left)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
	}
	s.collectEvents()
	s.check("at the end")
	for _, in := range s.inputs {
		res, err := s.rt.Wait(context.Background(), in.ticket.RunID)
		if err != nil || !res.Settled {
			s.t.Fatalf("I1: ticket of %q: %+v %v", in.content, res, err)
		}
		r := s.run(in.ticket.RunID)
		if r.TerminalReason == record.ReasonAbsorbed && (res.Answer == nil || res.AnsweredByRunID != r.AbsorbedIntoRunID) {
			s.t.Fatalf("I4: absorbed run %s resolves to %+v", r.ID, res)
		}
		if r.State == record.StateCompleted && (res.Answer == nil || !strings.Contains(res.Answer.Content, in.content)) {
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
	r, err := s.rt.Store().GetRun(context.Background(), id)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// collectEvents records which inputs each run took, from the runtime's
// events (they are lost with the process, so gather them before).
func (s *sim) collectEvents() {
	runs, _ := s.allRuns()
	for _, r := range runs {
		evs, _ := s.rt.Events(r.ID, 0)
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
		for r, err := range s.rt.Store().Runs(context.Background(), st) {
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
	st, err := invariant.Load(context.Background(), s.rt.Store(), s.threads)
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
		for _, part := range strings.Split(ans.Content, " | ") {
			if !allowed[part] {
				t.Fatalf("I5 %s: run %s answered %q: %q was neither its input, taken, nor earlier history", when, r.ID, ans.Content, part)
			}
		}
	}
	// I1: every accepted input is held by its run.
	for _, in := range s.inputs {
		r, ok := runs[in.ticket.RunID]
		if !ok || !slices.Contains(r.InputMessageIDs, in.ticket.InputMessageID) {
			t.Fatalf("I1 %s: input %q lost (run %+v)", when, in.content, r)
		}
	}
}

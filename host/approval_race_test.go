package host_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// stepLeaser is a driver with step records and leases, as a host with a
// tool policy over a shared store needs.
type stepLeaser interface {
	driver.Driver
	driver.Leaser
	driver.StepStore
}

// hookDriver lets a test step into the commits of waiting runs: it runs a
// hook around the commit of a wait (then loses its reply) or of a not-run
// result, holds or refuses the takeover of a waiting run, and drops the
// notices it is asked to send.
type hookDriver struct {
	stepLeaser
	// onWait, once set, runs after the first wait (a batch of ask steps)
	// landed; the committer is then told the store is unavailable.
	onWait func(b driver.Batch)
	// onNotRun, once set, runs before the first not-run result of an
	// interrupted waiting run is committed.
	onNotRun func(b driver.StepBatch)
	// holdTakeover, when set, holds each takeover of a waiting run until
	// it is closed; refuseTakeover refuses them.
	holdTakeover   chan struct{}
	holdHit        atomic.Int64
	refuseTakeover atomic.Bool
	refused        atomic.Int64
	// dropNotices: notices are not sent (dropped counts them).
	dropNotices atomic.Bool
	dropped     atomic.Int64
	mu          sync.Mutex
}

func (d *hookDriver) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	if takeover := slices.ContainsFunc(b.Runs, func(r record.Run) bool { return r.WaitTakeovers > 0 && len(r.Pending) > 0 }); takeover {
		d.mu.Lock()
		hold := d.holdTakeover
		d.mu.Unlock()
		switch {
		case d.refuseTakeover.Load():
			d.refused.Add(1)
			return 0, errInjected
		case hold != nil:
			d.holdHit.Add(1)
			select {
			case <-hold:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}
	v, err := d.stepLeaser.Commit(ctx, b)
	if err == nil && len(b.Steps) > 0 && b.Steps[0].Kind == record.StepAsk {
		d.mu.Lock()
		hook := d.onWait
		d.onWait = nil
		d.mu.Unlock()
		if hook != nil {
			hook(b)
			return 0, errInjected
		}
	}
	return v, err
}

func (d *hookDriver) CommitSteps(ctx context.Context, b driver.StepBatch) error {
	if len(b.Steps) > 0 && b.Steps[0].Kind == record.StepTool && strings.Contains(b.Steps[0].Message.Content, "interrupted while the call waited") {
		d.mu.Lock()
		hook := d.onNotRun
		d.onNotRun = nil
		d.mu.Unlock()
		if hook != nil {
			hook(b)
		}
	}
	return d.stepLeaser.CommitSteps(ctx, b)
}

func (d *hookDriver) Notify(ctx context.Context, n driver.Notice) error {
	if d.dropNotices.Load() {
		d.dropped.Add(1)
		return nil
	}
	return d.stepLeaser.Notify(ctx, n)
}

// A wait whose reply is lost is tried again; an answer that landed in
// between changed the run's Pending. The retry must find its wait landed
// (by its ask steps) rather than commit it again: committed again, it is
// refused as another wait, and the run failed for it.
func TestApprovalWaitLostReplyAnsweredBetween(t *testing.T) {
	d := &hookDriver{stepLeaser: memdriver.New()}
	var e *approvalEnv
	answered := make(chan error, 1)
	d.onWait = func(b driver.Batch) {
		_, err := e.rt.Answer(context.Background(), b.Steps[0].RunID, "c0", approve("k0"))
		answered <- err
	}
	e = newApprovalEnv(t, d, []string{"ask_a", "ask_b"}, nil)
	run := e.submit("T", "go", "")
	if err := <-answered; err != nil {
		t.Fatalf("the answer between the wait and its retry: %v", err)
	}
	e.waiting(run, "c1")
	e.answer(run, "c1", approve("k1"))
	out := e.result(run)
	if out.State != record.StateCompleted || !strings.Contains(answer(out), "result:c0=ask_a-ok") || !strings.Contains(answer(out), "result:c1=ask_b-ok") {
		t.Fatalf("result %s %q (%s)", out.State, answer(out), out.Error)
	}
}

// The same, with the answer deciding the last call: the run resumes.
func TestApprovalWaitLostReplyAllAnsweredBetween(t *testing.T) {
	d := &hookDriver{stepLeaser: memdriver.New()}
	var e *approvalEnv
	d.onWait = func(b driver.Batch) {
		if _, err := e.rt.Answer(context.Background(), b.Steps[0].RunID, "c0", approve("k0")); err != nil {
			t.Errorf("the answer between the wait and its retry: %v", err)
		}
	}
	e = newApprovalEnv(t, d, []string{"ask_a"}, nil)
	run := e.submit("T", "go", "")
	out := e.result(run)
	if out.State != record.StateCompleted || !strings.Contains(answer(out), "result:c0=ask_a-ok") {
		t.Fatalf("result %s %q (%s)", out.State, answer(out), out.Error)
	}
	if got := e.tools["ask_a"].calls(); len(got) != 1 {
		t.Fatalf("calls %v", got)
	}
}

// The time limit of an asked call runs from its wait, not from the start
// of its model step: the step's allowed calls, made first, may be slow.
func TestApprovalDeadlineFromTheWait(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	slow := clockTool{name: "slow", clock: &clock, by: time.Hour}
	e := newApprovalEnv(t, memdriver.New(), []string{"ask_x"}, func(c *host.Config) {
		c.Now = func() time.Time { return time.Unix(0, clock.Load()) }
		c.Tools = append(c.Tools, slow)
		c.Model = &askModel{calls: []string{"ask_x", "slow"}}
	})
	run := e.submit("T", "go", "")
	pend := e.waiting(run, "c0")
	if want := time.Unix(0, clock.Load()).Add(host.DefaultApprovalTimeout); !pend[0].Deadline.Equal(want) {
		t.Fatalf("deadline %s, want %s: the approval time limit from the wait", pend[0].Deadline, want)
	}
}

// clockTool moves a test clock on by its duration when called.
type clockTool struct {
	name  string
	clock *atomic.Int64
	by    time.Duration
}

func (c clockTool) Spec() model.ToolSpec { return model.ToolSpec{Name: c.name} }
func (c clockTool) Call(context.Context, string) (string, error) {
	c.clock.Add(int64(c.by))
	return c.name + "-ok", nil
}

// An interrupt of a waiting run whose not-run result meets an answer (any
// host may commit one; it takes the result's Seq) is not lost: the
// interrupt is tried again against the run as it is now, and the run ends
// interrupted without the approved call made.
func TestApprovalInterruptRacingAnAnswer(t *testing.T) {
	d := &hookDriver{stepLeaser: memdriver.New()}
	e := newApprovalEnv(t, d, []string{"ask_x", "ask_y"}, nil)
	run := e.submit("T", "first", "")
	e.waiting(run, "c0", "c1")
	var raced atomic.Bool
	d.onNotRun = func(driver.StepBatch) {
		if _, err := e.rt.Answer(context.Background(), run, "c0", approve("k")); err != nil {
			t.Errorf("the answer racing the interrupt: %v", err)
		}
		raced.Store(true)
	}
	next := e.submit("T", "stop that", "interrupt")
	out := e.result(run)
	if !raced.Load() {
		t.Fatal("the interrupt committed no not-run result: the test proves nothing")
	}
	if out.State != record.StateInterrupted {
		t.Fatalf("the interrupted run ended %s %q", out.State, answer(out))
	}
	if got := e.tools["ask_x"].calls(); len(got) != 0 {
		t.Fatalf("the approved call of the interrupted run was made: %v", got)
	}
	steps, err := e.rt.Steps(context.Background(), run, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var notRun []string
	for _, st := range steps {
		if st.Kind == record.StepTool && strings.Contains(st.Message.Content, "not run") {
			notRun = append(notRun, st.Message.ToolCallID)
		}
	}
	if !slices.Equal(notRun, []string{"c0", "c1"}) {
		t.Fatalf("not-run results for %v, want c0 and c1", notRun)
	}
	e.waiting(next, "c0", "c1") // the thread goes on
}

// An interrupt admitted while the waiting run's host is gone and nobody
// has taken it over yet goes, in the notice to the thread's home, to the
// host that takes the run over: the home remembers it while the run is
// still the dead host's, and stops the run once it has it, or, when
// another host took it over, passes the interrupt on to that host (and
// forgets it).
func TestApprovalSharedInterruptToTheHome(t *testing.T) {
	for _, byHome := range []bool{true, false} {
		name := "taken over by the home"
		if !byHome {
			name = "taken over by another host"
		}
		t.Run(name, func(t *testing.T) { testInterruptToTheHome(t, byHome) })
	}
}

func testInterruptToTheHome(t *testing.T, byHome bool) {
	mem := memdriver.NewShared(nil)
	shared := func(name string) func(*host.Config) {
		return func(c *host.Config) { c.LeaseTTL, c.PollInterval, c.HostName = longLease, 30*time.Millisecond, name }
	}
	x := newApprovalEnv(t, mem, []string{"ask_x"}, shared("X"))
	run := x.submit("T", "first", "")
	x.waiting(run, "c0")
	da, db := &hookDriver{stepLeaser: mem}, &hookDriver{stepLeaser: mem}
	a := newApprovalEnv(t, da, []string{"ask_x"}, shared("A"))
	b := newApprovalEnv(t, db, []string{"ask_x"}, shared("B"))
	home, other, dh, do := a, b, da, db
	if host.HomeOf("T", a.rt.LeaseEpoch(), b.rt.LeaseEpoch()) == b.rt.LeaseEpoch() {
		home, other, dh, do = b, a, db, da
	}
	// One host's takeover waits for the test; the other's is refused.
	taker, dTaker, dRefuser := home, dh, do
	if !byHome {
		taker, dTaker, dRefuser = other, do, dh
	}
	hold := make(chan struct{})
	dTaker.mu.Lock()
	dTaker.holdTakeover = hold
	dTaker.mu.Unlock()
	dRefuser.refuseTakeover.Store(true)
	released := false
	defer func() {
		if !released {
			close(hold)
		}
	}()
	if _, err := x.rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Both have found X gone: the home at once, the other two polls later.
	eventually(t, "the taker tries to take the waiting run over", func() bool { return dTaker.holdHit.Load() > 0 })
	eventually(t, "the other host tries too", func() bool { return dRefuser.refused.Load() > 0 })
	received := home.rt.Stats().NoticesReceived
	next := other.submit("T", "stop that", "interrupt")
	eventually(t, "the home hears of the interrupt", func() bool { return home.rt.Stats().NoticesReceived > received })
	if r, err := home.rt.Run(context.Background(), run); err != nil || !host.Waiting(r) {
		t.Fatalf("the run before the takeover: %+v %v", r, err)
	}
	released = true
	close(hold)
	out := taker.result(run)
	if out.State != record.StateInterrupted {
		t.Fatalf("the waiting run ended %s %q", out.State, answer(out))
	}
	if r, _ := taker.rt.Run(context.Background(), run); r.Owner != taker.rt.Epoch() || r.WaitTakeovers != 1 {
		t.Fatalf("the run %+v: want taken over once, by %s", r, taker.rt.Epoch())
	}
	taker.waiting(next, "c0")
}

// The notice that has an answered run executed again is sent once and not
// acknowledged: lost, the owner's poll finds the run, answered and not
// executing, and executes it (kickStranded).
func TestApprovalSharedLostResumeNotice(t *testing.T) {
	for _, name := range sortedKeys(sharedStores) {
		t.Run(name, func(t *testing.T) {
			d1, d2 := sharedStores[name](t)
			s1, ok1 := d1.(stepLeaser)
			s2, ok2 := d2.(stepLeaser)
			if !ok1 || !ok2 {
				t.Fatalf("%s keeps no steps", name)
			}
			da, db := &hookDriver{stepLeaser: s1}, &hookDriver{stepLeaser: s2}
			shared := func(name string) func(*host.Config) {
				return func(c *host.Config) { c.LeaseTTL, c.PollInterval, c.HostName = longLease, 30*time.Millisecond, name }
			}
			a := newApprovalEnv(t, da, []string{"ask_x"}, shared("A"))
			b := newApprovalEnv(t, db, []string{"ask_x"}, shared("B"))
			run := a.submit("T", "one", "")
			a.waiting(run, "c0")
			r, err := a.rt.Run(context.Background(), run)
			if err != nil {
				t.Fatal(err)
			}
			own, other, dother := a, b, db
			if r.Owner == b.rt.Epoch() {
				own, other, dother = b, a, da
			}
			dother.dropNotices.Store(true)
			received := own.rt.Stats().NoticesReceived
			if res := other.answer(run, "c0", approve("k")); !res.Resumed {
				t.Fatalf("answer: %+v", res)
			}
			out := own.result(run)
			if out.State != record.StateCompleted || !strings.Contains(answer(out), "result:c0=ask_x-ok") {
				t.Fatalf("result %s %q (%s)", out.State, answer(out), out.Error)
			}
			if dother.dropped.Load() == 0 || own.rt.Stats().NoticesReceived != received {
				t.Fatalf("the notice was not lost (dropped %d): the test proves nothing", dother.dropped.Load())
			}
		})
	}
}

// An edit repeated with its key is the recorded one whatever the order of
// its keys and its spacing: the arguments are kept in canonical form. A key
// may appear once in each object, however many objects name it.
func TestApprovalEditRepeatedInAnotherKeyOrder(t *testing.T) {
	e := newApprovalEnv(t, memdriver.New(), []string{"ask_a"}, nil)
	run := e.submit("T", "go", "")
	e.waiting(run, "c0")
	first := e.answer(run, "c0", host.Approval{Action: record.AnswerEdit, Arguments: `{"b": [1, {"y":2,"x":1}, {"x":3}], "x": 0, "a": 12345678901234567890, "h": "<&>"}`, Key: "e"})
	if want := `{"a":12345678901234567890,"b":[1,{"x":1,"y":2},{"x":3}],"h":"<&>","x":0}`; first.Step.Answer.Arguments != want {
		t.Fatalf("recorded arguments %s, want %s", first.Step.Answer.Arguments, want)
	}
	again, err := e.rt.Answer(context.Background(), run, "c0", host.Approval{Action: record.AnswerEdit, Arguments: `{"h":"<&>","x":0,"a":12345678901234567890,"b":[1,{"x":1,"y":2},{"x":3}]}`, Key: "e"})
	if err != nil || !again.Duplicate || again.Step.ID != first.Step.ID {
		t.Fatalf("the same edit in another key order: %+v %v", again, err)
	}
	e.result(run)
	if got := e.tools["ask_a"].calls(); len(got) != 1 || !strings.HasSuffix(got[0], `{"a":12345678901234567890,"b":[1,{"x":1,"y":2},{"x":3}],"h":"<&>","x":0}`) {
		t.Fatalf("calls %v", got)
	}
}

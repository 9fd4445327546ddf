package conformance

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// The rules of store protocol 2: step records (driver.StepStore) and thread
// listing (driver.ThreadLister). A driver of protocol 1 is still certified
// for what it does: these cases skip, saying what it lacks and what a host
// does instead, and the skip does not fail its tier (see protocolSkip).

func init() {
	cases = append(cases,
		testCase{"handshake", "protocol", TierBasic, false, testProtocol},
		testCase{"steps", "commit-read", TierBasic, false, testStepsCommitRead},
		testCase{"steps", "conditions", TierBasic, false, testStepConditions},
		testCase{"steps", "batch", TierBasic, false, testBatchSteps},
		testCase{"steps", "one-winner", TierBasic, false, testStepsOneWinner},
		testCase{"steps", "approval", TierBasic, false, testStepsApproval},
		testCase{"threads", "list", TierBasic, false, testListThreads},
		testCase{"durability", "steps-survive-kill", TierDurable, false, testStepsSurviveKill},
		testCase{"leases", "fenced-steps", TierLeases, false, testFencedSteps},
		testCase{"leases", "fenced-steps-owner", TierLeases, false, testFencedStepsOwner},
	)
}

// LacksApproval says what a driver that drops the records of tool-call
// approval (suite 1.4) lacks, and what a host does with it.
const LacksApproval = "the driver does not keep Run.Pending, Run.WaitTakeovers, Step.Ask or Step.Answer (ask and answer steps, added with suite 1.4): " +
	"rebuild it with the current sdk/storedriver and abi/record; a host on it cannot keep a run that waits for a tool call's approval"

// protocolSkip begins the message of a case skipped because the driver
// speaks store protocol 1.
const protocolSkip = "store protocol 1"

// Lacks1 says what a driver of store protocol 1 lacks, and what the host
// does instead.
const Lacks1 = "store protocol 1: the driver keeps no step records (driver.StepStore) and lists no threads (driver.ThreadLister); " +
	"a host on it restarts a recovered run from its first step (its model and tool calls are made again) and takes no input by injection"

// steps returns the step store and thread lister of instance in, or skips
// the case when the driver speaks store protocol 1.
func (c *C) steps(in Instance) (driver.StepStore, driver.ThreadLister) {
	c.needSteps()
	ss, tl, ok := stepsOf(in)
	if !ok {
		c.Fatalf("handshake.protocol-steps", "Info says store protocol %d, but the instance (%T) is no driver.StepStore and driver.ThreadLister", c.s.info.ProtocolVersion, in)
	}
	return ss, tl
}

// needSteps skips the case when the driver speaks store protocol 1.
func (c *C) needSteps() {
	if c.s.info.ProtocolVersion < 2 {
		c.Skipf("%s", Lacks1)
	}
}

// stepsOf finds the step store and thread lister of an instance: on the
// driver value the instance uses as the host would (its Store method, as
// driverhost.Driver has), else on the instance itself.
func stepsOf(in Instance) (driver.StepStore, driver.ThreadLister, bool) {
	var d driver.Driver = in
	if s, ok := in.(interface{ Store() driver.Driver }); ok {
		d = s.Store()
	}
	ss, ok1 := d.(driver.StepStore)
	tl, ok2 := d.(driver.ThreadLister)
	return ss, tl, ok1 && ok2
}

func testProtocol(c *C) {
	in := c.sharedInstance()
	v := c.s.info.ProtocolVersion
	if v < driver.OldestProtocolVersion || v > driver.ProtocolVersion {
		c.Fatalf("handshake.protocol-version", "Info says store protocol %d; the suite speaks %d to %d", v, driver.OldestProtocolVersion, driver.ProtocolVersion)
	}
	_, _, ok := stepsOf(in)
	switch {
	case v >= 2 && !ok:
		c.Errorf("handshake.protocol-steps", "Info says store protocol %d, but the instance (%T) is no driver.StepStore and driver.ThreadLister", v, in)
	case v < 2 && ok:
		c.Errorf("handshake.protocol-steps", "Info says store protocol %d, but the instance (%T) offers step records: a host would use them uncertified", v, in)
	case v < 2:
		c.Logf("%s", Lacks1)
	}
}

// activeRun admits a run on th and starts it as storedrivertest.StepOwner.
func (th *thread) activeRun(rule, id string) record.Run {
	r := th.admit(rule, id, "")
	r = storedrivertest.Activate(r, storedrivertest.StepOwner, storedrivertest.StepAttempt)
	th.commit(rule, th.Batch(th.Open, []record.Run{r}, nil, nil))
	return r
}

func sameSteps(a, b []record.Step) bool {
	norm := func(ss []record.Step) []record.Step {
		out := make([]record.Step, len(ss))
		for i, s := range ss {
			out[i] = record.NormalizeStep(s)
		}
		return out
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// expectSteps fails rule unless the run's whole step log is want.
func (c *C) expectSteps(rule string, ss driver.StepStore, runID string, want []record.Step) {
	got, err := ss.ReadSteps(c.ctx, runID, 0, 1000)
	if err != nil || !sameSteps(got, want) {
		c.Fatalf(rule, "ReadSteps(%s) = %d steps %v, %v; want %d steps %v", runID, len(got), stepIDs(got), err, len(want), stepIDs(want))
	}
}

func stepIDs(ss []record.Step) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

// expectVersion fails rule unless the thread is at version v.
func (c *C) expectVersion(rule string, d driver.Driver, threadID string, v int64, why string) {
	snap, err := d.LoadThread(c.ctx, threadID)
	if err != nil || snap.Thread.Version != v {
		c.Fatalf(rule, "thread %s is at version %d (%v) %s; want %d", threadID, snap.Thread.Version, err, why, v)
	}
}

func testStepsCommitRead(c *C) {
	d := c.sharedInstance()
	ss, _ := c.steps(d)
	th := c.thread(d, "steps-commit")
	r := th.activeRun("steps.commit", "sc-r1")
	v := th.Version
	want := storedrivertest.Steps(r, 1, 3)
	c.ok("steps.commit", "CommitSteps 1-3", ss.CommitSteps(c.ctx, storedrivertest.StepBatchOf(r, want...)))
	c.expectVersion("steps.version-unchanged", d, th.ID, v, "after CommitSteps")
	c.expectSteps("steps.read", ss, r.ID, want)
	c.ok("steps.commit", "CommitSteps 4", ss.CommitSteps(c.ctx, storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 4))))
	want = append(want, storedrivertest.Step(r, 4))
	c.expectVersion("steps.version-unchanged", d, th.ID, v, "after a second CommitSteps")
	// An admission computed before the steps commits: they made no
	// admission retry.
	th.admit("steps.version-unchanged", "sc-r2", "")

	for _, p := range []struct {
		after int64
		limit int
		want  []record.Step
	}{{0, 3, want[:3]}, {1, 2, want[1:3]}, {3, 5, want[3:]}, {4, 5, nil}, {-1, 1, want[:1]}} {
		got, err := ss.ReadSteps(c.ctx, r.ID, p.after, p.limit)
		if err != nil || !sameSteps(got, p.want) {
			c.Fatalf("steps.paging", "ReadSteps(after %d, limit %d) = %v, %v; want %v", p.after, p.limit, stepIDs(got), err, stepIDs(p.want))
		}
	}
	if got, err := ss.ReadSteps(c.ctx, "sc-no-such-run", 0, 10); err != nil || len(got) != 0 {
		c.Fatalf("steps.read", "ReadSteps of an unknown run = %v, %v; want none", stepIDs(got), err)
	}
	_, err := ss.ReadSteps(c.ctx, r.ID, 0, 0)
	c.wantErr("steps.bad-input", "ReadSteps with limit 0", err, driver.ErrInvalidArgument)
}

func testStepConditions(c *C) {
	d := c.sharedInstance()
	ss, _ := c.steps(d)
	th := c.thread(d, "steps-cond")
	r := th.activeRun("steps.commit", "cd-r1")
	want := storedrivertest.Steps(r, 1, 2)
	c.ok("steps.commit", "CommitSteps 1-2", ss.CommitSteps(c.ctx, storedrivertest.StepBatchOf(r, want...)))
	q := th.admit("steps.commit", "cd-q", "")
	v := th.Version

	refused := func(rule, what string, sentinel error, b driver.StepBatch) {
		err := ss.CommitSteps(c.ctx, b)
		c.wantErr(rule, what, err, sentinel)
		c.expectSteps(rule, ss, r.ID, want)
		c.expectVersion(rule, d, th.ID, v, "after a refused CommitSteps")
		if b.RunID != r.ID {
			c.expectSteps(rule, ss, b.RunID, nil)
		}
	}
	b := storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 3))
	b.Owner = "host-other"
	refused("steps.cond-owner", "steps of the run by another owner", driver.ErrVersionConflict, b)
	b = storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 3))
	b.Attempt = storedrivertest.StepAttempt + 1
	refused("steps.cond-attempt", "steps of the run by another attempt", driver.ErrVersionConflict, b)
	refused("steps.next-seq", "steps that skip a seq", driver.ErrVersionConflict, storedrivertest.StepBatchOf(r, storedrivertest.Steps(r, 4, 5)...))
	refused("steps.next-seq", "steps that repeat a seq", driver.ErrVersionConflict, storedrivertest.StepBatchOf(r, storedrivertest.Steps(r, 2, 3)...))
	qa := q
	qa.Owner, qa.Attempt = storedrivertest.StepOwner, storedrivertest.StepAttempt
	refused("steps.cond-active", "steps of a queued run", driver.ErrVersionConflict, storedrivertest.StepBatchOf(qa, storedrivertest.Step(qa, 1)))
	ghost := storedrivertest.Activate(record.Run{ID: "cd-ghost", ThreadID: th.ID}, storedrivertest.StepOwner, storedrivertest.StepAttempt)
	refused("steps.cond-active", "steps of a run never written", driver.ErrVersionConflict, storedrivertest.StepBatchOf(ghost, storedrivertest.Step(ghost, 1)))
	bad := storedrivertest.StepBatchOf(r, storedrivertest.Steps(r, 3, 4)...)
	bad.Steps[0], bad.Steps[1] = bad.Steps[1], bad.Steps[0]
	refused("steps.bad-input", "steps out of order", driver.ErrInvalidArgument, bad)
	bad = storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 3))
	bad.Steps[0].RunID = q.ID
	refused("steps.bad-input", "a step of another run", driver.ErrInvalidArgument, bad)
	refused("steps.bad-input", "no steps", driver.ErrInvalidArgument, storedrivertest.StepBatchOf(r))

	// A run that ended takes no more steps, and keeps those it has.
	ended := r
	ended.State, ended.TerminalReason, ended.EndedAt = record.StateFailed, record.ReasonFailed, storedrivertest.T0
	th.commit("steps.commit", th.Batch([]string{q.ID}, []record.Run{ended}, nil, nil))
	v = th.Version
	refused("steps.cond-active", "steps of a run that ended", driver.ErrVersionConflict, storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 3)))
}

func testBatchSteps(c *C) {
	d := c.sharedInstance()
	ss, _ := c.steps(d)
	th := c.thread(d, "steps-batch")
	r := th.activeRun("steps.commit", "bs-r1")
	c.ok("steps.commit", "CommitSteps 1", ss.CommitSteps(c.ctx, storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 1))))
	want := storedrivertest.Steps(r, 1, 1)
	mk := func(b *storedrivertest.Builder, steps ...record.Step) driver.Batch {
		n := b.Run("bs-new")
		batch := b.Batch(append(slices.Clone(b.Open), n.ID), []record.Run{n}, []record.Message{b.Msg("bs-new-in", n.ID)}, nil)
		batch.Steps = steps
		return batch
	}
	refused := func(rule, what string, sentinel error, b driver.Batch) {
		_, err := d.Commit(c.ctx, b)
		c.wantErr(rule, what, err, sentinel)
		c.expectUntouched(rule, d, th.ID, th.Version, int(th.NextSeq-1), []string{"bs-new"}, nil)
		c.expectSteps(rule, ss, r.ID, want)
	}
	refused("steps.batch-next-seq", "a batch whose steps skip a seq", driver.ErrVersionConflict, mk(th.Fork(), storedrivertest.Step(r, 3)))
	refused("steps.batch-next-seq", "a batch whose steps repeat a seq", driver.ErrVersionConflict, mk(th.Fork(), storedrivertest.Steps(r, 1, 2)...))
	stale := th.Fork()
	stale.Version--
	refused("steps.batch-atomic", "a batch at a stale version with steps that fit", driver.ErrVersionConflict, mk(stale, storedrivertest.Steps(r, 2, 3)...))

	b := mk(th.Fork(), storedrivertest.Steps(r, 2, 3)...)
	th.RunSeq++
	th.NextSeq++
	th.commit("steps.batch-atomic", b)
	want = storedrivertest.Steps(r, 1, 3)
	c.expectSteps("steps.batch-atomic", ss, r.ID, want)
	c.ok("steps.batch-next-seq", "CommitSteps after a batch with steps", ss.CommitSteps(c.ctx, storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 4))))
}

func testStepsOneWinner(c *C) {
	d := c.sharedInstance()
	ss, _ := c.steps(d)
	th := c.thread(d, "steps-race")
	var runs []record.Run
	for i := range 4 {
		runs = append(runs, th.activeRun("steps.commit", fmt.Sprintf("sr-r%d", i)))
	}
	const writers = 8
	var mu sync.Mutex
	wins := make([][]string, len(runs))
	var other []string
	var wg sync.WaitGroup
	for ri, r := range runs {
		for w := range writers {
			wg.Go(func() {
				s := storedrivertest.Step(r, 1)
				s.ID = fmt.Sprintf("%s-w%d", r.ID, w)
				err := ss.CommitSteps(c.ctx, storedrivertest.StepBatchOf(r, s))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins[ri] = append(wins[ri], s.ID)
				case !isErr(err, driver.ErrVersionConflict):
					other = append(other, fmt.Sprintf("%s: %v", s.ID, err))
				}
			})
		}
	}
	wg.Wait()
	if len(other) > 0 {
		c.Fatalf("steps.one-winner", "racing step commits failed otherwise than ErrVersionConflict: %s", strings.Join(other, "; "))
	}
	for ri, r := range runs {
		if len(wins[ri]) != 1 {
			c.Fatalf("steps.one-winner", "run %s: %d of %d writers of step 1 won (%v); want exactly one", r.ID, len(wins[ri]), writers, wins[ri])
		}
		got, err := ss.ReadSteps(c.ctx, r.ID, 0, 100)
		if err != nil || len(got) != 1 || got[0].ID != wins[ri][0] {
			c.Fatalf("steps.one-winner", "run %s: ReadSteps = %v, %v; want the winner %s", r.ID, stepIDs(got), err, wins[ri][0])
		}
	}
	c.expectVersion("steps.version-unchanged", d, th.ID, th.Version, "after racing step commits")
}

func testListThreads(c *C) {
	c.needSteps()
	d, _ := c.start() // lists every thread: a store of its own
	_, tl := c.steps(d)
	page, err := tl.ListThreads(c.ctx, "", 10)
	if err != nil || len(page) != 0 {
		c.Fatalf("threads.list", "ListThreads of an empty store = %d threads, %v", len(page), err)
	}
	n := 7
	if c.full {
		n = 300
	}
	want := map[string]record.Thread{}
	var ids []string
	for i := range n {
		id := fmt.Sprintf("lt-%03d", (i*37)%n) // written out of order
		th := c.thread(d, id)
		th.admit("threads.list", id+"-r", "")
		snap, err := d.LoadThread(c.ctx, id)
		c.ok("threads.list", "LoadThread", err)
		want[id] = snap.Thread
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, limit := range []int{1, 3, n + 1} {
		var got []string
		after := ""
		for i := 0; ; i++ {
			page, err := tl.ListThreads(c.ctx, after, limit)
			c.ok("threads.list", fmt.Sprintf("ListThreads(%q, %d)", after, limit), err)
			if len(page) > limit {
				c.Fatalf("threads.list-paging", "ListThreads with limit %d returned %d threads", limit, len(page))
			}
			if len(page) == 0 {
				break
			}
			for _, h := range page {
				if h.ID <= after {
					c.Fatalf("threads.list-order", "ListThreads after %q returned %q (threads must come in id order after the cursor)", after, h.ID)
				}
				if !reflect.DeepEqual(record.NormalizeThread(h), record.NormalizeThread(want[h.ID])) {
					c.Fatalf("threads.list", "ListThreads gave header %+v; LoadThread gave %+v", h, want[h.ID])
				}
				after = h.ID
				got = append(got, h.ID)
			}
			if i > n+2 {
				c.Fatalf("threads.list-paging", "ListThreads never ends")
			}
		}
		if !slices.Equal(got, ids) {
			c.Fatalf("threads.list-paging", "ListThreads with limit %d listed %d threads %v; want %d", limit, len(got), got, len(ids))
		}
	}
	_, err = tl.ListThreads(c.ctx, "", 0)
	c.wantErr("threads.bad-input", "ListThreads with limit 0", err, driver.ErrInvalidArgument)
}

func testStepsSurviveKill(c *C) {
	c.needSteps()
	d, dir := c.start()
	ss, _ := c.steps(d)
	const runs = 4
	var rs []record.Run
	for i := range runs {
		th := c.thread(d, fmt.Sprintf("steps-kill-%d", i))
		rs = append(rs, th.activeRun("durability.steps", fmt.Sprintf("sk-r%d", i)))
	}
	// Concurrent step streams, one per run; the kill cuts them.
	acked := make([]int64, runs)
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			for seq := int64(1); seq <= 30; seq++ {
				if ss.CommitSteps(c.ctx, storedrivertest.StepBatchOf(r, storedrivertest.Step(r, seq))) != nil {
					return
				}
				acked[i] = seq
				if i == 0 && seq == 20 {
					_ = d.Kill()
				}
			}
		})
	}
	wg.Wait()
	c.mustKill(d)
	d = c.startOn(dir)
	ss, _ = c.steps(d)
	for i, r := range rs {
		got, err := ss.ReadSteps(c.ctx, r.ID, 0, 100)
		c.ok("durability.steps", "ReadSteps after the relaunch", err)
		if int64(len(got)) < acked[i] {
			c.Fatalf("durability.steps", "run %s has %d steps after the relaunch, but step %d was acknowledged", r.ID, len(got), acked[i])
		}
		if !sameSteps(got, storedrivertest.Steps(r, 1, int64(len(got)))) {
			c.Fatalf("durability.steps", "run %s: its steps after the relaunch are not its steps 1..%d whole: %v", r.ID, len(got), stepIDs(got))
		}
	}
}

func testFencedSteps(c *C) {
	c.needSteps()
	d, _ := c.start()
	ss, _ := c.steps(d)
	l := c.leaser(d)
	a := c.acquire(l, "steps-a", longTTL)
	th := c.thread(d, "steps-fence")
	b := fenced(th, "fs-r1", a.Epoch, a.Epoch)
	th.commit("leases.fence-sets-owner", b)
	r := storedrivertest.Activate(b.Runs[0], storedrivertest.StepOwner, storedrivertest.StepAttempt)
	b = th.Batch(th.Open, []record.Run{r}, nil, nil)
	b.Fence, b.Thread.Owner = a.Epoch, a.Epoch
	th.commit("leases.fence-sets-owner", b)
	sb := storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 1))
	sb.Fence = a.Epoch
	c.ok("leases.fenced-steps", "CommitSteps fenced by the owning live lease", ss.CommitSteps(c.ctx, sb))
	want := storedrivertest.Steps(r, 1, 1)

	// Another live lease does not own the thread.
	o := c.acquire(l, "steps-b", longTTL)
	sb = storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 2))
	sb.Fence = o.Epoch
	err := ss.CommitSteps(c.ctx, sb)
	c.wantErr("leases.fenced-steps", "CommitSteps fenced by a live lease that does not own the thread", err, driver.ErrFenced)
	c.expectSteps("leases.fenced-steps", ss, r.ID, want)

	// The owner's lease dies: its steps are refused.
	x, err := l.RenewLease(c.ctx, a.Epoch, shortTTL)
	c.ok("leases.renew", "RenewLease to a short ttl", err)
	c.waitDead(x)
	sb.Fence = a.Epoch
	err = ss.CommitSteps(c.ctx, sb)
	c.wantErr("leases.fenced-steps", "CommitSteps fenced by a dead lease", err, driver.ErrFenced)
	c.expectSteps("leases.fenced-steps", ss, r.ID, want)
	c.expectVersion("leases.fenced-steps", d, th.ID, th.Version, "after refused fenced steps")
}

// testFencedStepsOwner: fenced steps are accepted only from the lease that
// owns the thread, never from a live lease that merely found the thread
// unowned or its owner dead (a fenced batch takes a thread over; steps do
// not).
func testFencedStepsOwner(c *C) {
	const rule = "leases.fenced-steps-owner"
	d, _ := c.start()
	ss, _ := c.steps(d)
	l := c.leaser(d)
	a := c.acquire(l, "steps-owner-a", longTTL)
	b := c.acquire(l, "steps-owner-b", longTTL)

	// A thread no lease owns (its commits unfenced): fenced steps of a
	// live lease are refused.
	th := c.thread(d, "steps-unowned")
	r := th.activeRun(rule, "fo-r1")
	sb := storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 1))
	sb.Fence = a.Epoch
	err := ss.CommitSteps(c.ctx, sb)
	c.wantErr(rule, "CommitSteps fenced by a live lease on a thread no lease owns", err, driver.ErrFenced)
	c.expectSteps(rule, ss, r.ID, nil)

	// A thread whose owner died: another live lease's fenced steps are
	// refused until a fenced commit of its own takes the thread.
	x := c.acquire(l, "steps-owner-x", longTTL)
	th = c.thread(d, "steps-dead-owner")
	bt := fenced(th, "fd-r1", x.Epoch, x.Epoch)
	th.commit("leases.fence-sets-owner", bt)
	r = storedrivertest.Activate(bt.Runs[0], storedrivertest.StepOwner, storedrivertest.StepAttempt)
	bt = th.Batch(th.Open, []record.Run{r}, nil, nil)
	bt.Fence, bt.Thread.Owner = x.Epoch, x.Epoch
	th.commit("leases.fence-sets-owner", bt)
	dead, err := l.RenewLease(c.ctx, x.Epoch, shortTTL)
	c.ok("leases.renew", "RenewLease to a short ttl", err)
	c.waitDead(dead)
	sb = storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 1))
	sb.Fence = b.Epoch
	err = ss.CommitSteps(c.ctx, sb)
	c.wantErr(rule, "CommitSteps fenced by a live lease on a thread a dead lease owns", err, driver.ErrFenced)
	c.expectSteps(rule, ss, r.ID, nil)
	c.expectVersion(rule, d, th.ID, th.Version, "after refused fenced steps")

	bt = th.Batch(th.Open, nil, nil, nil)
	bt.Fence, bt.Thread.Owner = b.Epoch, b.Epoch
	th.commit("leases.fence-sets-owner", bt)
	c.ok(rule, "CommitSteps fenced by the lease that took the thread over", ss.CommitSteps(c.ctx, sb))
	c.expectSteps(rule, ss, r.ID, storedrivertest.Steps(r, 1, 1))
}

func isErr(err, target error) bool { return errors.Is(err, target) }

// testStepsApproval: the records of a run that waits for approval, the
// ask and answer steps (in versioned batches) and the run's Pending list,
// are kept whole.
func testStepsApproval(c *C) {
	d := c.sharedInstance()
	ss, _ := c.steps(d)
	th := c.thread(d, "steps-approval")
	r := th.activeRun("steps.commit", "ap-r1")
	c.ok("steps.commit", "CommitSteps 1", ss.CommitSteps(c.ctx, storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 1))))
	want := storedrivertest.Steps(r, 1, 1)
	deadline := storedrivertest.T0.Add(24 * time.Hour)
	ask := func(seq int64, call string) record.Step {
		return record.Step{ID: fmt.Sprintf("ap-ask-%d", seq), RunID: r.ID, ThreadID: r.ThreadID, Seq: seq, Attempt: r.Attempt, Kind: record.StepAsk,
			Ask:       record.Ask{CallID: call, Tool: "fs_delete", Server: "files", Arguments: `{"path":"/tmp/x"}`, Prompt: "Delete /tmp/x?", Approvals: 2, Deadline: deadline},
			CreatedAt: storedrivertest.T0}
	}
	waiting := r
	waiting.Pending = []string{"call-1", "call-2"}
	b := th.Batch(th.Open, []record.Run{waiting}, nil, nil)
	b.Steps = []record.Step{ask(2, "call-1"), ask(3, "call-2")}
	if _, err := d.Commit(c.ctx, b); err != nil {
		c.Fatalf("steps.approval", "a batch with ask steps and the run's Pending: %v (%s)", err, LacksApproval)
	}
	th.Committed(b)
	want = append(want, b.Steps...)
	c.expectApproval(d, ss, waiting, want)

	answer := record.Step{ID: "ap-answer-4", RunID: r.ID, ThreadID: r.ThreadID, Seq: 4, Attempt: r.Attempt, Kind: record.StepAnswer,
		Answer: record.Answer{CallID: "call-2", Action: record.AnswerEdit, Arguments: `{"path":"/tmp/y"}`, Key: "k-1"}, CreatedAt: storedrivertest.T0}
	waiting.Pending = []string{"call-1"}
	waiting.WaitTakeovers = 1 // as if taken over while it waited: the count is kept whole too
	b = th.Batch(th.Open, []record.Run{waiting}, nil, nil)
	b.Steps = []record.Step{answer}
	if _, err := d.Commit(c.ctx, b); err != nil {
		c.Fatalf("steps.approval", "a batch with an answer step: %v (%s)", err, LacksApproval)
	}
	th.Committed(b)
	want = append(want, answer)
	c.expectApproval(d, ss, waiting, want)
	// Pending emptied: the run reads back with none.
	waiting.Pending = nil
	th.commit("steps.approval", th.Batch(th.Open, []record.Run{waiting}, nil, nil))
	c.expectApproval(d, ss, waiting, want)
}

// expectApproval fails steps.approval unless run r and its step log read
// back as written, through LoadThread, GetRuns and ReadSteps.
func (c *C) expectApproval(d driver.Driver, ss driver.StepStore, r record.Run, want []record.Step) {
	snap, err := d.LoadThread(c.ctx, r.ThreadID)
	if err != nil || len(snap.Runs) == 0 || !sameRun(snap.Runs[0], r) {
		var got []string
		if err == nil && len(snap.Runs) > 0 {
			got = snap.Runs[0].Pending
		}
		c.Fatalf("steps.approval", "LoadThread(%s): the run's Pending is %q (%v), want %q (%s)", r.ThreadID, got, err, r.Pending, LacksApproval)
	}
	runs, err := d.GetRuns(c.ctx, []string{r.ID})
	if err != nil || len(runs) != 1 || !sameRun(runs[0], r) {
		c.Fatalf("steps.approval", "GetRuns(%s) = %+v, %v; want Pending %q, WaitTakeovers %d (%s)", r.ID, runs, err, r.Pending, r.WaitTakeovers, LacksApproval)
	}
	got, err := ss.ReadSteps(c.ctx, r.ID, 0, 1000)
	if err != nil || !sameSteps(got, want) {
		c.Fatalf("steps.approval", "ReadSteps(%s) = %+v, %v; want the ask and answer steps as written (%s)", r.ID, got, err, LacksApproval)
	}
}

package conformance

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

// The leases tier checks the rules of driver.Leaser, by the store's clock:
// the suite never compares the store's times with its own, and where a
// lease must have died it waits well past its expiry (shortTTL, then
// expiryMargin more) instead of timing anything closely.

func init() {
	cases = append(cases,
		testCase{"leases", "acquire-renew-release", TierLeases, false, testLeaseLifecycle},
		testCase{"leases", "expiry", TierLeases, false, testLeaseExpiry},
		testCase{"leases", "fence", TierLeases, false, testFence},
		testCase{"leases", "takeover", TierLeases, false, testTakeover},
		testCase{"leases", "notices", TierLeases, false, testNotices},
		testCase{"shared", "leases", TierShared, false, testSharedLeases},
		testCase{"shared", "notices", TierShared, false, testSharedNotices},
	)
}

const (
	longTTL      = time.Minute
	shortTTL     = 300 * time.Millisecond
	expiryMargin = time.Second
	noticeWait   = 10 * time.Second
)

// leaser returns d's leases, failing the case when it has none.
func (c *C) leaser(d driver.Driver) driver.Leaser {
	l, ok := d.(driver.Leaser)
	if !ok {
		c.Fatalf("leases.interface", "the driver says it has leases, but the instance (%T) is no driver.Leaser", d)
	}
	return l
}

func (c *C) acquire(l driver.Leaser, holder string, ttl time.Duration) driver.Lease {
	x, err := l.AcquireLease(c.ctx, holder, ttl)
	c.ok("leases.acquire", "AcquireLease("+holder+")", err)
	if x.Epoch <= 0 {
		c.Fatalf("leases.acquire", "AcquireLease(%s) gave epoch %d, want a positive one", holder, x.Epoch)
	}
	return x
}

// waitDead waits until lease x, as last written (its Expires and Now by the
// store's clock), has certainly died.
func (c *C) waitDead(x driver.Lease) {
	left := x.Expires.Sub(x.Now)
	if x.Now.IsZero() || left > longTTL {
		c.Fatalf("leases.now", "lease %d says it expires at %v, now %v: want the store's time with it", x.Epoch, x.Expires, x.Now)
	}
	select {
	case <-time.After(left + expiryMargin):
	case <-c.ctx.Done():
		c.Fatalf("suite.context", "%v", c.ctx.Err())
	}
}

// listed returns the epochs Leases lists, checking their order and Now.
func (c *C) listed(l driver.Leaser) []int64 {
	ls, err := l.Leases(c.ctx)
	c.ok("leases.list", "Leases", err)
	var out []int64
	for _, x := range ls {
		if len(out) > 0 && x.Epoch <= out[len(out)-1] {
			c.Fatalf("leases.list", "Leases lists epoch %d after %d: want epoch order", x.Epoch, out[len(out)-1])
		}
		if x.Now.IsZero() || !x.Expires.After(x.Now) {
			c.Fatalf("leases.list", "Leases lists lease %d expiring at %v, now %v: a listed lease is live, with the store's time", x.Epoch, x.Expires, x.Now)
		}
		out = append(out, x.Epoch)
	}
	return out
}

func testLeaseLifecycle(c *C) {
	d, _ := c.start()
	l := c.leaser(d)
	var xs []driver.Lease
	for i := range 3 {
		x := c.acquire(l, fmt.Sprintf("host-%d", i), longTTL)
		if x.Holder != fmt.Sprintf("host-%d", i) {
			c.Errorf("leases.acquire", "AcquireLease(host-%d) gave holder %q", i, x.Holder)
		}
		if x.Now.IsZero() || !x.Expires.After(x.Now) || x.Expires.Sub(x.Now) > longTTL+time.Second || x.Expires.Sub(x.Now) < longTTL-time.Second {
			c.Errorf("leases.acquire", "a lease of ttl %v expires at %v, the store's time being %v", longTTL, x.Expires, x.Now)
		}
		if len(xs) > 0 && x.Epoch <= xs[len(xs)-1].Epoch {
			c.Fatalf("leases.epochs", "lease epochs %d then %d: each acquisition must get a new, greater epoch", xs[len(xs)-1].Epoch, x.Epoch)
		}
		xs = append(xs, x)
	}
	want := []int64{xs[0].Epoch, xs[1].Epoch, xs[2].Epoch}
	if got := c.listed(l); !slices.Equal(got, want) {
		c.Fatalf("leases.list", "Leases lists %v, want the live leases %v", got, want)
	}
	// Renewal extends a live lease.
	r, err := l.RenewLease(c.ctx, xs[1].Epoch, 2*longTTL)
	c.ok("leases.renew", "RenewLease of a live lease", err)
	if r.Epoch != xs[1].Epoch || r.Holder != xs[1].Holder || !r.Expires.After(xs[1].Expires) {
		c.Fatalf("leases.renew", "RenewLease(%d, %v) = %+v: want the same lease expiring later than %v", xs[1].Epoch, 2*longTTL, r, xs[1].Expires)
	}
	// Release kills at once, for good.
	c.ok("leases.release", "ReleaseLease", l.ReleaseLease(c.ctx, xs[0].Epoch))
	if got := c.listed(l); slices.Contains(got, xs[0].Epoch) {
		c.Fatalf("leases.release", "a released lease is still listed: %v", got)
	}
	_, err = l.RenewLease(c.ctx, xs[0].Epoch, longTTL)
	c.wantErr("leases.release", "RenewLease of a released lease", err, driver.ErrFenced)
	c.ok("leases.release", "releasing a dead lease again", l.ReleaseLease(c.ctx, xs[0].Epoch))
	_, err = l.RenewLease(c.ctx, xs[2].Epoch+1000, longTTL)
	c.wantErr("leases.renew-dead", "RenewLease of an unknown epoch", err, driver.ErrFenced)
	// A new lease never reuses an epoch.
	if x := c.acquire(l, "host-3", longTTL); x.Epoch <= xs[2].Epoch {
		c.Fatalf("leases.epochs", "a lease acquired after epoch %d got epoch %d", xs[2].Epoch, x.Epoch)
	}
	_, err = l.AcquireLease(c.ctx, "host-x", 0)
	c.wantErr("leases.acquire", "AcquireLease with ttl 0", err, driver.ErrInvalidArgument)
}

func testLeaseExpiry(c *C) {
	d, _ := c.start()
	l := c.leaser(d)
	keep := c.acquire(l, "keeper", longTTL)
	x := c.acquire(l, "mortal", longTTL)
	// The short ttl is set by a renewal, so that no commit races it.
	x, err := l.RenewLease(c.ctx, x.Epoch, shortTTL)
	c.ok("leases.renew", "RenewLease to a short ttl", err)
	c.waitDead(x)
	if got := c.listed(l); slices.Contains(got, x.Epoch) || !slices.Contains(got, keep.Epoch) {
		c.Fatalf("leases.expiry", "%v after lease %d's ttl of %v (+%v): Leases lists %v; want the live lease %d, not the dead one", shortTTL, x.Epoch, shortTTL, expiryMargin, got, keep.Epoch)
	}
	_, err = l.RenewLease(c.ctx, x.Epoch, longTTL)
	c.wantErr("leases.expiry", "RenewLease of a lease past its ttl", err, driver.ErrFenced)
	// A dead lease fences nothing in: its commits are refused.
	th := c.thread(d, "lease-expiry")
	b := th.Batch([]string{"le-r1"}, []record.Run{th.Run("le-r1")}, []record.Message{th.Msg("le-r1-in", "le-r1")}, nil)
	b.Fence, b.Thread.Owner = x.Epoch, x.Epoch
	_, err = d.Commit(c.ctx, b)
	c.wantErr("leases.dead-fence", "a commit fenced by a dead lease", err, driver.ErrFenced)
	c.expectUntouched("leases.dead-fence", d, th.ID, 0, 0, []string{"le-r1"}, nil)
}

// fenced returns th's next batch (a new run and its input), fenced by
// fence and owned by owner.
func fenced(th *thread, run string, fence, owner int64) driver.Batch {
	b := th.Batch(append(slices.Clone(th.Open), run), []record.Run{th.Run(run)}, []record.Message{th.Msg(run+"-in", run)}, nil)
	b.Fence, b.Thread.Owner = fence, owner
	return b
}

// refused commits b, which must fail with want and write nothing.
func (c *C) refused(rule, what string, d driver.Driver, th *thread, b driver.Batch, want error) {
	before := len(c.allHistory(rule, d, th.ID, 1000))
	_, err := d.Commit(c.ctx, b)
	if err == nil {
		c.Fatalf(rule, "%s was accepted, want %v", what, want)
	}
	c.wantErr(rule, what, err, want)
	c.expectUntouched(rule, d, th.ID, th.Version, before, ids(b.Runs), nil)
}

// owner fails rule unless th's stored owner is want.
func (c *C) owner(rule string, d driver.Driver, th *thread, want int64) {
	snap, err := d.LoadThread(c.ctx, th.ID)
	c.ok(rule, "LoadThread", err)
	if snap.Thread.Owner != want {
		c.Fatalf(rule, "thread %s is owned by %d, want %d", th.ID, snap.Thread.Owner, want)
	}
}

// forked returns a builder of th's next batch that leaves th as it is.
func forked(th *thread) *thread {
	f := *th
	f.Builder = th.Fork()
	return &f
}

func testFence(c *C) {
	d, _ := c.start()
	l := c.leaser(d)
	a := c.acquire(l, "host-a", longTTL)
	b := c.acquire(l, "host-b", longTTL)
	th := c.thread(d, "fence")

	// A live lease takes an unowned thread.
	th.commit("leases.fence-sets-owner", fenced(th, "f-r1", a.Epoch, a.Epoch))
	c.owner("leases.fence-sets-owner", d, th, a.Epoch)

	// Another live lease is refused, and writes nothing.
	c.refused("leases.fence-foreign-owner", "a commit fenced by another live lease on an owned thread", d, th,
		fenced(forked(th), "f-x1", b.Epoch, b.Epoch), driver.ErrFenced)
	// The version check comes first.
	stale := forked(th)
	stale.Version = 0
	c.refused("leases.conflict-first", "a stale commit fenced by another live lease", d, th,
		fenced(stale, "f-x2", b.Epoch, b.Epoch), driver.ErrVersionConflict)
	stale = forked(th)
	stale.Version = 0
	c.refused("leases.conflict-first", "a stale unfenced commit changing the owner", d, th,
		fenced(stale, "f-x3", 0, b.Epoch), driver.ErrVersionConflict)

	// Unfenced commits leave the owner as stored.
	th.commit("leases.unfenced-keeps-owner", fenced(th, "f-r2", 0, a.Epoch))
	c.owner("leases.unfenced-keeps-owner", d, th, a.Epoch)
	c.refused("leases.unfenced-owner-change", "an unfenced commit changing the owner", d, th,
		fenced(forked(th), "f-x4", 0, b.Epoch), driver.ErrFenced)
	c.refused("leases.unfenced-owner-change", "an unfenced commit clearing the owner", d, th,
		fenced(forked(th), "f-x5", 0, 0), driver.ErrFenced)

	// A fenced batch names its fence as the owner.
	c.refused("leases.fence-owner-mismatch", "a batch fenced by one lease naming another as owner", d, th,
		fenced(forked(th), "f-x6", a.Epoch, b.Epoch), driver.ErrInvalidArgument)

	// The owner goes on.
	th.commit("leases.fence-owner", fenced(th, "f-r3", a.Epoch, a.Epoch))

	// The owner gives the thread up: another live lease takes it at once,
	// and the former owner may take it back only the same way.
	th.commit("leases.fence-gives-up", fenced(th, "f-g1", a.Epoch, 0))
	c.owner("leases.fence-gives-up", d, th, 0)
	th.commit("leases.fence-gives-up", fenced(th, "f-g2", b.Epoch, b.Epoch))
	c.owner("leases.fence-gives-up", d, th, b.Epoch)
	c.refused("leases.fence-gives-up", "a commit fenced by the owner that gave the thread up", d, th,
		fenced(forked(th), "f-x9", a.Epoch, a.Epoch), driver.ErrFenced)
	c.refused("leases.fence-gives-up", "a lease giving up a thread another live lease owns", d, th,
		fenced(forked(th), "f-x10", a.Epoch, 0), driver.ErrFenced)
	th.commit("leases.fence-gives-up", fenced(th, "f-g3", b.Epoch, 0))
	th.commit("leases.fence-gives-up", fenced(th, "f-g4", a.Epoch, a.Epoch))
	c.owner("leases.fence-gives-up", d, th, a.Epoch)

	// A released owner lets another lease take over at once; its own
	// commits are refused from then on, even at the current version.
	c.ok("leases.release", "ReleaseLease", l.ReleaseLease(c.ctx, a.Epoch))
	c.refused("leases.stale-owner", "a commit fenced by the released owner", d, th,
		fenced(forked(th), "f-x7", a.Epoch, a.Epoch), driver.ErrFenced)
	th.commit("leases.takeover-after-release", fenced(th, "f-r4", b.Epoch, b.Epoch))
	c.owner("leases.takeover-after-release", d, th, b.Epoch)
	c.refused("leases.stale-owner", "a commit fenced by the former owner", d, th,
		fenced(forked(th), "f-x8", a.Epoch, a.Epoch), driver.ErrFenced)

	// A thread first written fenced by a foreign lease is owned by it.
	th2 := c.thread(d, "fence-2")
	th2.commit("leases.fence-sets-owner", fenced(th2, "f2-r1", 0, 0))
	c.owner("leases.fence-sets-owner", d, th2, 0)
	th2.commit("leases.fence-sets-owner", fenced(th2, "f2-r2", b.Epoch, b.Epoch))
	c.owner("leases.fence-sets-owner", d, th2, b.Epoch)
}

func testTakeover(c *C) {
	d, _ := c.start()
	l := c.leaser(d)
	a := c.acquire(l, "host-a", longTTL)
	th := c.thread(d, "takeover")
	th.commit("leases.fence-sets-owner", fenced(th, "t-r1", a.Epoch, a.Epoch))
	b := c.acquire(l, "host-b", longTTL)
	c.refused("leases.fence-foreign-owner", "a commit fenced by another live lease on an owned thread", d, th,
		fenced(forked(th), "t-x1", b.Epoch, b.Epoch), driver.ErrFenced)

	// The owner stops renewing: its lease dies.
	a, err := l.RenewLease(c.ctx, a.Epoch, shortTTL)
	c.ok("leases.renew", "RenewLease to a short ttl", err)
	c.waitDead(a)
	th.commit("leases.takeover-after-expiry", fenced(th, "t-r2", b.Epoch, b.Epoch))
	c.owner("leases.takeover-after-expiry", d, th, b.Epoch)

	// The stale owner wakes: fenced, however current its version.
	c.refused("leases.stale-owner", "a commit fenced by the owner whose lease expired", d, th,
		fenced(forked(th), "t-x2", a.Epoch, a.Epoch), driver.ErrFenced)
	_, err = l.RenewLease(c.ctx, a.Epoch, longTTL)
	c.wantErr("leases.expiry", "RenewLease of the expired owner's lease", err, driver.ErrFenced)
	th.commit("leases.unfenced-keeps-owner", fenced(th, "t-r3", 0, b.Epoch))
}

// watch watches l until the case ends.
func (c *C) watch(rule string, l driver.Leaser) (<-chan driver.Notice, context.CancelFunc) {
	ctx, cancel := context.WithCancel(c.ctx)
	ch, err := l.Watch(ctx)
	if err != nil {
		cancel()
		c.Fatalf(rule, "Watch: %v", err)
	}
	c.closers = append(c.closers, cancel)
	return ch, cancel
}

// receive waits for notice want on ch, skipping others.
func (c *C) receive(rule string, ch <-chan driver.Notice, want driver.Notice) {
	c.await(rule, ch, fmt.Sprintf("%+v", want), func(n driver.Notice) bool {
		return reflect.DeepEqual(n, want) || (len(n.Settled) == 0 && len(want.Settled) == 0 && n.ThreadID == want.ThreadID &&
			n.Owner == want.Owner && n.InterruptRunID == want.InterruptRunID && n.RunID == want.RunID && n.ReplyTo == want.ReplyTo)
	})
}

// await returns the first notice on ch that match accepts, skipping
// others; what names the notice awaited in failures.
func (c *C) await(rule string, ch <-chan driver.Notice, what string, match func(driver.Notice) bool) driver.Notice {
	t := time.NewTimer(noticeWait)
	defer t.Stop()
	for {
		select {
		case n, ok := <-ch:
			if !ok {
				c.Fatalf(rule, "the watch ended before notice %s came", what)
			}
			if match(n) {
				return n
			}
		case <-t.C:
			c.Fatalf(rule, "notice %s, sent after Watch returned, did not come within %v", what, noticeWait)
		}
	}
}

func testNotices(c *C) {
	d, _ := c.start()
	l := c.leaser(d)
	ch, cancel := c.watch("leases.notify", l)
	for _, n := range []driver.Notice{
		{ThreadID: "n-1"},
		{ThreadID: "n-2", Owner: 7, InterruptRunID: "run-9"},
		{ThreadID: "n-3", RunID: "run-3", ReplyTo: 4, Settled: []string{"run-1", "run-2"}},
	} {
		c.ok("leases.notify", "Notify", l.Notify(c.ctx, n))
		c.receive("leases.notify", ch, n)
	}
	err := l.Notify(c.ctx, driver.Notice{})
	c.wantErr("leases.notify", "a notice without a thread", err, driver.ErrInvalidArgument)
	// A notice's records arrive intact, or (too large for the driver's
	// channel) not at all, with the rest of the notice.
	small, large := recordsNotice("n-4", 200), recordsNotice("n-5", 64<<10)
	for _, n := range []driver.Notice{small, large} {
		c.ok("leases.notice-records", "Notify with records", l.Notify(c.ctx, n))
		c.receiveRecords("leases.notice-records", ch, n)
	}
	cancel()
	t := time.NewTimer(noticeWait)
	defer t.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-t.C:
			c.Fatalf("leases.watch-ends", "the watch channel is still open %v after its context ended", noticeWait)
		}
	}
}

// second starts another instance on dir, closed with the case.
func (c *C) second(dir string) Instance {
	in, err := c.s.target.Start(c.ctx, dir, nil)
	if err != nil {
		c.Fatalf("shared.same-data", "a second instance on the same data does not start: %v", err)
	}
	c.closers = append(c.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Close(ctx)
	})
	return in
}

// testSharedLeases: leases and fences hold across driver processes on one
// data set, as across hosts on one database.
func testSharedLeases(c *C) {
	if !c.s.info.Leases {
		c.Logf("the driver has no leases: nothing to fence by")
		return
	}
	d1, dir := c.start()
	d2 := c.second(dir)
	l1, l2 := c.leaser(d1), c.leaser(d2)
	a := c.acquire(l1, "host-1", longTTL)
	b := c.acquire(l2, "host-2", longTTL)
	if a.Epoch == b.Epoch {
		c.Fatalf("shared.epochs", "two instances gave the same epoch %d", a.Epoch)
	}
	if got := c.listed(l2); !slices.Contains(got, a.Epoch) || !slices.Contains(got, b.Epoch) {
		c.Fatalf("shared.leases", "the second instance lists %v, want both leases %d and %d", got, a.Epoch, b.Epoch)
	}
	th := c.thread(d1, "shared-fence")
	th.commit("shared.fence", fenced(th, "sf-r1", a.Epoch, a.Epoch))
	on2 := *th // the same builder, committing through the second instance
	on2.d = d2
	c.refused("shared.fence", "a commit through the second instance fenced by its live lease on a thread the first's owns", d2, &on2,
		fenced(forked(&on2), "sf-x1", b.Epoch, b.Epoch), driver.ErrFenced)
	// Host 1 stops renewing; host 2 takes over; host 1's commits are
	// refused from then on.
	a, err := l1.RenewLease(c.ctx, a.Epoch, shortTTL)
	c.ok("leases.renew", "RenewLease to a short ttl", err)
	c.waitDead(a)
	if got := c.listed(l2); slices.Contains(got, a.Epoch) {
		c.Fatalf("shared.leases", "the second instance still lists the expired lease %d: %v", a.Epoch, got)
	}
	on2.commit("shared.takeover", fenced(&on2, "sf-r2", b.Epoch, b.Epoch))
	c.owner("shared.takeover", d1, th, b.Epoch)
	c.refused("shared.stale-owner", "a commit through the first instance fenced by its expired lease", d1, th,
		fenced(forked(th), "sf-x2", a.Epoch, a.Epoch), driver.ErrFenced)
	_, err = l1.RenewLease(c.ctx, a.Epoch, longTTL)
	c.wantErr("shared.stale-owner", "RenewLease of the expired lease", err, driver.ErrFenced)
}

// testSharedNotices: a notice sent through one instance reaches a watcher
// on another instance of the same data.
func testSharedNotices(c *C) {
	if !c.s.info.Leases {
		c.Logf("the driver has no leases: no notices")
		return
	}
	d1, dir := c.start()
	d2 := c.second(dir)
	ch, _ := c.watch("shared.notify", c.leaser(d1))
	n := driver.Notice{ThreadID: "across", Owner: 3, InterruptRunID: "run-x"}
	c.ok("shared.notify", "Notify", c.leaser(d2).Notify(c.ctx, n))
	c.receive("shared.notify", ch, n)
	r := recordsNotice("across-records", 200)
	c.ok("shared.notify", "Notify with records", c.leaser(d2).Notify(c.ctx, r))
	c.receiveRecords("shared.notify", ch, r)
}

// recordsNotice is a notice to every host with records (driver.Notice): a
// thread header, its open run, and a message of size bytes.
func recordsNotice(thread string, size int) driver.Notice {
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	run := record.Run{ID: thread + "-run", ThreadID: thread, Seq: 1, State: record.StateQueued, InputMessageIDs: []string{thread + "-msg"},
		AssistantMessageID: thread + "-ans", Attempt: 1, CreatedAt: at}
	msg := record.Message{ID: thread + "-msg", ThreadID: thread, RunID: run.ID, Seq: 1, Role: record.RoleUser,
		Content: strings.Repeat("x", size), Hint: "refine", Metadata: map[string]string{"k": "v"}, CreatedAt: at}
	return driver.Notice{ThreadID: thread, Wake: 5, RunID: run.ID, ReplyTo: 6,
		Thread: record.Thread{ID: thread, Version: 1, NextRunSeq: 2, NextMessageSeq: 2, OpenRunIDs: []string{run.ID}, LastCommitID: "c-1", UpdatedAt: at},
		Runs:   []record.Run{run}, Messages: []record.Message{msg}}
}

// receiveRecords waits for notice want on ch (by its thread), and checks
// that its fields came intact, its records either intact or all left out.
func (c *C) receiveRecords(rule string, ch <-chan driver.Notice, want driver.Notice) {
	n := c.await(rule, ch, want.ThreadID, func(n driver.Notice) bool { return n.ThreadID == want.ThreadID })
	if n.Owner != want.Owner || n.Wake != want.Wake || n.RunID != want.RunID || n.ReplyTo != want.ReplyTo ||
		n.InterruptRunID != want.InterruptRunID || len(n.Settled) != len(want.Settled) {
		c.Fatalf(rule, "notice %s came as %+v, want its fields as sent", want.ThreadID, n)
	}
	if n.Thread.ID == "" && len(n.Runs) == 0 && len(n.Messages) == 0 {
		return // left out: allowed
	}
	if !sameThread(n.Thread, want.Thread) || len(n.Runs) != len(want.Runs) || len(n.Messages) != len(want.Messages) ||
		!sameRun(n.Runs[0], want.Runs[0]) || !sameMessage(n.Messages[0], want.Messages[0]) {
		c.Fatalf(rule, "notice %s came with records %+v %+v %+v, want them as sent or not at all", want.ThreadID, n.Thread, n.Runs, n.Messages)
	}
}

func sameThread(a, b record.Thread) bool {
	return reflect.DeepEqual(record.NormalizeThread(a), record.NormalizeThread(b))
}

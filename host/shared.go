package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/store"
)

// Several hosts on one store (docs/scale-out.md).
//
// When the driver has leases (driver.Leaser, Info.Leases), the runtime holds
// a lease and executes under it: the owner of its runs is the lease's epoch,
// and every commit that starts, ends or recovers a run is fenced by it, so
// a host whose lease died — however long it paused — has those commits
// refused by the store. A thread is owned by the lease that last started or
// recovered a run on it; while that lease lives, only its host executes the
// thread's runs. Other hosts admit inputs to it durably and send its owner
// a notice; every host also polls, so a lost notice only delays a run.
// When a lease dies (its host crashed, or paused past the expiry), the
// first host to poll recovers its active runs and takes over its threads.

// leaseOwnerPrefix starts the owner name of a run executed under a lease.
const leaseOwnerPrefix = "lease-"

func leaseOwner(epoch int64) string { return leaseOwnerPrefix + strconv.FormatInt(epoch, 10) }

// leaseEpoch returns the lease epoch of an owner name, 0 for a name that
// is not a lease's (a host epoch from a single-host run).
func leaseEpoch(owner string) int64 {
	s, ok := strings.CutPrefix(owner, leaseOwnerPrefix)
	if !ok {
		return 0
	}
	e, err := strconv.ParseInt(s, 10, 64)
	if err != nil || e <= 0 {
		return 0
	}
	return e
}

// shared is the several-hosts machinery of a runtime.
type shared struct {
	l      driver.Leaser
	ttl    time.Duration
	poll   time.Duration
	holder string

	epoch atomic.Int64 // the lease this runtime executes under

	mu   sync.Mutex
	live map[int64]bool // other live leases, as of the last refresh
	// replyTo: runs of this host's threads admitted on other hosts that
	// wait for them, by run id → those hosts' epochs.
	replyTo map[string][]int64
}

func newShared(l driver.Leaser, cfg Config) *shared {
	holder := cfg.HostName
	if holder == "" {
		h, _ := os.Hostname()
		holder = fmt.Sprintf("%s/%d", h, os.Getpid())
	}
	return &shared{l: l, ttl: cfg.LeaseTTL, poll: cfg.PollInterval, holder: holder, live: map[int64]bool{}, replyTo: map[string][]int64{}}
}

// isLive reports whether epoch's lease was live at the last refresh; this
// runtime's own lease always is.
func (sh *shared) isLive(epoch int64) bool {
	if epoch == 0 {
		return false
	}
	if epoch == sh.epoch.Load() {
		return true
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.live[epoch]
}

// refresh reads the live leases.
func (sh *shared) refresh(ctx context.Context) error {
	ls, err := sh.l.Leases(ctx)
	if err != nil {
		return err
	}
	live := make(map[int64]bool, len(ls))
	for _, x := range ls {
		live[x.Epoch] = true
	}
	sh.mu.Lock()
	sh.live = live
	sh.mu.Unlock()
	return nil
}

// acquire takes a new lease, retrying until it succeeds or ctx is done.
func (sh *shared) acquire(ctx context.Context, log func(msg string, args ...any)) (driver.Lease, error) {
	backoff := 100 * time.Millisecond
	for {
		x, err := sh.l.AcquireLease(ctx, sh.holder, sh.ttl)
		if err == nil {
			sh.epoch.Store(x.Epoch)
			return x, nil
		}
		if !errors.Is(err, driver.ErrUnavailable) {
			return driver.Lease{}, fmt.Errorf("host: acquiring a lease: %w", err)
		}
		log("acquiring a lease failed; retrying", "err", err, "backoff", backoff)
		if !sleepCtx(ctx, backoff) {
			return driver.Lease{}, fmt.Errorf("host: acquiring a lease: %w", cmpErr(ctx.Err(), err))
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// startShared starts the heartbeat, the watch and the poll. The watch is in
// place when it returns, so a notice sent after New returns is delivered.
func (rt *Runtime) startShared() {
	ctx, cancel := context.WithCancel(context.Background())
	rt.stopShared = cancel
	ch, err := rt.sh.l.Watch(ctx)
	if err != nil {
		rt.log.Warn("watching the store for notices failed; polling meanwhile", "err", err)
	}
	watch := func(ctx context.Context) { rt.watch(ctx, ch) }
	for _, loop := range []func(context.Context){rt.heartbeat, watch, rt.pollLoop} {
		rt.bg.Add(1)
		go func() {
			defer rt.bg.Done()
			loop(ctx)
		}()
	}
}

// heartbeat renews the lease. A lease the store says is dead is lost for
// good: the runs executing under it are abandoned (their commits would be
// refused) and the runtime takes a new lease.
func (rt *Runtime) heartbeat(ctx context.Context) {
	sh := rt.sh
	t := time.NewTicker(sh.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		epoch := sh.epoch.Load()
		_, err := sh.l.RenewLease(ctx, epoch, sh.ttl)
		switch {
		case err == nil:
			rt.stats.leaseRenewals.Add(1)
			continue
		case ctx.Err() != nil:
			return
		case !errors.Is(err, driver.ErrFenced):
			rt.log.Warn("renewing the lease failed; retrying", "epoch", epoch, "err", err)
			continue
		}
		rt.stats.leasesLost.Add(1)
		rt.log.Error("the lease was lost (this host paused or could not renew it in time); abandoning its runs and taking a new lease", "epoch", epoch, "err", err)
		rt.abandonOwner(leaseOwner(epoch))
		x, err := sh.acquire(ctx, rt.log.Warn)
		if err != nil {
			if ctx.Err() == nil {
				rt.log.Error("taking a new lease failed; this host executes nothing until it is restarted", "err", err)
			}
			return
		}
		rt.log.Info("took a new lease", "epoch", x.Epoch, "expires", x.Expires)
		rt.pollNow()
	}
}

// abandonOwner abandons the runs this process executes under owner.
func (rt *Runtime) abandonOwner(owner string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, ex := range rt.running {
		ex.abandonIf(owner)
	}
}

// watch delivers the store's notices: a thread this host owns has work, or
// one of its runs is asked to stop.
func (rt *Runtime) watch(ctx context.Context, ch <-chan driver.Notice) {
	for ctx.Err() == nil {
		if ch == nil {
			var err error
			ch, err = rt.sh.l.Watch(ctx)
			if err != nil {
				if ctx.Err() == nil {
					rt.log.Warn("watching the store for notices failed; polling meanwhile", "err", err)
					sleepCtx(ctx, time.Second)
				}
				continue
			}
			rt.pollNow() // what was sent while no watch was in place
		}
		for n := range ch {
			if n.ThreadID == "" || (n.Owner != 0 && n.Owner != rt.sh.epoch.Load()) {
				continue
			}
			rt.stats.noticesReceived.Add(1)
			if len(n.Settled) > 0 {
				rt.settled(n.Settled...) // its waiters read the store again
				continue
			}
			if n.RunID != "" && n.ReplyTo != 0 {
				rt.sh.mu.Lock()
				rt.sh.replyTo[n.RunID] = append(rt.sh.replyTo[n.RunID], n.ReplyTo)
				rt.sh.mu.Unlock()
				if rt.st.KnownSettled(n.RunID) {
					// It ran (found by the poll) before this notice came.
					rt.replySettled(n.ThreadID, n.RunID)
				}
			}
			if n.InterruptRunID != "" {
				rt.interrupt(n.ThreadID, n.InterruptRunID)
			}
			rt.kick(n.ThreadID)
		}
		ch = nil
	}
}

// notify sends a notice. It is a hint: a failure is logged, and the
// receiver finds the work (or the result) by polling.
func (rt *Runtime) notify(n driver.Notice) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rt.sh.l.Notify(ctx, n); err != nil {
		rt.log.Warn("sending a notice to another host failed; it will poll", "thread", n.ThreadID, "to", n.Owner, "err", err)
		return
	}
	rt.stats.noticesSent.Add(1)
}

// wakeOwner wakes the owner of a thread for a run admitted here, and asks
// to be told when the run settles.
func (rt *Runtime) wakeOwner(threadID string, owner int64, runID, interruptRunID string) {
	rt.notify(driver.Notice{ThreadID: threadID, Owner: owner, InterruptRunID: interruptRunID, RunID: runID, ReplyTo: rt.sh.epoch.Load()})
}

// replySettled tells the hosts that admitted runs of this host's threads
// that they settled.
func (rt *Runtime) replySettled(threadID string, runIDs ...string) {
	if rt.sh == nil {
		return
	}
	to := map[int64][]string{}
	rt.sh.mu.Lock()
	for _, id := range runIDs {
		for _, e := range rt.sh.replyTo[id] {
			to[e] = append(to[e], id)
		}
		delete(rt.sh.replyTo, id)
	}
	rt.sh.mu.Unlock()
	for e, ids := range to {
		rt.notify(driver.Notice{ThreadID: threadID, Owner: e, Settled: ids})
	}
}

// pollNow asks the poll loop for a pass at once.
func (rt *Runtime) pollNow() {
	select {
	case rt.pollCh <- struct{}{}:
	default:
	}
}

// pollLoop refreshes the live leases and looks for work the notices did
// not bring: runs of dead leases to recover, threads with queued runs and
// no live owner to execute.
func (rt *Runtime) pollLoop(ctx context.Context) {
	t := time.NewTicker(rt.sh.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-rt.pollCh:
		}
		if err := rt.sh.refresh(ctx); err != nil {
			if ctx.Err() == nil {
				rt.log.Warn("reading the live leases failed", "err", err)
			}
			continue
		}
		if err := rt.scan(ctx); err != nil && ctx.Err() == nil {
			rt.log.Warn("polling for work failed", "err", err)
		}
	}
}

// ownsOrMayTake reports whether this host should try to execute the
// thread: it owns it, its owner's lease is dead, or nobody owns it and its
// oldest open run has waited a poll interval (a younger one was just
// admitted, and the host that admitted it starts it: taking it here would
// only make that host's later inputs travel).
func (rt *Runtime) ownsOrMayTake(ctx context.Context, threadID string) bool {
	snap, err := rt.st.Thread(ctx, threadID)
	if err != nil {
		return true // let the start find out
	}
	switch o := snap.Thread.Owner; {
	case o == rt.sh.epoch.Load():
		return true
	case o != 0:
		return !rt.sh.isLive(o)
	}
	return len(snap.Runs) > 0 && rt.cfg.Now().Sub(snap.Runs[0].CreatedAt) >= rt.sh.poll
}

// fencedStart handles a start the fence refused: the thread has another
// live owner, which is told.
func (rt *Runtime) fencedStart(threadID string, fe *store.FencedError) {
	if rt.sh == nil {
		return
	}
	if fe.Owner != 0 && fe.Owner != rt.sh.epoch.Load() {
		rt.notify(driver.Notice{ThreadID: threadID, Owner: fe.Owner})
	}
}

// ownerLive is the store layer's view of other leases.
func (rt *Runtime) ownerLive(epoch int64) bool { return rt.sh.isLive(epoch) }

// releaseLease ends the lease at Close, so that other hosts take over this
// host's threads at once.
func (rt *Runtime) releaseLease() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.sh.l.ReleaseLease(ctx, rt.sh.epoch.Load()); err != nil {
		return fmt.Errorf("host: releasing the lease: %w", err)
	}
	return nil
}

// threadOwnedHere reports, for the close report, whether a run's thread is
// owned by this host's lease (or would be recovered by nobody else).
func (rt *Runtime) threadOwnedHere(ctx context.Context, r record.Run) bool {
	if rt.sh == nil {
		return true
	}
	snap, err := rt.st.Thread(ctx, r.ThreadID)
	return err != nil || snap.Thread.Owner == rt.sh.epoch.Load() || snap.Thread.Owner == 0
}

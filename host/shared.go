package host

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/store"
)

// Several hosts on one store (docs/scale-out.md).
//
// Every commit that starts, ends or recovers a run is fenced by the lease
// it executes under (see lease.go), so a host whose lease died — however
// long it paused — has those commits refused by the store. A thread is
// owned by the lease that last started or recovered a run on it; while that
// lease lives, only its host executes the thread's runs. Other hosts admit
// inputs to it durably and send its owner a notice; every host also polls,
// so a lost notice only delays a run. When a lease dies (its host crashed,
// or paused past the expiry), the hosts recover its active runs and take
// over its threads, each those whose home it is (ADR 0143: a thread's home
// is one of the live leases, by rendezvous hashing); an owner gives up an
// idle thread whose home is another live host, so threads spread over the
// hosts that join or restart too.
//
// A host alone on its store (a lease table of its own) runs the same code:
// no thread has another live owner, so it never sends a notice, and no
// other host leaves it work, so it runs no loop to renew, watch or poll.

// startLoops starts the lease's upkeep, the watch and the poll, when the
// leases are the store's. The watch is in place when it returns, so a
// notice sent after New returns is delivered.
func (rt *Runtime) startLoops() {
	ctx, cancel := context.WithCancel(context.Background())
	rt.stopLoops = cancel
	if rt.lease.alone() {
		return // nothing expires, and no other host sends or leaves work
	}
	ch, err := rt.lease.l.Watch(ctx)
	if err != nil {
		rt.log.Warn("watching the store for notices failed; polling meanwhile", "err", err)
	}
	keep := func(ctx context.Context) { rt.lease.keep(ctx, rt.coord.abandonOwner, rt.pollNow) }
	watch := func(ctx context.Context) { rt.watch(ctx, ch) }
	for _, loop := range []func(context.Context){keep, watch, rt.pollLoop} {
		rt.loops.Add(1)
		go func() {
			defer rt.loops.Done()
			loop(ctx)
		}()
	}
}

// watch delivers the store's notices: a thread this host owns has work, or
// one of its runs is asked to stop, or runs this host waits for settled.
//
// What a notice carries beyond that (driver.Notice's records) only saves
// reads: the snapshot of a thread it is woken for serves its next start as
// its own last commit would (a stale one makes the commit conflict, and
// the start reads the thread), the terminal records and answers of settled
// runs answer their waiters. A notice without them, or with records that
// do not hold together, leaves the reads to be done; a lost notice leaves
// them to the poll.
func (rt *Runtime) watch(ctx context.Context, ch <-chan driver.Notice) {
	for ctx.Err() == nil {
		if ch == nil {
			var err error
			ch, err = rt.lease.l.Watch(ctx)
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
			me := rt.lease.epoch.Load()
			if n.ThreadID == "" || (n.Owner != 0 && n.Owner != me) || (n.Owner == 0 && n.Wake != 0 && n.ReplyTo == me) {
				continue // for another host, or this host's own announcement
			}
			rt.stats.noticesReceived.Add(1)
			if len(n.Settled) > 0 {
				rt.stats.noticeRecords.Add(int64(rt.st.LearnSettled(n.ThreadID, n.Settled, n.Runs, n.Messages)))
				if n.Thread.ID == n.ThreadID && rt.st.LearnOpen(n.Thread, n.Runs) {
					rt.stats.noticeRecords.Add(1) // the next admission here commits without reading
				}
				rt.settled(n.Settled...) // its waiters answer from the records, or read the store
				continue
			}
			if n.Owner == 0 && n.Wake != 0 && n.Wake != me {
				// Work for another host, announced to every host: the
				// run's end will be told to every host too.
				if n.RunID != "" {
					rt.tickets.announce(n.RunID)
				}
				continue
			}
			if n.Thread.ID == n.ThreadID && rt.st.Learn(driver.ThreadSnapshot{Thread: n.Thread, Runs: n.Runs}, n.Messages) {
				rt.stats.noticeRecords.Add(1)
			}
			if n.RunID != "" && n.ReplyTo != 0 {
				// This host will execute the run and settle it here: a
				// wait for it here need not read it first.
				rt.tickets.announce(n.RunID)
				to := n.ReplyTo
				if n.Owner == 0 {
					to = 0 // announced to every host: tell every host
				}
				rt.tickets.replyWanted(n.RunID, to)
				if rt.st.KnownSettled(n.RunID) {
					// It ran (found by the poll, or before a wait on
					// another host asked) before this notice came.
					rt.replySettled(n.ThreadID, n.RunID)
					continue
				}
				if _, executing := rt.coord.steps(n.ThreadID, n.RunID); executing && n.InterruptRunID == "" {
					continue // a wait elsewhere asks to be told; nothing to start
				}
			}
			if n.InterruptRunID != "" {
				rt.coord.interrupt(n.ThreadID, n.InterruptRunID)
			}
			rt.coord.kick(n.ThreadID)
		}
		ch = nil
	}
}

// notify sends a notice. It is a hint: a failure is logged, and the
// receiver finds the work (or the result) by polling. It reports whether
// the notice was sent.
func (rt *Runtime) notify(n driver.Notice) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rt.lease.l.Notify(ctx, n); err != nil {
		to := n.Owner
		if to == 0 {
			to = n.Wake
		}
		rt.log.Warn("sending a notice to another host failed; it will poll", "thread", n.ThreadID, "to", to, "err", err)
		return false
	}
	rt.stats.noticesSent.Add(1)
	return true
}

// maxNoticeContent bounds what a notice's records may carry of messages'
// contents (answers, an admitted input): past it they are left out, and
// read by the host that needs them. A driver with a smaller limit leaves
// them out itself (pgstore: a NOTIFY payload is at most 8000 bytes).
const maxNoticeContent = 6 << 10

// maxNoticeRuns bounds the open runs an admission's notice carries with
// its thread's snapshot.
const maxNoticeRuns = 16

// wakeNotice is the notice of an admission on this host to the host whose
// work it is (to: the thread's live owner, or its home). With more hosts
// than these two it is announced to every host (Owner 0, Wake to): hosts
// where the run will be waited for learn that its end will be told to
// every host, and need not ask. It carries the thread as the admission's
// commit left it and the input, so that the host woken starts the run
// without reading them.
func (rt *Runtime) wakeNotice(threadID string, to int64, adm store.Admission) driver.Notice {
	n := driver.Notice{ThreadID: threadID, Owner: to, InterruptRunID: adm.InterruptRunID, RunID: adm.RunID, ReplyTo: rt.lease.epoch.Load()}
	if rt.lease.others() > 1 {
		n.Owner, n.Wake = 0, to
	}
	if c := adm.Committed; c != nil && len(c.Runs) <= maxNoticeRuns && contentSize(adm.Appended) <= maxNoticeContent {
		n.Thread, n.Runs, n.Messages = c.Thread, c.Runs, adm.Appended
	}
	return n
}

// contentSize is what messages hold of text.
func contentSize(msgs []record.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content) + len(m.Hint)
		for k, v := range m.Metadata {
			n += len(k) + len(v)
		}
		for _, c := range m.ToolCalls {
			n += len(c.ID) + len(c.Name) + len(c.Arguments)
		}
	}
	return n
}

// settled wakes this process's waiters of the runs.
func (rt *Runtime) settled(runIDs ...string) { rt.tickets.settled(runIDs...) }

// replySettled tells the hosts that admitted runs of this host's threads,
// or wait for them, that they settled: with their terminal records and
// answers, when small, so that those hosts need not read them; and with
// the thread as this host last committed it (header and open runs), so
// that the next admission there commits without reading the thread.
func (rt *Runtime) replySettled(threadID string, runIDs ...string) {
	for e, ids := range rt.tickets.takeReplies(runIDs) {
		n := driver.Notice{ThreadID: threadID, Owner: e, Settled: ids}
		n.Runs, n.Messages = rt.st.SettledRecords(threadID, ids, maxNoticeContent)
		if contentSize(n.Messages) <= maxNoticeContent/2 {
			// Within what a driver's notice holds (pgstore: 8000 bytes
			// in all), else it would leave out the answers with it.
			if ts, ok := rt.st.Snapshot(threadID); ok && len(ts.Runs) <= maxNoticeRuns {
				n.Thread = ts.Thread
				n.Runs = append(n.Runs, ts.Runs...)
			}
		}
		rt.notify(n)
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
// no live owner to execute, runs of its own whose last call was answered
// and that nothing executes (kickStranded).
func (rt *Runtime) pollLoop(ctx context.Context) {
	t := time.NewTicker(rt.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-rt.pollCh:
		}
		if err := rt.lease.refresh(ctx); err != nil {
			if ctx.Err() == nil {
				rt.log.Warn("reading the live leases failed", "err", err)
			}
			continue
		}
		if err := rt.scan(ctx); err != nil && ctx.Err() == nil {
			rt.log.Warn("polling for work failed", "err", err)
		}
		rt.kickStranded(ctx)
	}
}

// ownsOrMayTake reports whether this host should try to execute the
// thread: it owns it, or may take it (mayTake).
func (rt *Runtime) ownsOrMayTake(ctx context.Context, threadID string) bool {
	if rt.lease.alone() {
		return true
	}
	snap, err := rt.st.Thread(ctx, threadID)
	if err != nil {
		return true // let the start find out
	}
	o := snap.Thread.Owner
	if o == rt.lease.epoch.Load() {
		return true
	}
	return !(o != 0 && rt.lease.isLive(o)) && rt.mayTake(threadID, o, snap.Runs)
}

// mayTake reports whether this host may take a thread that no other live
// lease owns (ADR 0143): owner is its stored owner, 0 or a dead lease, and
// open its open runs. The thread's home takes it at once. Another host
// steps in only when the home does not: the owner's lease was found dead
// two poll intervals ago (the home's own poll has had its turn), or, for a
// thread nobody owns, its oldest open run has waited a poll interval (the
// host that admitted it told the home, or started it when it is the home).
func (rt *Runtime) mayTake(threadID string, owner int64, open []record.Run) bool {
	me := rt.lease.epoch.Load()
	if rt.lease.alone() || owner == me || rt.lease.home(threadID) == me {
		return true
	}
	if owner != 0 {
		dead, _ := rt.lease.deadFor(owner)
		return dead >= 2*rt.cfg.PollInterval
	}
	return len(open) > 0 && rt.cfg.Now().Sub(open[0].CreatedAt) >= rt.cfg.PollInterval
}

// handBack gives up a thread this host owns but that belongs with another
// live host, once the thread is idle (ADR 0143): its next input is started
// by its home. A thread whose runs follow one another is given up between
// two of them, when the last ended and no other is queued.
func (rt *Runtime) handBack(threadID string) {
	g := &rt.noGiveUp
	if rt.lease.alone() || g.refused.Load() {
		return
	}
	me := rt.lease.epoch.Load()
	if h := rt.lease.home(threadID); h == me || !rt.lease.isLive(h) {
		return
	}
	if !g.answered.Load() {
		// Until the driver has taken or refused a give-up, one asks at a
		// time and the others skip (handing back is best effort: the
		// thread stays here until its next idle moment): a driver that
		// refuses is asked once, and no worker waits on another's call.
		if !g.mu.TryLock() {
			return
		}
		defer g.mu.Unlock()
		if g.refused.Load() {
			return
		}
	}
	ok, err := rt.st.GiveUp(rt.baseCtx, threadID, me)
	if ok || errors.Is(err, driver.ErrInvalidArgument) {
		// Only a committed give-up or a refusal is the driver's answer: a
		// give-up skipped (the thread busy or no longer ours), conflicting
		// or failing says nothing of whether it takes owner 0.
		g.answered.Store(true)
	}
	switch {
	case errors.Is(err, driver.ErrInvalidArgument):
		// A driver certified before a thread could have no owner refuses
		// every such commit: say so once, and stop asking.
		if g.refused.CompareAndSwap(false, true) {
			rt.log.Warn("the store driver refuses to give a thread up (owner 0); threads stay with the host that owns them, and this host stops handing them back", "thread", threadID, "err", err)
		}
	case err != nil:
		if rt.baseCtx.Err() == nil {
			rt.log.Warn("giving up a thread that belongs with another host failed; it stays here", "thread", threadID, "err", err)
		}
	case ok:
		rt.stats.handedBack.Add(1)
	}
}

// giveUpGate is what handBack knows of the driver's answers to GiveUp.
type giveUpGate struct {
	mu       sync.Mutex  // held by a GiveUp until answered is set
	answered atomic.Bool // the driver gave a thread up, or refused to
	refused  atomic.Bool // it refused: handBack stops
}

// fencedStart handles a start the fence refused: the thread has another
// live owner, which is told.
func (rt *Runtime) fencedStart(threadID string, fe *store.FencedError) {
	if fe.Owner != 0 && fe.Owner != rt.lease.epoch.Load() {
		rt.notify(driver.Notice{ThreadID: threadID, Owner: fe.Owner})
	}
}

// threadOwnedHere reports, for the close report, whether a run's thread is
// owned by this host's lease (or would be recovered by nobody else).
func (rt *Runtime) threadOwnedHere(ctx context.Context, r record.Run) bool {
	if rt.lease.alone() {
		return true
	}
	snap, err := rt.st.Thread(ctx, r.ThreadID)
	return err != nil || snap.Thread.Owner == rt.lease.epoch.Load() || snap.Thread.Owner == 0
}

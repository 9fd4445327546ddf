package host

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/store"
)

// Ticket is what a submission returns: a handle on the run that will answer
// the input.
type Ticket struct {
	rt             *Runtime
	RunID          string
	ThreadID       string
	InputMessageID string
	// Duplicate: the idempotency key was seen before; this is the earlier
	// admission.
	Duplicate bool
}

// Result is what answered a run; see store.Result.
type Result = store.Result

// pollInterval bounds how long a waiter that will not be told may miss a
// change made by another process (or a wake-up it raced with). A waiter
// that will be told reads at the host's poll interval instead (ADR 0154).
const pollInterval = time.Second

// Wait blocks until the ticket's run settles, and returns what answered it:
// for an absorbed run, the answer of the run that absorbed it. It reads the
// durable record, so it works the same for a ticket from before a restart.
func (t *Ticket) Wait(ctx context.Context) (Result, error) {
	return t.rt.Wait(ctx, t.RunID)
}

// Wait blocks until run runID settles and returns its result.
//
// A run that another host executes, or will, settles there: unless this
// host admitted it (the owner was then asked to tell it) or heard it
// announced (its owner then tells every host), the wait asks that host by
// notice to tell this one when the run ends, once, so that it is woken then
// rather than at its next poll of the store. The notice that tells it
// carries the run's terminal record and answer when they are small, and
// the wait answers from them without reading the store.
//
// A wait that will be told (the run settles here, or its host was asked,
// or it admitted the run or heard it announced) reads the store only at
// the host's poll interval, in case the telling was lost; another reads it
// every second (ADR 0154).
//
// A wait still going when Close has let the runs in flight finish (or
// abandoned them) ends with ErrClosed: nothing this host executes will
// settle the run any more.
func (rt *Runtime) Wait(ctx context.Context, runID string) (Result, error) {
	if rt.baseCtx.Err() != nil {
		return Result{}, ErrClosed
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer context.AfterFunc(rt.baseCtx, func() { stop(ErrClosed) })()
	asked, told := rt.lease.alone(), false
	read := func(ctx context.Context, id string) (Result, error) {
		res, run, err := rt.st.ResultRun(ctx, id)
		if err == nil && !res.Settled && !asked && !rt.tickets.toldHere(id) {
			asked = true
			told = rt.askToBeTold(ctx, run)
		}
		return res, err
	}
	every := func(id string) time.Duration {
		if told || rt.tickets.toldHere(id) {
			return max(rt.cfg.PollInterval, pollInterval)
		}
		return pollInterval
	}
	res, err := rt.tickets.wait(ctx, runID, read, every)
	if err != nil && errors.Is(context.Cause(ctx), ErrClosed) {
		return res, ErrClosed
	}
	return res, speak(err)
}

// askToBeTold asks the host that executes the unsettled run, or will, to
// tell this one when it settles: the lease the active run executes under,
// or the queued run's thread's owner, or its home when no live lease owns
// it. Nothing is sent when that is this host. It reports whether this host
// will be told: asked, or the run settles here.
func (rt *Runtime) askToBeTold(ctx context.Context, run record.Run) bool {
	me := rt.lease.epoch.Load()
	to := leaseEpoch(run.Owner)
	if run.State != record.StateActive {
		to = 0
		if snap, err := rt.st.Thread(ctx, run.ThreadID); err == nil && rt.lease.isLive(snap.Thread.Owner) {
			to = snap.Thread.Owner
		}
		if to == 0 {
			to = rt.lease.home(run.ThreadID)
		}
	}
	switch {
	case to == me:
		return true
	case to == 0 || !rt.lease.isLive(to):
		return false
	case rt.tickets.toldHere(run.ID):
		return true // announced meanwhile: its end is told to every host
	}
	rt.stats.waitNotices.Add(1)
	return rt.notify(driver.Notice{ThreadID: run.ThreadID, Owner: to, RunID: run.ID, ReplyTo: me})
}

// Result returns a run's result now, settled or not.
func (rt *Runtime) Result(ctx context.Context, runID string) (Result, error) {
	res, err := rt.st.Result(ctx, runID)
	return res, speak(err)
}

// resolver answers the callers waiting for runs to settle: those of this
// process (wait), and other hosts that admitted runs of this host's threads
// and asked to be told (replyTo). It is told when runs settle (settled) and
// reads results through the function wait is given; it holds no record.
type resolver struct {
	mu      sync.Mutex
	waiters map[string][]chan struct{}
	pending map[string]bool // runs admitted here, not yet seen settled
	// replyTo: runs of this host's threads admitted on other hosts that
	// wait for them, by run id → those hosts' epochs (0: every host).
	replyTo map[string][]int64
	// announced: runs admitted on other hosts, not yet seen settled, that
	// this host heard of: for this host to execute, or for a third one and
	// announced to every host (their settling is told to every host too).
	announced map[string]bool
}

func newResolver() *resolver {
	return &resolver{waiters: map[string][]chan struct{}{}, pending: map[string]bool{}, replyTo: map[string][]int64{}, announced: map[string]bool{}}
}

// wait blocks until run runID settles, reading its result with read, then
// again every every(runID) unless told sooner.
func (r *resolver) wait(ctx context.Context, runID string, read func(context.Context, string) (Result, error), every func(string) time.Duration) (Result, error) {
	for first := true; ; first = false {
		// Register before reading, so a settle between the read and the
		// wait is not missed.
		ch, done := r.waitFor(runID)
		var res Result
		// A run this process admitted, or heard announced, and has not yet
		// seen settle is not read first: the settle (or the poll) wakes
		// the wait.
		if !first || !r.toldHere(runID) {
			var err error
			res, err = read(ctx, runID)
			if err != nil || res.Settled {
				done()
				return res, err
			}
		}
		timer := time.NewTimer(every(runID))
		select {
		case <-ch:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			done()
			return res, ctx.Err()
		}
		timer.Stop()
		done()
	}
}

// waitFor returns a channel closed when one of the runs settles in this
// process (or on the next poll, for changes made elsewhere).
func (r *resolver) waitFor(runIDs ...string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	for _, id := range runIDs {
		r.waiters[id] = append(r.waiters[id], ch)
	}
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, id := range runIDs {
			ws := r.waiters[id]
			for i, w := range ws {
				if w == ch {
					ws = append(ws[:i], ws[i+1:]...)
					break
				}
			}
			if len(ws) == 0 {
				delete(r.waiters, id)
			} else {
				r.waiters[id] = ws
			}
		}
	}
}

// maxPending bounds the runs remembered as admitted here and unsettled (an
// optimization of Wait: forgetting them costs one read each).
const maxPending = 1 << 16

// admitted remembers a run this process admitted, until it settles.
func (r *resolver) admitted(runID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) >= maxPending {
		clear(r.pending)
	}
	r.pending[runID] = true
}

// announce remembers a run admitted elsewhere that this host heard of
// (see Runtime.watch), until it settles.
func (r *resolver) announce(runID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.announced) >= maxPending {
		clear(r.announced)
	}
	r.announced[runID] = true
}

// toldHere reports whether this process will be told when the unsettled
// run settles, without asking: it admitted the run, or heard it announced.
func (r *resolver) toldHere(runID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending[runID] || r.announced[runID]
}

// settled wakes the waiters of the runs.
func (r *resolver) settled(runIDs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range runIDs {
		delete(r.pending, id)
		delete(r.announced, id)
		for _, ch := range r.waiters[id] {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
		delete(r.waiters, id)
	}
}

// replyWanted records that the host of epoch waits for run runID.
func (r *resolver) replyWanted(runID string, epoch int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.replyTo) >= maxPending {
		// Runs that moved to another host before they settled here: their
		// waiters poll.
		clear(r.replyTo)
	}
	if !slices.Contains(r.replyTo[runID], epoch) {
		r.replyTo[runID] = append(r.replyTo[runID], epoch)
	}
}

// takeReplies returns, by epoch, the settled runs that other hosts wait
// for, and forgets them. When more than one host is to be told (or every
// host, epoch 0), they are all told at once: the runs are under 0 alone.
func (r *resolver) takeReplies(runIDs []string) map[int64][]string {
	to := r.replies(runIDs)
	if len(to) < 2 {
		return to
	}
	var all []string
	for _, ids := range to {
		for _, id := range ids {
			if !slices.Contains(all, id) {
				all = append(all, id)
			}
		}
	}
	slices.Sort(all)
	return map[int64][]string{0: all}
}

func (r *resolver) replies(runIDs []string) map[int64][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var to map[int64][]string
	for _, id := range runIDs {
		for _, e := range r.replyTo[id] {
			if to == nil {
				to = map[int64][]string{}
			}
			to[e] = append(to[e], id)
		}
		delete(r.replyTo, id)
	}
	return to
}

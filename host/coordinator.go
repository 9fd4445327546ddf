package host

import (
	"errors"

	"github.com/agenthost/agenthost/abi/record"
	"time"

	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
)

// kick schedules a thread: a worker will start the head of its queue. A
// thread that is waiting already stays as it is; one that a worker holds is
// marked, and scheduled again when the worker lets go of it, since the
// worker may have looked at the queue before the input that caused this
// kick was committed.
func (rt *Runtime) kick(thread string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed || rt.queued[thread] {
		return
	}
	if rt.running[thread] != nil {
		rt.rekick[thread] = true
		return
	}
	rt.queued[thread] = true
	rt.queue = append(rt.queue, thread)
	rt.cond.Signal()
}

// idleWorker reports whether a worker is free to execute a run of the
// thread at once: none holds the thread, and fewer threads wait or run than
// there are workers. Only then does an admission start its run itself (a
// run started with no worker free would sit active, not executing).
func (rt *Runtime) idleWorker(thread string) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return !rt.closed && rt.running[thread] == nil && !rt.queued[thread] && len(rt.running)+len(rt.queue) < rt.cfg.MaxConcurrentRuns
}

// handOff gives a worker a run that its admission started.
func (rt *Runtime) handOff(run record.Run) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.started[run.ThreadID] = run
}

// takeStarted returns the run an admission started on the thread, if any.
func (rt *Runtime) takeStarted(thread string) (record.Run, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	r, ok := rt.started[thread]
	delete(rt.started, thread)
	return r, ok
}

// next blocks until a thread waits for a worker, and reserves it; false once
// the runtime closes.
func (rt *Runtime) next() (string, *runExec, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for len(rt.queue) == 0 && !rt.closed {
		rt.cond.Wait()
	}
	if rt.closed {
		return "", nil, false
	}
	thread := rt.queue[0]
	rt.queue[0] = ""
	rt.queue = rt.queue[1:]
	delete(rt.queued, thread)
	ex := &runExec{}
	rt.running[thread] = ex // reserved: no other worker takes the thread
	return thread, ex, true
}

func (rt *Runtime) worker() {
	defer rt.workers.Done()
	for {
		thread, ex, ok := rt.next()
		if !ok {
			return
		}
		again := rt.startAndExecute(thread, ex)
		rt.mu.Lock()
		delete(rt.running, thread)
		again = again || rt.rekick[thread]
		delete(rt.rekick, thread)
		rt.mu.Unlock()
		if again {
			rt.kick(thread)
		}
	}
}

// startAndExecute starts the head of the thread's queue and executes it. It
// reports whether the thread should be scheduled again.
func (rt *Runtime) startAndExecute(thread string, ex *runExec) bool {
	ctx := rt.baseCtx
	owner := rt.owner()
	run, handed := rt.takeStarted(thread)
	var err error
	if !handed {
		run, err = rt.st.Start(ctx, thread, owner)
	}
	var fe *store.FencedError
	switch {
	case errors.Is(err, runstate.ErrNothingQueued):
		return false
	case errors.As(err, &fe):
		rt.fencedStart(thread, fe)
		return false
	case errors.Is(err, runstate.ErrThreadActive):
		// A run is active. If this host owns it, it is a start whose reply
		// was lost (the commit landed): nobody executes it, since this
		// worker holds the thread, so execute it now. Another owner's run
		// is moved on by recovery (at the next start, or by its host).
		snap, lerr := rt.st.Thread(ctx, thread)
		if lerr != nil || len(snap.Runs) == 0 || snap.Runs[0].State != record.StateActive || snap.Runs[0].Owner != owner {
			return false
		}
		run = snap.Runs[0]
		rt.log.Warn("adopting a run whose start was committed without a reply", "run", run.ID, "thread", thread)
	case err != nil:
		if ctx.Err() == nil {
			rt.log.Error("starting a run failed; retrying the thread shortly", "thread", thread, "err", err)
			time.AfterFunc(time.Second, func() { rt.kick(thread) })
		}
		return false
	}
	if rt.reg != nil {
		rt.reg.forget(thread, run.ID) // it answers its own inputs now
	}
	rt.emit(run.ID, thread, EventStarted, map[string]string{"attempt": itoa(run.Attempt)})
	rt.mu.Lock()
	ex.init(rt.baseCtx, run)
	rt.mu.Unlock()
	rt.execute(ex)
	rt.mu.Lock()
	if r, ok := rt.started[thread]; ok && r.ID == run.ID {
		delete(rt.started, thread) // adopted before its admission handed it over
	}
	rt.mu.Unlock()
	// Go on with the thread's next run, unless its last commit showed no
	// other: an input admitted since then kicks the thread itself (here), or
	// sends this host a notice (elsewhere), and the poll finds the rest.
	return rt.st.MayHaveQueued(thread)
}

// interrupt asks the thread's executing run, if it is runID, to stop.
func (rt *Runtime) interrupt(thread, runID string) {
	rt.mu.Lock()
	ex := rt.running[thread]
	rt.mu.Unlock()
	if ex != nil {
		ex.interrupt(runID)
	}
}

// waitFor returns a channel closed when one of the runs settles in this
// process (or on the next poll, for changes made elsewhere).
func (rt *Runtime) waitFor(runIDs ...string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	rt.mu.Lock()
	for _, id := range runIDs {
		rt.waiters[id] = append(rt.waiters[id], ch)
	}
	rt.mu.Unlock()
	return ch, func() {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		for _, id := range runIDs {
			ws := rt.waiters[id]
			for i, w := range ws {
				if w == ch {
					ws = append(ws[:i], ws[i+1:]...)
					break
				}
			}
			if len(ws) == 0 {
				delete(rt.waiters, id)
			} else {
				rt.waiters[id] = ws
			}
		}
	}
}

// maxPending bounds the runs remembered as admitted here and unsettled (an
// optimization of Wait: forgetting them costs one read each).
const maxPending = 1 << 16

// admittedHere remembers a run this process admitted, until it settles.
func (rt *Runtime) admittedHere(runID string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.pending) >= maxPending {
		clear(rt.pending)
	}
	rt.pending[runID] = true
}

func (rt *Runtime) pendingHere(runID string) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.pending[runID]
}

// settled wakes the waiters of the runs.
func (rt *Runtime) settled(runIDs ...string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, id := range runIDs {
		delete(rt.pending, id)
		for _, ch := range rt.waiters[id] {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
		delete(rt.waiters, id)
	}
}

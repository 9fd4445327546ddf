package host

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
)

// coordinator schedules threads onto a fixed set of workers: a thread is
// held by at most one worker at a time, and threads wait in FIFO order. It
// knows nothing of the store: a worker calls the work function it is given
// for each thread it takes, and that function reports whether the thread
// should be scheduled again.
type coordinator struct {
	max int // workers

	mu      sync.Mutex
	cond    *sync.Cond
	closed  bool
	queue   []string            // threads waiting for a worker, FIFO
	queued  map[string]bool     // threads in queue
	running map[string]*runExec // thread → its executing run (reserved while it starts)
	rekick  map[string]bool     // threads kicked while a worker held them
	started map[string]record.Run
	// reserved: threads whose admission may start a run in its commit,
	// each holding a worker's slot until the run is handed off or the
	// admission ends without it (by reservation id).
	reserved map[string]uint64
	lastRes  uint64
	// stopWaiting: threads whose active run, if it is waiting (no
	// execution), is to be interrupted when a worker next takes the thread.
	stopWaiting map[string]string

	workers sync.WaitGroup
}

func newCoordinator(workers int) *coordinator {
	c := &coordinator{
		max:      workers,
		queued:   map[string]bool{},
		running:  map[string]*runExec{},
		rekick:   map[string]bool{},
		started:  map[string]record.Run{},
		reserved: map[string]uint64{},

		stopWaiting: map[string]string{},
	}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// start starts the workers; each executes work for the threads it takes.
func (c *coordinator) start(work func(thread string, ex *runExec) (again bool)) {
	for range c.max {
		c.workers.Add(1)
		go c.worker(work)
	}
}

// kick schedules a thread: a worker will start the head of its queue. A
// thread that is waiting already stays as it is; one that a worker holds is
// marked, and scheduled again when the worker lets go of it, since the
// worker may have looked at the queue before the input that caused this
// kick was committed.
func (c *coordinator) kick(thread string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kickLocked(thread)
}

func (c *coordinator) kickLocked(thread string) {
	if c.closed || c.queued[thread] {
		return
	}
	if c.running[thread] != nil {
		c.rekick[thread] = true
		return
	}
	c.queued[thread] = true
	c.queue = append(c.queue, thread)
	c.cond.Signal()
}

// isClosed reports whether close was called.
func (c *coordinator) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// reserveIdle reserves a worker's slot for a run of the thread when one is
// free to execute it at once: none holds, awaits or has reserved the
// thread, and fewer threads wait, run or are reserved than there are
// workers. Only then does an admission start its run itself (a run started
// with no worker free would sit active, not executing, and more than
// max runs would be active). It returns the reservation's id, 0 if none;
// handOff or release gives the slot back.
func (c *coordinator) reserveIdle(thread string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.running[thread] != nil || c.queued[thread] || c.reserved[thread] != 0 ||
		len(c.running)+len(c.queue)+len(c.reserved) >= c.max {
		return 0
	}
	c.lastRes++
	c.reserved[thread] = c.lastRes
	return c.lastRes
}

// release gives back the slot of reservation id, if handOff did not.
func (c *coordinator) release(thread string, id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id != 0 && c.reserved[thread] == id {
		delete(c.reserved, thread)
		c.cond.Signal() // a worker the reservation held back may go on
	}
}

// handOff gives a worker a run that its admission started, and schedules
// its thread ahead of the others: the reservation's slot becomes the
// thread's place at the head of the queue in one step, so neither another
// admission nor a worker taking a queued thread uses the slot in between.
func (c *coordinator) handOff(run record.Run, id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	thread := run.ThreadID
	c.started[thread] = run
	if id != 0 && c.reserved[thread] == id {
		delete(c.reserved, thread)
	}
	switch {
	case c.closed:
	case c.running[thread] != nil:
		c.rekick[thread] = true
	default:
		if c.queued[thread] {
			c.queue = slices.DeleteFunc(c.queue, func(t string) bool { return t == thread })
		}
		c.queued[thread] = true
		c.queue = slices.Insert(c.queue, 0, thread)
		c.cond.Signal()
	}
}

// takeStarted returns the run an admission started on the thread, if any.
func (c *coordinator) takeStarted(thread string) (record.Run, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.started[thread]
	delete(c.started, thread)
	return r, ok
}

// dropStarted forgets a run handed over after a worker adopted it anyway.
func (c *coordinator) dropStarted(thread, runID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.started[thread]; ok && r.ID == runID {
		delete(c.started, thread)
	}
}

// next blocks until a thread waits for a worker and no admission's
// reservation holds this worker's slot, and reserves the thread; false once
// the coordinator closes. Threads handed off by their admission are at the
// head of the queue: the slots their reservations held go to them.
func (c *coordinator) next() (string, *runExec, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for (len(c.queue) == 0 || len(c.running)+len(c.reserved) >= c.max) && !c.closed {
		c.cond.Wait()
	}
	if c.closed {
		return "", nil, false
	}
	thread := c.queue[0]
	c.queue[0] = ""
	c.queue = c.queue[1:]
	delete(c.queued, thread)
	ex := &runExec{}
	c.running[thread] = ex // reserved: no other worker takes the thread
	return thread, ex, true
}

func (c *coordinator) worker(work func(string, *runExec) bool) {
	defer c.workers.Done()
	for {
		thread, ex, ok := c.next()
		if !ok {
			return
		}
		again := work(thread, ex)
		c.mu.Lock()
		delete(c.running, thread)
		again = again || c.rekick[thread]
		delete(c.rekick, thread)
		c.mu.Unlock()
		if again {
			c.kick(thread)
		}
	}
}

// begin makes ex the execution of run: from now on it can be interrupted,
// abandoned and asked for its progress.
func (c *coordinator) begin(ex *runExec, base context.Context, run record.Run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ex.init(base, run)
}

// executing returns the thread's executing run, if any.
func (c *coordinator) executing(thread string) *runExec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running[thread]
}

// steps returns how many model steps the thread's executing run has
// finished, if runID is executing.
func (c *coordinator) steps(thread, runID string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ex := c.running[thread]; ex != nil && ex.run.ID == runID {
		return int(ex.steps.Load()), true
	}
	return 0, false
}

// interrupt asks the thread's executing run, if it is runID, to stop; and
// if runID waits for approval (no execution), the next worker to take the
// thread stops it: the caller kicks the thread.
func (c *coordinator) interrupt(thread, runID string) {
	c.mu.Lock()
	c.stopWaiting[thread] = runID
	c.mu.Unlock()
	if ex := c.executing(thread); ex != nil {
		ex.interrupt(runID)
	}
}

// rearmInterrupt has the thread's run runID, whose interruption this
// worker could not finish (its log moved), interrupted again when the
// worker lets go of the thread (see startAndExecute).
func (c *coordinator) rearmInterrupt(thread, runID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopWaiting[thread] = runID
}

// dropStopWaiting forgets the thread's interrupt unless it is of run keep:
// the run it names ended, or is another host's to stop.
func (c *coordinator) dropStopWaiting(thread, keep string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.stopWaiting[thread]; ok && r != keep {
		delete(c.stopWaiting, thread)
	}
}

// stopsWaiting lists the interrupts remembered, thread → run.
func (c *coordinator) stopsWaiting() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.stopWaiting)
}

// takeStopWaiting reports whether the thread's waiting run runID is to be
// interrupted, and forgets it.
func (c *coordinator) takeStopWaiting(thread, runID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopWaiting[thread] != runID {
		return false
	}
	delete(c.stopWaiting, thread)
	return true
}

// abandonOwner abandons the runs executing under owner.
func (c *coordinator) abandonOwner(owner string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ex := range c.running {
		ex.abandonIf(owner)
	}
}

// close stops taking threads: idle workers return, busy ones return when
// their run ends (wait).
func (c *coordinator) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.cond.Broadcast()
}

// wait returns a channel closed once every worker has returned.
func (c *coordinator) wait() <-chan struct{} {
	done := make(chan struct{})
	go func() { c.workers.Wait(); close(done) }()
	return done
}

// executingRuns lists the runs being executed.
func (c *coordinator) executingRuns() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, ex := range c.running {
		if ex.run.ID != "" {
			ids = append(ids, ex.run.ID)
		}
	}
	return ids
}

// startAndExecute is the coordinator's work: it starts the head of the
// thread's queue (or takes the run its admission started) and executes it.
// It reports whether the thread should be scheduled again.
func (rt *Runtime) startAndExecute(thread string, ex *runExec) bool {
	ctx := rt.baseCtx
	owner := rt.lease.owner()
	run, handed := rt.coord.takeStarted(thread)
	adopted := false
	stop := false // an interrupt of the run was remembered (coordinator.stopWaiting)
	var err error
	if !handed {
		run, err = rt.st.Start(ctx, thread, owner)
	}
	var fe *store.FencedError
	switch {
	case errors.Is(err, runstate.ErrNothingQueued):
		rt.coord.dropStopWaiting(thread, "") // the run it named ended
		return false
	case errors.As(err, &fe):
		rt.fencedStart(thread, fe)
		return false
	case errors.Is(err, runstate.ErrThreadActive):
		// A run is active. If this host owns it, it is a waiting run whose
		// last call was answered, or a start whose reply was lost (the
		// commit landed): nobody executes it, since this worker holds the
		// thread, so execute it now. A run still waiting is left waiting
		// (its deadline armed), unless it is to be interrupted. Another
		// owner's run is moved on by recovery (at the next start, or by its
		// host).
		snap, lerr := rt.st.Thread(ctx, thread)
		if lerr != nil {
			if ctx.Err() == nil {
				// The active run may be this host's to resume or to wait.
				rt.log.Warn("reading the thread's active run failed; retrying the thread shortly", "thread", thread, "err", lerr)
				time.AfterFunc(time.Second, func() { rt.coord.kick(thread) })
			}
			return false
		}
		if len(snap.Runs) == 0 || snap.Runs[0].State != record.StateActive {
			rt.coord.dropStopWaiting(thread, "") // the run it named ended
			return false
		}
		if head := snap.Runs[0]; head.Owner != owner {
			// Another host's run. An interrupt remembered for it stays:
			// its owner may be dead, and the run recovered here; the poll
			// passes it on to a live host that has the run
			// (sweepInterrupts).
			rt.coord.dropStopWaiting(thread, head.ID)
			return false
		}
		run, adopted = snap.Runs[0], true
		stop = rt.coord.takeStopWaiting(thread, run.ID)
		switch {
		case Waiting(run) && !stop:
			rt.armWaiting(ctx, run, nil)
			return false
		case stop:
			rt.log.Info("interrupting the thread's active run, which this host owns", "run", run.ID, "thread", thread, "waiting", Waiting(run))
		default:
			rt.log.Info("executing the thread's active run, which this host owns", "run", run.ID, "thread", thread, "attempt", run.Attempt)
		}
	case err != nil:
		if ctx.Err() == nil {
			rt.log.Error("starting a run failed; retrying the thread shortly", "thread", thread, "err", err)
			time.AfterFunc(time.Second, func() { rt.coord.kick(thread) })
		}
		return false
	}
	if !adopted {
		// A run an interrupt named before it was queued again and
		// started here is stopped all the same; one naming another run
		// is of a run that ended.
		stop = rt.coord.takeStopWaiting(thread, run.ID)
	}
	rt.coord.dropStopWaiting(thread, run.ID)
	if rt.reg != nil {
		rt.reg.forget(thread, run.ID) // it answers its own inputs now
	}
	rt.emit(run.ID, thread, EventStarted, map[string]string{"attempt": itoa(run.Attempt)})
	base := rt.baseCtx
	if o := rt.cfg.Observer; o != nil {
		base = o.RunStarted(base, run)
		defer o.RunEnded(base, run)
	}
	rt.coord.begin(ex, base, run)
	if stop {
		ex.interrupt(run.ID) // taken above: it is to stop
	}
	// A run this worker's commit (or its admission's) just made active
	// for the first time has no steps to resume from: only an execution
	// writes steps, and a run executed before is active again only
	// through a recovery, which counts an attempt.
	ex.fresh = !adopted && run.Attempt == 1
	rt.execute(ex)
	rt.coord.dropStarted(thread, run.ID) // adopted before its admission handed it over
	if rt.coord.takeStopWaiting(thread, run.ID) {
		// Interrupted as it went waiting, or its interruption met an
		// answer that moved its log (interruptCalls): a worker ends it
		// now, from its log as it is.
		cur, err := rt.st.GetRun(ctx, run.ID)
		switch {
		case err != nil && ctx.Err() == nil:
			// Not known whether it still is to stop: keep the interrupt,
			// and look again shortly.
			rt.coord.rearmInterrupt(thread, run.ID)
			time.AfterFunc(time.Second, func() { rt.coord.kick(thread) })
		case err == nil && cur.State == record.StateActive && cur.Owner == owner:
			rt.coord.interrupt(thread, run.ID)
			return true
		}
	}
	// Go on with the thread's next run, unless its last commit showed no
	// other: an input admitted since then kicks the thread itself (here), or
	// sends this host a notice (elsewhere), and the poll finds the rest.
	if rt.st.MayHaveQueued(thread) {
		return true
	}
	rt.handBack(thread)
	return false
}

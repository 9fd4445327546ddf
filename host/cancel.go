package host

import (
	"context"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

// Cancel ends a queued or active run at an operator's request: it ends
// interrupted with reason canceled, and its inputs leave the conversation.
// The terminal record is committed first; then the run's executor is stopped
// through its context (here, or by a notice to the host executing it, when
// hosts share the store), so the model or tool call in flight is aborted at
// once and nothing of the run's tool work is written. The thread's next
// queued run starts. A run already ended answers runstate.ErrNotQueued.
func (rt *Runtime) Cancel(ctx context.Context, runID string) (record.Run, error) {
	r, err := rt.st.CancelActive(ctx, runID)
	if err != nil {
		return record.Run{}, speak(err)
	}
	if rt.reg != nil {
		rt.reg.forget(r.ThreadID, r.ID)
	}
	rt.waits.disarm(r.ID) // a waiting run: its deadline is moot
	if r.Owner != "" {    // it was active
		rt.stopCanceled(r)
	}
	rt.stats.terminal.add(string(r.TerminalReason))
	rt.emit(r.ID, r.ThreadID, EventTerminal, map[string]string{"state": string(r.State), "reason": string(r.TerminalReason)})
	rt.settled(r.ID)
	rt.replySettled(r.ThreadID, r.ID)
	return r, nil
}

// stopCanceled stops the execution of a run whose cancel was committed.
func (rt *Runtime) stopCanceled(r record.Run) {
	if ex := rt.coord.executing(r.ThreadID); ex != nil {
		ex.cancel(r.ID)
	}
	self := rt.lease.epoch.Load()
	if o := leaseEpoch(r.Owner); o != 0 && o != self && rt.lease.isLive(o) {
		// The host executing it stops it and starts the next run; the
		// commit it then attempts is refused (the run is no longer
		// active), which it takes as the run having moved on.
		rt.notify(driver.Notice{ThreadID: r.ThreadID, Owner: o, InterruptRunID: r.ID})
		return
	}
	// Its worker, once the execution returns, goes on with the thread's
	// next run; kicking covers a run that had no executor yet.
	rt.coord.kick(r.ThreadID)
}

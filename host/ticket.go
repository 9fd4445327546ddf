package host

import (
	"context"
	"time"

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

// pollInterval bounds how long a waiter may miss a change made by another
// process (or a wake-up it raced with).
const pollInterval = time.Second

// Wait blocks until the ticket's run settles, and returns what answered it:
// for an absorbed run, the answer of the run that absorbed it. It reads the
// durable record, so it works the same for a ticket from before a restart.
func (t *Ticket) Wait(ctx context.Context) (Result, error) {
	return t.rt.Wait(ctx, t.RunID)
}

// Wait blocks until run runID settles and returns its result.
func (rt *Runtime) Wait(ctx context.Context, runID string) (Result, error) {
	for first := true; ; first = false {
		// Register before reading, so a settle between the read and the
		// wait is not missed.
		ch, done := rt.waitFor(runID)
		var res Result
		// A run this process admitted and has not yet seen settle is not
		// read first: the settle (or the poll) wakes the wait.
		if !first || !rt.pendingHere(runID) {
			var err error
			res, err = rt.st.Result(ctx, runID)
			if err != nil || res.Settled {
				done()
				return res, err
			}
		}
		timer := time.NewTimer(pollInterval)
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

// Result returns a run's result now, settled or not.
func (rt *Runtime) Result(ctx context.Context, runID string) (Result, error) {
	return rt.st.Result(ctx, runID)
}

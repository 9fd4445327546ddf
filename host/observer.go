package host

import (
	"context"

	"github.com/agenthost/agenthost/abi/record"
)

// Observer is told what happens to runs, for traces (package observe
// implements it with OpenTelemetry). Its methods are called synchronously
// on the runtime's paths: they must be quick, must not block and must not
// call the runtime.
type Observer interface {
	// Admitted: an input was admitted to a thread and is answered by
	// runID; ctx is the submission's (it may carry the submitter's trace).
	Admitted(ctx context.Context, threadID, runID, decision string)
	// RunStarted: this process starts executing run. The run executes
	// under the context returned, which must be derived from ctx.
	RunStarted(ctx context.Context, run record.Run) context.Context
	// RunEnded: this process stopped executing run (it settled, was
	// abandoned or moved on); ctx is the one RunStarted returned.
	RunEnded(ctx context.Context, run record.Run)
	// Event: the runtime emitted e (its Seq is not set).
	Event(e Event)
}

// RunCounts are the runs in the store by state.
type RunCounts struct {
	// Active counts the active runs that are executing (or about to);
	// Waiting the active runs that wait for answers to tool calls.
	Active, Queued, Waiting int
}

// RunCounts counts the store's active and queued runs (of every host
// sharing the store).
func (rt *Runtime) RunCounts(ctx context.Context) (RunCounts, error) {
	var c RunCounts
	for _, st := range []record.RunState{record.StateActive, record.StateQueued} {
		for r, err := range rt.st.Runs(ctx, st) {
			if err != nil {
				return RunCounts{}, speak(err)
			}
			if Waiting(r) {
				c.Waiting++
			} else if st == record.StateActive {
				c.Active++
			} else {
				c.Queued++
			}
		}
	}
	return c, nil
}

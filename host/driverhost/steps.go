package driverhost

import (
	"context"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/driverrpc"
)

// StepDriver is a Driver whose process speaks store protocol version 2: it
// adds driver.StepStore and driver.ThreadLister. Driver.Store returns one
// for such a driver; a driver speaking version 1 has none, so that the host
// can tell by type assertion.
type StepDriver struct{ *Driver }

var (
	_ driver.StepStore    = (*StepDriver)(nil)
	_ driver.ThreadLister = (*StepDriver)(nil)
	_ driver.Leaser       = (*StepDriver)(nil)
)

// CommitSteps implements driver.StepStore. Like Commit, a call that fails
// with driver.ErrUnavailable has an unknown outcome: read the run's steps
// (their IDs) to settle it.
func (d *StepDriver) CommitSteps(ctx context.Context, b driver.StepBatch) error {
	_, err := call(ctx, d.Driver, "CommitSteps", func(ctx context.Context, c *driverrpc.Client) (struct{}, error) {
		return struct{}{}, c.Steps().CommitSteps(ctx, b)
	})
	return err
}

// ReadSteps implements driver.StepStore.
func (d *StepDriver) ReadSteps(ctx context.Context, runID string, afterSeq int64, limit int) ([]record.Step, error) {
	return call(ctx, d.Driver, "ReadSteps", func(ctx context.Context, c *driverrpc.Client) ([]record.Step, error) {
		return c.Steps().ReadSteps(ctx, runID, afterSeq, limit)
	})
}

// ListThreads implements driver.ThreadLister.
func (d *StepDriver) ListThreads(ctx context.Context, after string, limit int) ([]record.Thread, error) {
	return call(ctx, d.Driver, "ListThreads", func(ctx context.Context, c *driverrpc.Client) ([]record.Thread, error) {
		return c.Steps().ListThreads(ctx, after, limit)
	})
}

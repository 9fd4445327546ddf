package driverrpc

import (
	"context"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/storepb"
)

// StepsQueued returns how many step commits wait in c's queue for a round
// trip.
func StepsQueued(c *Client) int {
	c.steps.mu.Lock()
	defer c.steps.mu.Unlock()
	return len(c.steps.queue)
}

// StepsOneByOne reports whether c sends step commits one by one, having
// found that the driver does not know CommitStepsMany.
func StepsOneByOne(c *Client) bool { return c.noStepsMany.Load() }

// DirectServed counts the calls l answered.
func DirectServed(l *DirectListener) int64 { return l.served.Load() }

// DirectOpen returns how many direct connections c has open, and how many
// of them are idle.
func DirectOpen(c *Client) (open, idle int) {
	if c.direct == nil {
		return 0, 0
	}
	c.direct.mu.Lock()
	defer c.direct.mu.Unlock()
	return c.direct.open, len(c.direct.idle)
}

// CommitStepsManyCall sends bs in one CommitStepsMany over c's transport,
// and returns each batch's result.
func CommitStepsManyCall(c *Client, bs []driver.StepBatch) ([]error, error) {
	pbs := make([]*storepb.StepBatch, len(bs))
	for i, b := range bs {
		pbs[i] = StepBatchToProto(b)
	}
	rs, err := c.commitStepsMany(context.Background(), pbs)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(rs))
	for i, r := range rs {
		errs[i] = r.err
	}
	return errs, nil
}

package driverrpc

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

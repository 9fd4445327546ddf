package pgtest

import (
	"errors"
	"fmt"
)

// Halt stops the server for a fault test, leaving its data for Resume:
// mode "immediate" is a crash (no checkpoint; recovery at the next start),
// "fast" a clean stop that ends open connections.
func (c *Cluster) Halt(mode string) error {
	if mode != "immediate" && mode != "fast" {
		return fmt.Errorf("pgtest: halt mode %q: want immediate or fast", mode)
	}
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	if c.stopped.Load() {
		return errors.New("pgtest: the cluster was stopped")
	}
	if out, err := c.run("pg_ctl", "-D", c.data(), "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop -m %s: %v\n%s", mode, err, out)
	}
	return nil
}

// Resume starts a halted server again on the same port and data.
func (c *Cluster) Resume() error {
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	if c.stopped.Load() {
		return errors.New("pgtest: the cluster was stopped")
	}
	if out, err := c.run("pg_ctl", "-D", c.data(), "-l", c.logFile(), "-w", "-t", "60", "-o", c.startOpts, "start"); err != nil {
		return fmt.Errorf("pgtest: pg_ctl start: %v\n%s", err, out)
	}
	return nil
}

package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/lazyfs"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// PowerCut says whether the durable tier cuts the power under the driver
// (Options.PowerCut).
type PowerCut string

// The power cut settings.
const (
	// PowerCutAuto (the default) cuts the power when a FUSE file system
	// can be mounted here, and says in the report when it could not.
	PowerCutAuto PowerCut = "auto"
	// PowerCutRequire fails the durable tier when it cannot cut the power.
	PowerCutRequire PowerCut = "require"
	// PowerCutOff never cuts the power: the durable tier kills processes
	// only.
	PowerCutOff PowerCut = "off"
)

// What a durable tier that passed was checked against (Report.Durability).
const (
	// DurablePowerCut: acknowledged commits survived a power cut, the
	// writes the driver had not synced dropped.
	DurablePowerCut = "power-cut"
	// DurableProcessKill: acknowledged commits survived the end of the
	// driver process; the power cut was not run (see the case's message).
	DurableProcessKill = "process-kill"
)

// powerCutSkip starts the message of a power cut case that did not run
// for want of what it needs; such a skip leaves the durable tier passed,
// and the report says it was checked against process kills only.
const powerCutSkip = "power cut not run: "

// RulePowerCut is the rule of a driver that lost, or half applied, a
// commit or step it acknowledged, when the power was cut under it.
const RulePowerCut = "durability.acked-survives-power-cut"

func init() {
	cases = append(cases, testCase{"durability", "power-cut", TierDurable, false, testPowerCut})
}

// testPowerCut runs the driver with its data directory on a file system
// that keeps every write not yet synced in memory (package
// internal/lazyfs), commits from several goroutines (and appends steps),
// kills the driver, cuts the power (every unsynced write is dropped),
// relaunches it, and checks that everything it acknowledged is there,
// whole.
func testPowerCut(c *C) {
	mode := c.s.opts.PowerCut
	if mode == PowerCutOff {
		c.Skipf("%sturned off (--power-cut off)", powerCutSkip)
	}
	mnt := c.newDir()
	fsys, err := lazyfs.Mount(mnt, lazyfs.Options{})
	if err != nil {
		if mode == PowerCutRequire {
			c.Fatalf("durability.power-cut-mount", "the power cut was required, but its file system cannot be mounted: %v", err)
		}
		c.Skipf("%s%v", powerCutSkip, err)
	}
	// Closers run last first: the file system is unmounted after the
	// instances on it are closed.
	c.closers = append(c.closers, func() { _ = fsys.Unmount() })
	dir := filepath.Join(mnt, "data")
	c.s.dirs = append(c.s.dirs, dir) // the target's Clean, if any, is told of it
	if err := os.Mkdir(dir, 0o700); err != nil {
		c.Fatalf("suite.scratch", "data directory on the power cut file system: %v", err)
	}
	if err := syncDir(mnt); err != nil {
		c.Fatalf("suite.scratch", "syncing the power cut file system: %v", err)
	}
	d := c.startOn(dir)
	if d.Pid() == 0 {
		c.Skipf("%sthe driver runs in this process and cannot be killed; test the durable tier on a binary", powerCutSkip)
	}
	steps := c.s.info.ProtocolVersion >= 2
	var runs []record.Run
	var ss driver.StepStore
	if steps {
		ss, _ = c.steps(d)
		for i := range 2 {
			th := c.thread(d, fmt.Sprintf("power-steps-%d", i))
			runs = append(runs, th.activeRun(RulePowerCut, fmt.Sprintf("ps-r%d", i)))
		}
	}

	writers, killAfter := 4, int64(40)
	if c.full {
		writers, killAfter = 8, 400
	}
	acked := make([]int64, writers)
	stepAcked := make([]atomic.Int64, len(runs))
	var total atomic.Int64
	killed := make(chan struct{})
	var once sync.Once
	kill := func() {
		once.Do(func() {
			close(killed) // first: a commit the kill fails is seen as after it
			_ = d.Kill()
		})
	}
	// due kills once killAfter commits and a step of every step stream
	// were acknowledged: a kill before any step would check no step.
	due := func() {
		if total.Load() < killAfter {
			return
		}
		for i := range stepAcked {
			if stepAcked[i].Load() == 0 {
				return
			}
		}
		kill()
	}
	stopped := func() bool {
		select {
		case <-killed:
			return true
		default:
			return false
		}
	}
	var firstErr atomic.Value
	var wg sync.WaitGroup
	before := fsys.Stats() // what the driver does in the directory from here on is its commits'
	for w := range writers {
		wg.Go(func() {
			th := fmt.Sprintf("power-%d", w)
			for n := int64(1); n < 1<<20 && !stopped(); n++ {
				if _, err := d.Commit(c.ctx, nthBatch(th, n)); err != nil {
					if !stopped() {
						// Before the kill: the case fails below, and the
						// kill ends the other streams.
						firstErr.CompareAndSwap(nil, err.Error())
						kill()
					}
					return
				}
				acked[w] = n
				total.Add(1)
				due()
			}
		})
	}
	for i, r := range runs {
		wg.Go(func() {
			for seq := int64(1); seq <= maxPowerSteps && !stopped(); seq++ {
				if err := ss.CommitSteps(c.ctx, storedrivertest.StepBatchOf(r, storedrivertest.Step(r, seq))); err != nil {
					if !stopped() {
						firstErr.CompareAndSwap(nil, fmt.Sprintf("CommitSteps of run %s step %d: %v", r.ID, seq, err))
						kill()
					}
					return
				}
				stepAcked[i].Store(seq)
				due()
			}
		})
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		c.Fatalf("durability.commit", "the commit stream stopped before the kill: %v", err)
	}
	for i, r := range runs {
		if stepAcked[i].Load() == 0 {
			c.Fatalf("durability.commit", "no step of run %s was acknowledged before the kill", r.ID)
		}
	}
	c.mustKill(d)
	es, err := os.ReadDir(dir)
	if err != nil {
		c.Fatalf("suite.power-cut", "reading the data directory before the power cut: %v", err)
	}
	if len(es) == 0 {
		// Nothing of the driver's lives in its data directory (a database
		// server keeps it): a power cut of the directory proves nothing.
		c.Skipf("%sthe driver keeps nothing in its data directory: its durability rests on where it keeps its data", powerCutSkip)
	}
	during := fsys.Stats()
	wrote, synced := during.BytesWritten-before.BytesWritten, during.Syncs-before.Syncs
	cut, err := fsys.Cut()
	if err != nil {
		c.Fatalf("suite.power-cut", "cutting the power: %v", err)
	}
	in, err := c.s.target.Start(c.ctx, dir, nil)
	if err != nil {
		c.Fatalf(RulePowerCut, "the driver does not start on its data after the power cut: %v", err)
	}
	c.watchCrashes(in)
	c.closers = append(c.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Close(ctx)
	})
	for w := range writers {
		c.checkStreamAfter(RulePowerCut, in, fmt.Sprintf("power-%d", w), acked[w], "the power cut")
	}
	if steps {
		ss, _ = c.steps(in)
		for i, r := range runs {
			got, err := ss.ReadSteps(c.ctx, r.ID, 0, maxPowerSteps+1)
			if errors.Is(err, driver.ErrNotFound) || err == nil && int64(len(got)) < stepAcked[i].Load() {
				c.Fatalf(RulePowerCut, "run %s has %d steps after the power cut (%v), but step %d was acknowledged", r.ID, len(got), err, stepAcked[i].Load())
			}
			c.ok(RulePowerCut, "ReadSteps after the power cut", err)
			if !sameSteps(got, storedrivertest.Steps(r, 1, int64(len(got)))) {
				c.Fatalf("durability.no-partial-batch", "run %s: its steps after the power cut are not its steps 1..%d whole: %v", r.ID, len(got), stepIDs(got))
			}
		}
	}
	if synced == 0 {
		// It synced nothing there while it acknowledged, and the power
		// cut lost nothing it acknowledged: its commits are kept
		// elsewhere (its files there are a configuration, a trace), and
		// the cut of this directory proved nothing about them.
		c.Skipf("%sthe driver synced no file in its data directory while it acknowledged %d commits (it wrote %d bytes there), yet they all survived the power cut: its durability rests on where it keeps its data", powerCutSkip, total.Load(), wrote)
	}
	c.Logf("power cut after %d acknowledged commits and %d steps: %d files and %d directories lost their unsynced changes; the driver wrote %d bytes and made %d file and %d directory syncs meanwhile",
		total.Load(), sum(stepAcked), cut.Files, cut.Dirs, wrote, synced, during.DirSyncs-before.DirSyncs)
}

// maxPowerSteps bounds each step stream of the power cut case (the kill
// ends them sooner).
const maxPowerSteps = 500

func sum(xs []atomic.Int64) int64 {
	var s int64
	for i := range xs {
		s += xs[i].Load()
	}
	return s
}

// syncDir fsyncs a directory.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

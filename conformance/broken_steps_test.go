package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/plugins/badgerstore/badgerdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// Broken drivers of store protocol 2: badgerstore (a driver with step
// records) on a scratch directory, with one step rule broken each.

// brokenStepDrivers maps each to the exact set of rules the suite must find
// it breaking (see brokenDrivers).
var brokenStepDrivers = map[string][]string{
	"steps-ignore-owner": {"steps.cond-owner"},
	// Moving the version makes the host's next commit of the thread
	// conflict: the cases that commit after steps fail there too.
	"steps-move-version":  {"steps.approval", "steps.batch-next-seq", "steps.commit", "steps.version-unchanged"},
	"steps-any-seq":       {"steps.next-seq", "steps.one-winner"},
	"batch-steps-dropped": {"steps.approval", "steps.batch-next-seq"},
	"approval-dropped":    {"steps.approval"},
	"batch-steps-apart":   {"steps.batch-atomic"},
	"threads-unsorted":    {"threads.list-order"},
}

func init() {
	for name, rules := range brokenStepDrivers {
		brokenDrivers[name] = rules
	}
}

// brokenStepFactory returns the factory of broken step driver name, nil if
// none.
func brokenStepFactory(name string) storedriver.Factory {
	if _, ok := brokenStepDrivers[name]; !ok {
		return nil
	}
	return storedriver.FactoryFunc(func(ctx context.Context, config map[string]string) (driver.Driver, error) {
		dir, err := os.MkdirTemp("", "broken-steps-")
		if err != nil {
			return nil, err
		}
		cfg := badgerdriver.DefaultConfig(dir)
		cfg.SyncWrites = false // durability is not what these break
		d, err := badgerdriver.Open(cfg)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		return &brokenSteps{Driver: d, name: name, dir: dir}, nil
	})
}

type brokenSteps struct {
	*badgerdriver.Driver
	name string
	dir  string
}

func (b *brokenSteps) Close(ctx context.Context) error {
	err := b.Driver.Close(ctx)
	os.RemoveAll(b.dir)
	return err
}

func (b *brokenSteps) Info(ctx context.Context) (driver.Info, error) {
	info, err := b.Driver.Info(ctx)
	info.Name = "broken-" + b.name
	return info, err
}

func (b *brokenSteps) CommitSteps(ctx context.Context, sb driver.StepBatch) error {
	switch b.name {
	case "steps-ignore-owner":
		// Checks that the run is active, but takes its owner and attempt
		// as they are stored.
		if rs, err := b.Driver.GetRuns(ctx, []string{sb.RunID}); err == nil {
			sb.Owner, sb.Attempt = rs[0].Owner, rs[0].Attempt
		}
	case "steps-any-seq":
		// Appends the steps at the end of the log, whatever their seq.
		got, err := b.Driver.ReadSteps(ctx, sb.RunID, 0, 1<<20)
		if err == nil {
			sb.Steps = slices.Clone(sb.Steps)
			for i := range sb.Steps {
				sb.Steps[i].Seq = int64(len(got) + 1 + i)
				sb.Steps[i].ID = fmt.Sprintf("%s@%d", sb.Steps[i].ID, sb.Steps[i].Seq)
			}
		}
	case "steps-move-version":
		// Writes the steps through a commit that moves the version.
		if err := b.Driver.CommitSteps(ctx, sb); err != nil {
			return err
		}
		for { // until it moved the version, whatever else commits
			snap, err := b.Driver.LoadThread(ctx, sb.ThreadID)
			if err != nil {
				return err
			}
			h := snap.Thread
			h.Version++
			h.LastCommitID = fmt.Sprintf("steps-%s-%d-%d", sb.RunID, sb.Steps[0].Seq, h.Version)
			_, err = b.Driver.Commit(ctx, driver.Batch{CommitID: h.LastCommitID, ThreadID: h.ID, ExpectedVersion: snap.Thread.Version, Thread: h})
			if !errors.Is(err, driver.ErrVersionConflict) {
				return err
			}
		}
	}
	return b.Driver.CommitSteps(ctx, sb)
}

// CommitStepsMany commits each batch through the broken CommitSteps,
// concurrently, as the protocol's server does for a driver without the
// method.
func (b *brokenSteps) CommitStepsMany(ctx context.Context, bs []driver.StepBatch) []error {
	errs := make([]error, len(bs))
	var wg sync.WaitGroup
	for i := range bs {
		wg.Go(func() { errs[i] = b.CommitSteps(ctx, bs[i]) })
	}
	wg.Wait()
	return errs
}

// CommitStepsManyEncoded is CommitStepsMany: the protocol's server prefers
// it, for CommitSteps too, and the embedded driver's would commit the
// batches correctly.
func (b *brokenSteps) CommitStepsManyEncoded(ctx context.Context, bs []driver.StepBatch, _ []*driverrpc.EncodedSteps) []error {
	return b.CommitStepsMany(ctx, bs)
}

func (b *brokenSteps) ReadSteps(ctx context.Context, runID string, afterSeq int64, limit int) ([]record.Step, error) {
	steps, err := b.Driver.ReadSteps(ctx, runID, afterSeq, limit)
	if b.name == "steps-any-seq" {
		for i := range steps {
			// The ids as the host gave them.
			if j := len(steps[i].ID) - len(fmt.Sprintf("@%d", steps[i].Seq)); j > 0 && steps[i].ID[j:] == fmt.Sprintf("@%d", steps[i].Seq) {
				steps[i].ID = steps[i].ID[:j]
			}
		}
	}
	return steps, err
}

func (b *brokenSteps) Commit(ctx context.Context, bt driver.Batch) (int64, error) {
	switch b.name {
	case "batch-steps-dropped":
		bt.Steps = nil // writes the rest of the batch, no steps, and checks none
	case "approval-dropped":
		// An older build: it keeps neither a run's Pending nor an ask's or
		// answer's fields (its steps read back as bare records).
		bt.Runs = slices.Clone(bt.Runs)
		for i := range bt.Runs {
			bt.Runs[i].Pending = nil
		}
		bt.Steps = slices.Clone(bt.Steps)
		for i := range bt.Steps {
			bt.Steps[i].Ask, bt.Steps[i].Answer = record.Ask{CallID: bt.Steps[i].Ask.CallID, Tool: bt.Steps[i].Ask.Tool}, record.Answer{CallID: bt.Steps[i].Answer.CallID, Action: bt.Steps[i].Answer.Action}
		}
	case "batch-steps-apart":
		// Writes the steps first, on their own (checked as CommitSteps
		// checks them, as their runs' stored owners), then the rest: a
		// refused batch leaves its steps behind.
		for len(bt.Steps) > 0 {
			run := bt.Steps[0].RunID
			n := 1
			for n < len(bt.Steps) && bt.Steps[n].RunID == run {
				n++
			}
			rs, err := b.Driver.GetRuns(ctx, []string{run})
			if err != nil {
				return 0, err
			}
			sb := driver.StepBatch{ThreadID: bt.ThreadID, RunID: run, Owner: rs[0].Owner, Attempt: rs[0].Attempt, Steps: bt.Steps[:n]}
			if err := b.Driver.CommitSteps(ctx, sb); err != nil {
				return 0, err
			}
			bt.Steps = bt.Steps[n:]
		}
	}
	return b.Driver.Commit(ctx, bt)
}

func (b *brokenSteps) ListThreads(ctx context.Context, after string, limit int) ([]record.Thread, error) {
	ts, err := b.Driver.ListThreads(ctx, after, limit)
	if b.name == "threads-unsorted" && len(ts) > 1 {
		ts[0], ts[len(ts)-1] = ts[len(ts)-1], ts[0]
	}
	return ts, err
}

// CommitMany commits each batch through the broken Commit, so that the
// driver is as broken for the commits the host sends together as for the
// others (the embedded driver's own CommitMany would be correct).
func (b *brokenSteps) CommitMany(ctx context.Context, bs []driver.Batch) ([]int64, []error) {
	vs, es := make([]int64, len(bs)), make([]error, len(bs))
	var wg sync.WaitGroup
	for i, bt := range bs {
		wg.Go(func() { vs[i], es[i] = b.Commit(ctx, bt) })
	}
	wg.Wait()
	return vs, es
}

// CommitManyEncoded is CommitMany: the protocol's server prefers it to
// CommitMany, and the embedded driver's would commit the group correctly.
func (b *brokenSteps) CommitManyEncoded(ctx context.Context, bs []driver.Batch, _ []*driverrpc.Encoded) ([]int64, []error) {
	return b.CommitMany(ctx, bs)
}

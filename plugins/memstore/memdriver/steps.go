package memdriver

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// checkSteps checks, with the lock held, that each step (validated by
// storedriver.ValidateBatch or ValidateStepBatch) is the next Seq of its
// run's log and that its id is new.
func (d *Driver) checkSteps(threadID string, steps []record.Step) error {
	last := map[string]int64{}
	for _, st := range steps {
		n, ok := last[st.RunID]
		if !ok {
			if log := d.steps[st.RunID]; len(log) > 0 {
				n = log[len(log)-1].Seq
			}
		}
		if st.Seq != n+1 {
			return fmt.Errorf("%w: step %s of run %s has seq %d, the run's next is %d", driver.ErrVersionConflict, st.ID, st.RunID, st.Seq, n+1)
		}
		if d.stepIDs[st.ID] {
			return fmt.Errorf("%w: step %s exists", driver.ErrInvalidArgument, st.ID)
		}
		if r, ok := d.runs[st.RunID]; ok && r.ThreadID != threadID {
			return fmt.Errorf("%w: step %s: run %s belongs to thread %s", driver.ErrInvalidArgument, st.ID, st.RunID, r.ThreadID)
		}
		last[st.RunID] = st.Seq
	}
	return nil
}

// appendSteps writes checked steps; the lock is held.
func (d *Driver) appendSteps(steps []record.Step) {
	for _, st := range steps {
		d.steps[st.RunID] = append(d.steps[st.RunID], record.CloneStep(st))
		d.stepIDs[st.ID] = true
	}
}

// CommitSteps implements driver.StepStore.
func (d *Driver) CommitSteps(ctx context.Context, b driver.StepBatch) error {
	if err := storedriver.ValidateStepBatch(b); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(ctx); err != nil {
		return err
	}
	r, ok := d.runs[b.RunID]
	switch {
	case !ok:
		return fmt.Errorf("%w: run %s does not exist", driver.ErrVersionConflict, b.RunID)
	case r.ThreadID != b.ThreadID:
		return fmt.Errorf("%w: run %s belongs to thread %s", driver.ErrInvalidArgument, b.RunID, r.ThreadID)
	case r.State != record.StateActive:
		return fmt.Errorf("%w: run %s is %s, not active", driver.ErrVersionConflict, b.RunID, r.State)
	case r.Owner != b.Owner || r.Attempt != b.Attempt:
		return fmt.Errorf("%w: run %s is attempt %d of %q, not attempt %d of %q", driver.ErrVersionConflict, b.RunID, r.Attempt, r.Owner, b.Attempt, b.Owner)
	}
	if b.Fence != 0 {
		l, err := d.leaser()
		if err != nil {
			return err
		}
		owner := d.threads[b.ThreadID].Owner
		if !l.isLive(b.Fence) {
			return fmt.Errorf("%w: lease %d is not live", driver.ErrFenced, b.Fence)
		}
		if owner != b.Fence {
			// Unlike a fenced batch, steps never take a thread over: the
			// run's executor owns the thread since its start or recovery,
			// and a fence that does not is not that executor's.
			return fmt.Errorf("%w: thread %s is owned by lease %d, not %d", driver.ErrFenced, b.ThreadID, owner, b.Fence)
		}
	}
	if err := d.checkSteps(b.ThreadID, b.Steps); err != nil {
		return err
	}
	d.appendSteps(b.Steps)
	return nil
}

// ReadSteps implements driver.StepStore.
func (d *Driver) ReadSteps(ctx context.Context, runID string, afterSeq int64, limit int) ([]record.Step, error) {
	if err := storedriver.ValidateReadSteps(runID, limit); err != nil {
		return nil, err
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	log := d.steps[runID]
	i, _ := slices.BinarySearchFunc(log, afterSeq+1, func(s record.Step, seq int64) int { return cmp.Compare(s.Seq, seq) })
	log = log[i:min(len(log), i+limit)]
	out := make([]record.Step, len(log))
	for i, st := range log {
		out[i] = record.CloneStep(st)
	}
	return out, nil
}

// ListThreads implements driver.ThreadLister.
func (d *Driver) ListThreads(ctx context.Context, after string, limit int) ([]record.Thread, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit %d must be positive", driver.ErrInvalidArgument, limit)
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(d.threads))
	for id := range d.threads {
		if id > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	ids = ids[:min(len(ids), limit)]
	out := make([]record.Thread, len(ids))
	for i, id := range ids {
		out[i] = record.CloneThread(d.threads[id])
	}
	return out, nil
}

package badgerdriver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/abi/storepb"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// Step records (driver.StepStore) and thread listing (driver.ThreadLister).
// A CommitSteps call is queued to the committer like a Commit and applied
// in the same groups, so that the steps of many runs share one sync; it
// reads the run's record and the last seq of its log inside the group's
// transaction, so that it sees what the earlier members wrote.

var (
	_ driver.StepStore    = (*Driver)(nil)
	_ driver.ThreadLister = (*Driver)(nil)
)

// CommitSteps implements driver.StepStore.
func (d *Driver) CommitSteps(ctx context.Context, b driver.StepBatch) error {
	if err := storedriver.ValidateStepBatch(b); err != nil {
		return err
	}
	if b.Fence != 0 {
		return fmt.Errorf("%w: a fenced step batch, but badgerstore has no leases", driver.ErrInvalidArgument)
	}
	var enc encoded
	var err error
	if enc.steps, err = encodeSteps(b.Steps, &enc.size, nil); err != nil {
		return fmt.Errorf("%w: encoding the steps: %v", driver.ErrInvalidArgument, err)
	}
	if enc.size > d.cfg.MaxBatchBytes {
		return fmt.Errorf("%w: steps of %d bytes exceed the limit of %d bytes", driver.ErrTooLarge, enc.size, d.cfg.MaxBatchBytes)
	}
	if d.space != nil {
		if err := d.space.check(enc.size, d.log.Warn); err != nil {
			return err
		}
	}
	req := &commitReq{ctx: ctx, sb: &b, enc: enc, done: make(chan error, 1)}
	if err := d.submit(ctx, []*commitReq{req}); err != nil {
		return err
	}
	return <-req.done
}

// applySteps checks a CommitSteps batch against txn, then writes it (see
// apply for wrote and err).
func (d *Driver) applySteps(txn *badger.Txn, req *commitReq) (wrote bool, err error) {
	b := req.sb
	run, err := getRun(txn, b.RunID)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return false, fmt.Errorf("%w: run %s does not exist", driver.ErrVersionConflict, b.RunID)
	case err != nil:
		return false, err
	case run.ThreadId != b.ThreadID:
		return false, fmt.Errorf("%w: run %s belongs to thread %s, not %s", driver.ErrInvalidArgument, b.RunID, run.ThreadId, b.ThreadID)
	case record.RunState(run.State) != record.StateActive || run.Owner != b.Owner || int(run.Attempt) != b.Attempt:
		return false, fmt.Errorf("%w: run %s is %s, owner %q, attempt %d; the steps are for an active run of owner %q, attempt %d",
			driver.ErrVersionConflict, b.RunID, run.State, run.Owner, run.Attempt, b.Owner, b.Attempt)
	}
	if err := checkNextSeqs(txn, b.Steps); err != nil {
		return false, err
	}
	return true, writeSteps(txn, b.Steps, req.enc.steps)
}

// lastStepSeq returns the seq of the last step stored for run, 0 if none.
func lastStepSeq(txn *badger.Txn, runID string) (int64, error) {
	item, err := txn.Get(stepLastKey(runID))
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	}
	var last int64
	err = item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("badgerstore: run %s: bad last step seq", runID)
		}
		last = int64(binary.BigEndian.Uint64(v))
		return nil
	})
	return last, err
}

// checkNextSeqs checks that steps (consecutive within each run, as
// ValidateBatch checked) start at the next seq of their runs' logs, and
// that their ids are new.
func checkNextSeqs(txn *badger.Txn, steps []record.Step) error {
	seen := map[string]bool{}
	for _, s := range steps {
		if seen[s.RunID] {
			continue
		}
		seen[s.RunID] = true
		last, err := lastStepSeq(txn, s.RunID)
		if err != nil {
			return err
		}
		if s.Seq != last+1 {
			return fmt.Errorf("%w: step %s of run %s has seq %d; the next is %d", driver.ErrVersionConflict, s.ID, s.RunID, s.Seq, last+1)
		}
	}
	for _, s := range steps {
		ok, err := exists(txn, stepIDKey(s.ID))
		if err != nil {
			return err
		}
		if ok {
			return fmt.Errorf("%w: step %s exists", driver.ErrInvalidArgument, s.ID)
		}
	}
	return nil
}

// writeSteps writes steps, encoded as enc, and the new last seq of each
// run.
func writeSteps(txn *badger.Txn, steps []record.Step, enc [][]byte) error {
	last := map[string]int64{}
	for i, s := range steps {
		if err := txn.Set(stepKey(s.RunID, s.Seq), enc[i]); err != nil {
			return err
		}
		if err := txn.Set(stepIDKey(s.ID), nil); err != nil {
			return err
		}
		last[s.RunID] = s.Seq
	}
	for run, seq := range last {
		if err := txn.Set(stepLastKey(run), binary.BigEndian.AppendUint64(nil, uint64(seq))); err != nil {
			return err
		}
	}
	return nil
}

// ReadSteps implements driver.StepStore.
func (d *Driver) ReadSteps(ctx context.Context, runID string, afterSeq int64, limit int) ([]record.Step, error) {
	if err := storedriver.ValidateReadSteps(runID, limit); err != nil {
		return nil, err
	}
	return readLog(ctx, d, threadPrefix(tStep, runID), func(seq int64) []byte { return stepKey(runID, seq) },
		afterSeq, limit, driverrpc.StepFromProto)
}

// ListThreads implements driver.ThreadLister.
func (d *Driver) ListThreads(ctx context.Context, after string, limit int) ([]record.Thread, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit %d must be positive", driver.ErrInvalidArgument, limit)
	}
	out := []record.Thread{}
	prefix := []byte{tThread}
	start := threadKey(after)
	err := d.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: min(limit, 100), Prefix: prefix})
		defer it.Close()
		for it.Seek(start); it.Valid() && len(out) < limit; it.Next() {
			if bytes.Equal(it.Item().Key(), start) {
				continue
			}
			var t storepb.Thread
			err := it.Item().Value(func(v []byte) error {
				if len(v) < 8 {
					return fmt.Errorf("badgerstore: thread %s: short header", it.Item().Key()[1:])
				}
				return proto.Unmarshal(v[8:], &t)
			})
			if err != nil {
				return err
			}
			out = append(out, driverrpc.ThreadFromProto(&t))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

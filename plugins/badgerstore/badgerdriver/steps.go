package badgerdriver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"

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
// in the same groups, so that the steps of many runs share one sync.
// CommitStepsMany (driverrpc.StepsManyCommitter) queues several batches at
// once, as CommitMany does commits, and stores the steps in the wire form
// the host sent them in when the server has it
// (driverrpc.EncodedStepsCommitter), as CommitManyEncoded does records:
// the stored form is the same (keys.go).
//
// A step batch is checked against its run's step head: the thread, owner
// and attempt of the active run and the seq of the last step of its log.
// The committer keeps the heads of the runs whose steps it wrote, as it
// keeps thread heads (ADR 0145), so that the next batch of the run reads
// neither the run's record nor its last seq; any other write to a run (a
// commit that writes the run or takes steps of it) drops its head first, so
// that its next batch reads both from the transaction again (ADR 0153). A
// commit that writes a run active leaves the run's head as it wrote it,
// its last seq unread: the run's first batch reads only its log's last key
// (ADR 0158).

var (
	_ driver.StepStore                = (*Driver)(nil)
	_ driver.ThreadLister             = (*Driver)(nil)
	_ driverrpc.StepsManyCommitter    = (*Driver)(nil)
	_ driverrpc.EncodedStepsCommitter = (*Driver)(nil)
)

// stepHead is what a step batch of an active run is checked against.
type stepHead struct {
	threadID, owner string
	state           record.RunState // active for every head the committer keeps
	attempt         int
	lastSeq         int64 // seqUnread: not known yet, read from the log when needed
}

// seqUnread is the lastSeq of a step head made from a commit that wrote
// the run: the committer knows the run as written, not its log.
const seqUnread = -1

// CommitSteps implements driver.StepStore.
func (d *Driver) CommitSteps(ctx context.Context, b driver.StepBatch) error {
	req, err := d.prepareSteps(ctx, &b, nil)
	if err != nil {
		return err
	}
	if err := d.submit(ctx, []*commitReq{req}); err != nil {
		return err
	}
	return <-req.done
}

// CommitStepsMany implements driverrpc.StepsManyCommitter: the batches are
// queued together, so that they share a group, and each gets its own
// result.
func (d *Driver) CommitStepsMany(ctx context.Context, bs []driver.StepBatch) []error {
	return d.CommitStepsManyEncoded(ctx, bs, nil)
}

// CommitStepsManyEncoded implements driverrpc.EncodedStepsCommitter:
// CommitStepsMany, storing the steps' wire form as received where enc has
// it.
func (d *Driver) CommitStepsManyEncoded(ctx context.Context, bs []driver.StepBatch, enc []*driverrpc.EncodedSteps) []error {
	errs := make([]error, len(bs))
	reqs := make([]*commitReq, 0, len(bs))
	idx := make([]int, 0, len(bs))
	for i := range bs {
		var wire *driverrpc.EncodedSteps
		if i < len(enc) {
			wire = enc[i]
		}
		req, err := d.prepareSteps(ctx, &bs[i], wire)
		if err != nil {
			errs[i] = err
			continue
		}
		reqs = append(reqs, req)
		idx = append(idx, i)
	}
	if err := d.submit(ctx, reqs); err != nil {
		for _, i := range idx {
			errs[i] = err
		}
		return errs
	}
	for k, req := range reqs {
		errs[idx[k]] = <-req.done
	}
	return errs
}

// prepareSteps checks and encodes a step batch for the committer; wire,
// when not nil, is its steps' wire form, which it stores as is.
func (d *Driver) prepareSteps(ctx context.Context, b *driver.StepBatch, wire *driverrpc.EncodedSteps) (*commitReq, error) {
	if err := storedriver.ValidateStepBatch(*b); err != nil {
		return nil, err
	}
	if b.Fence != 0 {
		return nil, fmt.Errorf("%w: a fenced step batch, but badgerstore has no leases", driver.ErrInvalidArgument)
	}
	var enc encoded
	if wire != nil && len(wire.Steps) == len(b.Steps) {
		enc.steps = wire.Steps
		for _, v := range wire.Steps {
			enc.size += len(v)
		}
	} else {
		var err error
		if enc.steps, err = encodeSteps(b.Steps, &enc.size, nil); err != nil {
			return nil, fmt.Errorf("%w: encoding the steps: %v", driver.ErrInvalidArgument, err)
		}
	}
	if enc.size > d.cfg.MaxBatchBytes {
		return nil, fmt.Errorf("%w: steps of %d bytes exceed the limit of %d bytes", driver.ErrTooLarge, enc.size, d.cfg.MaxBatchBytes)
	}
	if d.space != nil {
		if err := d.space.check(enc.size, d.log.Warn); err != nil {
			return nil, err
		}
	}
	return &commitReq{ctx: ctx, sb: b, enc: enc, done: make(chan error, 1)}, nil
}

// applySteps checks a CommitSteps batch against txn, then writes it (see
// apply for wrote and err).
func (d *Driver) applySteps(txn *badger.Txn, req *commitReq) (wrote bool, err error) {
	b := req.sb
	h, err := d.stepHead(txn, b.RunID)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return false, fmt.Errorf("%w: run %s does not exist", driver.ErrVersionConflict, b.RunID)
	case err != nil:
		return false, err
	case h.threadID != b.ThreadID:
		return false, fmt.Errorf("%w: run %s belongs to thread %s, not %s", driver.ErrInvalidArgument, b.RunID, h.threadID, b.ThreadID)
	case h.state != record.StateActive || h.owner != b.Owner || h.attempt != b.Attempt:
		return false, fmt.Errorf("%w: run %s is %s, owner %q, attempt %d; the steps are for an active run of owner %q, attempt %d",
			driver.ErrVersionConflict, b.RunID, h.state, h.owner, h.attempt, b.Owner, b.Attempt)
	}
	// ValidateStepBatch checked that the steps are of this run, consecutive.
	if s := b.Steps[0]; s.Seq != h.lastSeq+1 {
		return false, fmt.Errorf("%w: step %s of run %s has seq %d; the next is %d", driver.ErrVersionConflict, s.ID, s.RunID, s.Seq, h.lastSeq+1)
	}
	if err := d.checkNewStepIDs(txn, b.Steps); err != nil {
		return false, err
	}
	h.lastSeq = b.Steps[len(b.Steps)-1].Seq
	d.txnSteps[b.RunID] = h
	return true, d.writeSteps(txn, b.Steps, req.enc.steps)
}

// stepHead returns the step head of run runID as the transaction txn sees
// it: what an earlier member of its group wrote, else what the committer's
// cache holds, else what txn reads (badger.ErrKeyNotFound for a run that
// does not exist). A head whose last seq is unread gets it from txn.
func (d *Driver) stepHead(txn *badger.Txn, runID string) (stepHead, error) {
	h, ok := d.txnSteps[runID]
	if !ok {
		h, ok = d.stepHeads[runID]
	}
	if ok {
		if h.lastSeq == seqUnread {
			var err error
			h.lastSeq, err = lastStepSeq(txn, runID)
			return h, err
		}
		return h, nil
	}
	run, err := getRun(txn, runID)
	if err != nil {
		return stepHead{}, err
	}
	h = stepHead{threadID: run.ThreadId, owner: run.Owner, state: record.RunState(run.State), attempt: int(run.Attempt)}
	if h.state != record.StateActive {
		return h, nil // refused: its last seq does not matter
	}
	h.lastSeq, err = lastStepSeq(txn, runID)
	return h, err
}

// forgetSteps drops the step heads of the runs a commit b writes (its runs,
// and those it takes steps of), once its checks passed and before it
// writes: their next step batch reads them from its transaction again.
func (d *Driver) forgetSteps(b driver.Batch) {
	for _, r := range b.Runs {
		delete(d.stepHeads, r.ID)
		delete(d.txnSteps, r.ID)
	}
	for _, s := range b.Steps {
		delete(d.stepHeads, s.RunID)
		delete(d.txnSteps, s.RunID)
	}
}

// headsOfRuns gives each active run a commit b wrote a step head, as b
// wrote it, its last seq unread: the run's next step batch reads its log's
// last key only, not the run. Called once b's writes are in the
// transaction.
func (d *Driver) headsOfRuns(b driver.Batch) {
	for _, r := range b.Runs {
		if r.State == record.StateActive {
			d.txnSteps[r.ID] = stepHead{threadID: r.ThreadID, owner: r.Owner, state: r.State, attempt: r.Attempt, lastSeq: seqUnread}
		}
	}
}

// noteSteps records in the committer's cache the step heads the current
// transaction wrote, once it committed; when it did not, their cached heads
// are dropped, to be read again from badger.
func (d *Driver) noteSteps(committed bool) {
	if !committed {
		for id := range d.txnSteps {
			delete(d.stepHeads, id)
		}
	} else {
		if len(d.stepHeads)+len(d.txnSteps) > d.maxHeads {
			clear(d.stepHeads)
		}
		maps.Copy(d.stepHeads, d.txnSteps)
	}
	clear(d.txnSteps)
}

// lastStepSeq returns the seq of the last step stored for run, 0 if none:
// the seq of the last key of its log (ADR 0158).
func lastStepSeq(txn *badger.Txn, runID string) (int64, error) {
	prefix := threadPrefix(tStep, runID)
	it := txn.NewIterator(badger.IteratorOptions{Reverse: true, Prefix: prefix})
	defer it.Close()
	// Reverse, Seek stops at the largest key at or before its argument:
	// above every seq of the log.
	it.Seek(append(prefix, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
	if !it.Valid() {
		return 0, nil
	}
	k := it.Item().Key()
	if len(k) != len(prefix)+8 {
		return 0, fmt.Errorf("badgerstore: run %s: a step key of %d bytes", runID, len(k))
	}
	return int64(binary.BigEndian.Uint64(k[len(prefix):])), nil
}

// checkNextSeqs checks that steps (consecutive within each run, as
// ValidateBatch checked) start at the next seq of their runs' logs, and
// that their ids are new. The last seq of a run is its step head's when
// the committer has one (stepHead), else read from txn.
func (d *Driver) checkNextSeqs(txn *badger.Txn, steps []record.Step) error {
	var seen map[string]bool
	for _, s := range steps {
		if seen[s.RunID] {
			continue
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[s.RunID] = true
		last, err := d.lastSeqOf(txn, s.RunID)
		if err != nil {
			return err
		}
		if s.Seq != last+1 {
			return fmt.Errorf("%w: step %s of run %s has seq %d; the next is %d", driver.ErrVersionConflict, s.ID, s.RunID, s.Seq, last+1)
		}
	}
	return d.checkNewStepIDs(txn, steps)
}

// lastSeqOf returns the seq of the last step of run runID as txn sees it:
// its step head's, if the committer has one, else read.
func (d *Driver) lastSeqOf(txn *badger.Txn, runID string) (int64, error) {
	h, ok := d.txnSteps[runID]
	if !ok {
		h, ok = d.stepHeads[runID]
	}
	if ok && h.lastSeq != seqUnread {
		return h.lastSeq, nil
	}
	return lastStepSeq(txn, runID)
}

// checkNewStepIDs checks that no step of steps has an id already stored:
// proved by the committer's floor of step ids when it can (ADR 0152), else
// read.
func (d *Driver) checkNewStepIDs(txn *badger.Txn, steps []record.Step) error {
	for _, s := range steps {
		if d.stepIDs.unused(s.ID) {
			continue
		}
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

// writeSteps writes steps, encoded as enc. The last seq of each run's log
// is its last key's; it is not written apart (ADR 0158).
func (d *Driver) writeSteps(txn *badger.Txn, steps []record.Step, enc [][]byte) error {
	for i, s := range steps {
		if err := txn.Set(stepKey(s.RunID, s.Seq), enc[i]); err != nil {
			return err
		}
		d.stepIDs.add(s.ID)
		if err := txn.Set(stepIDKey(s.ID), nil); err != nil {
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

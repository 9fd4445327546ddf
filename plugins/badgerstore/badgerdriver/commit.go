package badgerdriver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/driverfault"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// Commits go through group commit: Commit encodes its batch and queues it;
// one committer goroutine takes every queued batch (up to MaxGroup), applies
// each in turn to one badger transaction, and commits that transaction, so
// that a sync to disk acknowledges many batches.
//
// Every batch in a group is checked on its own, against what the earlier
// members of the group wrote, and a batch that fails its checks writes
// nothing: its failure is its own. A batch whose writes fail (too large)
// poisons the transaction, so the committer throws it away and runs the
// members before it again without it; when a transaction fails to commit,
// the committer runs each member alone.
//
// The committer is the store's only writer, and badger runs its
// transactions one after the other (a new one waits for the previous
// commit), so no write can come between a check and its writes: badger's
// conflict detection is off (ADR 0145). That lets the committer keep the
// heads of the threads it wrote (version and last history seq) in memory
// and check a batch against them instead of reading the thread's header
// back from badger each time.

// threadHead is what a batch is checked against of its thread.
type threadHead struct {
	version int64
	lastSeq int64
}

// maxHeads bounds the committer's cache of thread heads (Driver.maxHeads);
// a full cache is emptied and fills again from badger.
const maxHeads = 1 << 16

// commitReq is one queued commit: a Batch, or a CommitSteps batch when sb
// is set. Both kinds share groups, so that many runs' steps share a sync.
type commitReq struct {
	ctx  context.Context
	b    driver.Batch
	sb   *driver.StepBatch
	enc  encoded
	done chan error
}

// name says what req commits, for errors.
func (req *commitReq) name() string {
	if req.sb != nil {
		return "steps of run " + req.sb.RunID
	}
	return "batch " + req.b.CommitID
}

// encoded is a batch's values, encoded by the committing goroutine before
// it queues.
type encoded struct {
	thread []byte // without the last-seq prefix
	runs   [][]byte
	msgs   [][]byte
	idem   [][]byte
	steps  [][]byte
	size   int
}

func encode(b driver.Batch) (encoded, error) {
	var e encoded
	var err error
	marshal := func(m proto.Message) []byte {
		if err != nil {
			return nil
		}
		var v []byte
		v, err = proto.Marshal(m)
		e.size += len(v)
		return v
	}
	e.thread = marshal(driverrpc.ThreadToProto(b.Thread))
	for _, r := range b.Runs {
		e.runs = append(e.runs, marshal(driverrpc.RunToProto(r)))
	}
	for _, m := range b.Messages {
		e.msgs = append(e.msgs, marshal(driverrpc.MessageToProto(m)))
	}
	for _, k := range b.Idempotency {
		e.idem = append(e.idem, marshal(driverrpc.IdempotencyToProto(k)))
	}
	e.steps, err = encodeSteps(b.Steps, &e.size, err)
	return e, err
}

func encodeSteps(steps []record.Step, size *int, err error) ([][]byte, error) {
	var out [][]byte
	for _, s := range steps {
		if err != nil {
			return nil, err
		}
		var v []byte
		v, err = proto.Marshal(driverrpc.StepToProto(s))
		*size += len(v)
		out = append(out, v)
	}
	return out, err
}

// Commit implements driver.Driver.
func (d *Driver) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	req, err := d.prepare(ctx, b, nil)
	if err != nil {
		return 0, err
	}
	if err := d.submit(ctx, []*commitReq{req}); err != nil {
		return 0, err
	}
	// Wait for the verdict even if ctx ends: the committer answers within
	// one group, and an answer is better than an unknown outcome.
	if err := <-req.done; err != nil {
		return 0, err
	}
	return b.Thread.Version, nil
}

// CommitMany implements driver.ManyCommitter: the batches are queued
// together, so that they share a group, and each gets its own result.
func (d *Driver) CommitMany(ctx context.Context, bs []driver.Batch) ([]int64, []error) {
	return d.CommitManyEncoded(ctx, bs, nil)
}

// CommitManyEncoded implements driverrpc.EncodedCommitter: CommitMany,
// storing the records' wire form as received where enc has it, since the
// stored form is the same (keys.go).
func (d *Driver) CommitManyEncoded(ctx context.Context, bs []driver.Batch, enc []*driverrpc.Encoded) ([]int64, []error) {
	versions := make([]int64, len(bs))
	errs := make([]error, len(bs))
	reqs := make([]*commitReq, 0, len(bs))
	idx := make([]int, 0, len(bs))
	for i, b := range bs {
		var wire *driverrpc.Encoded
		if i < len(enc) {
			wire = enc[i]
		}
		req, err := d.prepare(ctx, b, wire)
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
		return versions, errs
	}
	for k, req := range reqs {
		i := idx[k]
		if errs[i] = <-req.done; errs[i] == nil {
			versions[i] = bs[i].Thread.Version
		}
	}
	return versions, errs
}

// prepare checks and encodes a batch for the committer; wire, when not
// nil, is its records' wire form, which it stores as is.
func (d *Driver) prepare(ctx context.Context, b driver.Batch, wire *driverrpc.Encoded) (*commitReq, error) {
	if err := storedriver.ValidateBatch(b); err != nil {
		return nil, err
	}
	var enc encoded
	if wire != nil {
		enc = encoded{thread: wire.Thread, runs: wire.Runs, msgs: wire.Messages, idem: wire.Idempotency, steps: wire.Steps}
		for _, vs := range [][][]byte{{wire.Thread}, wire.Runs, wire.Messages, wire.Idempotency, wire.Steps} {
			for _, v := range vs {
				enc.size += len(v)
			}
		}
	} else {
		var err error
		if enc, err = encode(b); err != nil {
			return nil, fmt.Errorf("%w: encoding the batch: %v", driver.ErrInvalidArgument, err)
		}
	}
	if enc.size > d.cfg.MaxBatchBytes {
		return nil, fmt.Errorf("%w: batch of %d bytes exceeds the limit of %d bytes", driver.ErrTooLarge, enc.size, d.cfg.MaxBatchBytes)
	}
	if d.space != nil {
		if err := d.space.check(enc.size, d.log.Warn); err != nil {
			return nil, err
		}
	}
	return &commitReq{ctx: ctx, b: b, enc: enc, done: make(chan error, 1)}, nil
}

// submit queues reqs for the committer, together.
func (d *Driver) submit(ctx context.Context, reqs []*commitReq) error {
	if len(reqs) == 0 {
		return nil
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return driver.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d.reqs <- reqs
	return nil
}

// committer applies queued commits a group at a time until reqs is closed.
func (d *Driver) committer() {
	defer close(d.committed)
	group := make([]*commitReq, 0, d.cfg.MaxGroup)
	for reqs := range d.reqs {
		group = append(group[:0], reqs...)
	fill:
		for len(group) < d.cfg.MaxGroup {
			select {
			case more, ok := <-d.reqs:
				if !ok {
					break fill
				}
				group = append(group, more...)
			default:
				break fill
			}
		}
		d.commitGroup(group)
		clear(group)
	}
}

// commitGroup commits the members of a group, each with its own verdict.
func (d *Driver) commitGroup(pending []*commitReq) {
	for len(pending) > 0 {
		// Members whose context ended before they were applied are refused;
		// nothing of theirs was written.
		live := pending[:0:0]
		for _, r := range pending {
			if err := r.ctx.Err(); err != nil {
				r.done <- err
				continue
			}
			live = append(live, r)
		}
		pending = live
		if len(pending) == 0 {
			return
		}

		txn := d.db.NewTransaction(true)
		verdicts := make([]error, 0, len(pending))
		bad := -1 // the member whose writes failed, if any
		var badErr error
		written := make(map[string]threadHead, len(pending)) // heads this transaction wrote
		clear(d.txnSteps)
		for i, r := range pending {
			wrote, err := d.apply(txn, r, written)
			if wrote && err != nil {
				bad, badErr = i, err
				break
			}
			verdicts = append(verdicts, err)
		}
		if bad >= 0 {
			txn.Discard()
			if bad == 0 {
				pending[0].done <- writeError(pending[0], badErr)
				pending = pending[1:]
			} else {
				d.commitGroup(pending[:bad]) // they fit without it
				pending = pending[bad:]      // it is tried again, alone first
			}
			continue
		}
		driverfault.Reach(driverfault.AfterWriteBeforeSync)
		err := txn.Commit()
		d.noteHeads(written, err == nil)
		d.noteSteps(err == nil)
		if err != nil && len(pending) > 1 {
			// Do not let one member's failure answer for the others.
			for _, r := range pending {
				d.commitGroup([]*commitReq{r})
			}
			return
		}
		for i, r := range pending {
			switch {
			case err != nil:
				r.done <- fmt.Errorf("badgerstore: commit: %w", err)
			default:
				r.done <- verdicts[i]
			}
		}
		return
	}
}

// noteHeads records in the committer's cache the thread heads a
// transaction wrote, once it committed; when it did not, their cached heads
// are dropped, to be read again from badger.
func (d *Driver) noteHeads(written map[string]threadHead, committed bool) {
	if !committed {
		for id := range written {
			delete(d.heads, id)
		}
		return
	}
	if len(d.heads)+len(written) > d.maxHeads {
		clear(d.heads)
	}
	for id, h := range written {
		d.heads[id] = h
	}
}

// head returns the head of thread id as the transaction txn sees it: what
// an earlier member of the group wrote, else what the cache holds, else
// what badger holds (zero for a new thread).
func (d *Driver) head(txn *badger.Txn, id string, written map[string]threadHead) (threadHead, error) {
	if h, ok := written[id]; ok {
		return h, nil
	}
	if h, ok := d.heads[id]; ok {
		return h, nil
	}
	cur, lastSeq, err := getThread(txn, id)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return threadHead{}, nil
	case err != nil:
		return threadHead{}, err
	}
	return threadHead{version: cur.Version, lastSeq: lastSeq}, nil
}

// writeError is the verdict of a commit whose writes failed on their own.
func writeError(req *commitReq, err error) error {
	if errors.Is(err, badger.ErrTxnTooBig) {
		return fmt.Errorf("%w: %s is too large for one transaction", driver.ErrTooLarge, req.name())
	}
	return fmt.Errorf("%w: %s: %v", driver.ErrInvalidArgument, req.name(), err)
}

// apply checks req's batch against txn, then writes it to txn. It returns
// wrote=false with the verdict when a check fails (nothing was written),
// and wrote=true with an error when a write failed (txn is then poisoned).
//
// written holds the thread heads the earlier members of txn wrote; apply
// adds the head it writes.
func (d *Driver) apply(txn *badger.Txn, req *commitReq, written map[string]threadHead) (wrote bool, err error) {
	if req.sb != nil {
		return d.applySteps(txn, req)
	}
	b := req.b
	// Checks: read everything first, write nothing.
	h, err := d.head(txn, b.ThreadID, written)
	if err != nil {
		return false, err
	}
	lastSeq := h.lastSeq
	if h.version != b.ExpectedVersion {
		return false, fmt.Errorf("%w: thread %s is at version %d, batch expects %d", driver.ErrVersionConflict, b.ThreadID, h.version, b.ExpectedVersion)
	}
	for _, k := range b.Idempotency {
		if ok, err := exists(txn, idemKey(k.ThreadID, k.Key)); err != nil || ok {
			if err != nil {
				return false, err
			}
			return false, fmt.Errorf("%w: idempotency key %q on thread %s exists", driver.ErrVersionConflict, k.Key, k.ThreadID)
		}
	}
	for _, m := range b.Messages {
		ok := false
		if !d.msgIDs.unused(m.ID) {
			if ok, err = exists(txn, msgIDKey(m.ID)); err != nil {
				return false, err
			}
		}
		if ok {
			return false, fmt.Errorf("%w: message %s exists", driver.ErrInvalidArgument, m.ID)
		}
		if m.Seq <= lastSeq {
			return false, fmt.Errorf("%w: message %s seq %d is not after %d", driver.ErrInvalidArgument, m.ID, m.Seq, lastSeq)
		}
		lastSeq = m.Seq
	}
	if err := d.checkNextSeqs(txn, b.Steps); err != nil {
		return false, err
	}
	oldState := make([]record.RunState, len(b.Runs))
	for i, r := range b.Runs {
		if d.runIDs.unused(r.ID) {
			continue // a new run
		}
		old, err := getRun(txn, r.ID)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
		case err != nil:
			return false, err
		case old.ThreadId != r.ThreadID:
			return false, fmt.Errorf("%w: run %s belongs to thread %s", driver.ErrInvalidArgument, r.ID, old.ThreadId)
		default:
			oldState[i] = record.RunState(old.State)
		}
	}

	// Writes.
	d.forgetSteps(b)
	set := func(k, v []byte) error {
		if err := txn.Set(k, v); err != nil {
			wrote = true
			return err
		}
		wrote = true
		return nil
	}
	for i, r := range b.Runs {
		if oldState[i] != "" && oldState[i] != r.State {
			if err := txn.Delete(stateKey(oldState[i], r.ID)); err != nil {
				return true, err
			}
		}
		d.runIDs.add(r.ID)
		if err := set(runKey(r.ID), req.enc.runs[i]); err != nil {
			return true, err
		}
		if err := set(stateKey(r.State, r.ID), nil); err != nil {
			return true, err
		}
	}
	for i, m := range b.Messages {
		if err := set(historyKey(b.ThreadID, m.Seq), req.enc.msgs[i]); err != nil {
			return true, err
		}
		d.msgIDs.add(m.ID)
		if err := set(msgIDKey(m.ID), nil); err != nil {
			return true, err
		}
	}
	for i, k := range b.Idempotency {
		if err := set(idemKey(k.ThreadID, k.Key), req.enc.idem[i]); err != nil {
			return true, err
		}
	}
	if err := d.writeSteps(txn, b.Steps, req.enc.steps); err != nil {
		return true, err
	}
	hdr := make([]byte, 8, 8+len(req.enc.thread))
	binary.BigEndian.PutUint64(hdr, uint64(lastSeq))
	if err := set(threadKey(b.ThreadID), append(hdr, req.enc.thread...)); err != nil {
		return true, err
	}
	written[b.ThreadID] = threadHead{version: b.Thread.Version, lastSeq: lastSeq}
	d.headsOfRuns(b)
	return true, nil
}

func exists(txn *badger.Txn, key []byte) (bool, error) {
	_, err := txn.Get(key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, badger.ErrKeyNotFound):
		return false, nil
	}
	return false, err
}

package pgdriver

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/abi/storepb"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// Step records (driver.StepStore) and thread listing (driver.ThreadLister).
//
// CommitSteps is grouped: calls queue their steps, and a few committers
// each take every queued call (up to maxStepGroup) and send them as one
// pipeline of commit_steps_try, one implicit transaction, so that the steps
// of many runs share one round trip and one flush of the write-ahead log,
// each still applied or refused on its own (see schema.go).

var (
	_ driver.StepStore    = (*Driver)(nil)
	_ driver.ThreadLister = (*Driver)(nil)
)

const (
	// stepCommitters is how many step groups may be in flight at once.
	stepCommitters = 4
	// maxStepGroup bounds the calls of one group.
	maxStepGroup = 256
)

// stepReq is one queued CommitSteps.
type stepReq struct {
	ctx      context.Context
	b        driver.StepBatch
	seqs     []int64
	ids      []string
	payloads [][]byte
	done     chan error
}

func (d *Driver) startStepCommitters() {
	d.stepq = make(chan *stepReq, maxStepGroup)
	for range stepCommitters {
		d.stepsDone.Add(1)
		go d.stepCommitter()
	}
}

// stepCommitter commits queued step batches a group at a time until stepq
// is closed.
func (d *Driver) stepCommitter() {
	defer d.stepsDone.Done()
	group := make([]*stepReq, 0, maxStepGroup)
	for r := range d.stepq {
		group = append(group[:0], r)
	fill:
		for len(group) < maxStepGroup {
			select {
			case more, ok := <-d.stepq:
				if !ok {
					break fill
				}
				group = append(group, more)
			default:
				break fill
			}
		}
		d.commitStepGroup(group)
		clear(group)
	}
}

// CommitSteps implements driver.StepStore. Like Commit, a call whose
// connection failed after it was sent has an unknown outcome: it returns
// driver.ErrUnavailable, and the host reads the run's steps to settle it.
func (d *Driver) CommitSteps(ctx context.Context, b driver.StepBatch) error {
	if err := storedriver.ValidateStepBatch(b); err != nil {
		return err
	}
	for _, s := range append([]string{b.ThreadID, b.RunID, b.Owner}, stepIDs(b.Steps)...) {
		if !storable(s) {
			return fmt.Errorf("%w: %q: ids must be UTF-8 without NUL bytes", driver.ErrInvalidArgument, s)
		}
	}
	req := &stepReq{ctx: ctx, b: b, done: make(chan error, 1)}
	size := 0
	for _, s := range b.Steps {
		v, err := proto.Marshal(driverrpc.StepToProto(s))
		if err != nil {
			return fmt.Errorf("%w: encoding step %s: %v", driver.ErrInvalidArgument, s.ID, err)
		}
		size += len(v)
		req.seqs, req.ids, req.payloads = append(req.seqs, s.Seq), append(req.ids, s.ID), append(req.payloads, v)
	}
	if size > MaxBatchBytes {
		return fmt.Errorf("%w: steps of %d bytes exceed the limit of %d bytes", driver.ErrTooLarge, size, MaxBatchBytes)
	}
	if err := d.enter(ctx); err != nil {
		return err
	}
	defer d.leave()
	d.stepq <- req
	return <-req.done
}

func stepIDs(steps []record.Step) []string {
	ids := make([]string, len(steps))
	for i, s := range steps {
		ids[i] = s.ID
	}
	return ids
}

// commitStepGroup commits a group of step batches in one transaction, in
// thread order (the order commit_batch3 groups lock threads in), each
// applied or refused on its own. Members whose subtransaction a
// serialization failure or a deadlock rolled back are certainly not
// applied: they are sent again (see resendRolledBack), never reported as
// a conflict, which would tell the host its run moved on.
func (d *Driver) commitStepGroup(group []*stepReq) {
	live := make([]*stepReq, 0, len(group))
	for _, r := range group {
		if err := r.ctx.Err(); err != nil {
			r.done <- err // nothing was sent
			continue
		}
		live = append(live, r)
	}
	slices.SortStableFunc(live, func(x, y *stepReq) int { return strings.Compare(x.b.ThreadID, y.b.ThreadID) })
	resendRolledBack(live, d.sendStepGroup, func(r *stepReq, err error) { r.done <- err },
		func(r *stepReq, state, msg string) error {
			return fmt.Errorf("%w: pgstore: steps of run %s rolled back on every try (%s, SQLSTATE %s); not applied",
				driver.ErrUnavailable, r.b.RunID, msg, state)
		})
}

// sendStepGroup sends live as one transaction and answers each member,
// except those rolled back by a serialization failure or deadlock, which
// it returns with their SQLSTATE and message.
func (d *Driver) sendStepGroup(live []*stepReq) []rolledBackMember[*stepReq] {
	if len(live) == 0 {
		return nil
	}
	type outcome struct{ state, constraint, message, detail *string }
	outs := make([]outcome, len(live))
	// The group runs under its own context: its members' contexts may end
	// while it is in flight, and their outcome would then be unknown.
	ctx := context.Background()
	sent, err := d.sendBatch(ctx, func(batch *pgx.Batch) {
		for i, r := range live {
			o := &outs[i]
			*o = outcome{}
			b := r.b
			batch.Queue(d.sql.stepsTry, b.ThreadID, b.RunID, b.Owner, int64(b.Attempt), b.Fence, r.seqs, r.ids, r.payloads).
				QueryRow(func(row pgx.Row) error { return row.Scan(&o.state, &o.constraint, &o.message, &o.detail) })
		}
	})
	var again []rolledBackMember[*stepReq]
	for i, r := range live {
		o := outs[i]
		switch {
		case err == nil && o.state == nil:
			r.done <- nil
		case err == nil && retryableState(*o.state):
			again = append(again, rolledBackMember[*stepReq]{r, *o.state, deref(o.message)})
		case err == nil:
			r.done <- mapError(&pgconn.PgError{Code: *o.state, ConstraintName: deref(o.constraint), Message: deref(o.message), Detail: deref(o.detail)})
		case sent && !rolledBack(err) && connectionLost(err):
			r.done <- fmt.Errorf("%w: pgstore: steps of run %s (in a group of %d): outcome unknown (%v); read the run's steps",
				driver.ErrUnavailable, r.b.RunID, len(live), err)
		default:
			r.done <- mapOpError(ctx, err)
		}
	}
	return again
}

// ReadSteps implements driver.StepStore.
func (d *Driver) ReadSteps(ctx context.Context, runID string, afterSeq int64, limit int) ([]record.Step, error) {
	if err := storedriver.ValidateReadSteps(runID, limit); err != nil {
		return nil, err
	}
	if !storable(runID) || afterSeq == math.MaxInt64 {
		return []record.Step{}, d.read(ctx, func(context.Context) error { return nil })
	}
	return readPayloads(ctx, d, func(b []byte) (record.Step, error) {
		var s storepb.Step
		err := unmarshal(b, &s)
		return driverrpc.StepFromProto(&s), err
	}, d.sql.readSteps, runID, afterSeq, limit)
}

// ListThreads implements driver.ThreadLister.
func (d *Driver) ListThreads(ctx context.Context, after string, limit int) ([]record.Thread, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit %d must be positive", driver.ErrInvalidArgument, limit)
	}
	// As in ListRuns: stored ids hold no NUL byte and only UTF-8.
	if i := strings.IndexByte(after, 0); i >= 0 {
		after = after[:i]
	}
	after = strings.ToValidUTF8(after, "")
	return readPayloads(ctx, d, func(b []byte) (record.Thread, error) {
		var t storepb.Thread
		err := unmarshal(b, &t)
		return driverrpc.ThreadFromProto(&t), err
	}, d.sql.threads, after, limit)
}

package pgdriver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// MaxBatchBytes bounds the encoded size of one batch; a larger one is
// driver.ErrTooLarge.
const MaxBatchBytes = driver.MaxBatchBytes

// args are the arguments of commit_batch for one batch.
type args struct {
	header             []byte
	firstSeq, lastSeq  int64
	runIDs, runStates  []string
	runSeqs            []int64
	runs               [][]byte
	msgIDs             []string
	msgSeqs            []int64
	msgs               [][]byte
	keys               []string
	keyPayloads        [][]byte
	runOwners          []string
	runAttempts        []int64
	stepRuns, stepIDs  []string
	stepSeqs           []int64
	steps              [][]byte
	openRunIDs         []string
	size               int
	threadID, commitID string
	expected, version  int64
	fence, owner       int64
	marshalErr         error
}

// prepare checks the shape of b (storedriver.ValidateBatch and the rules a
// batch must meet before the database sees it) and encodes its records.
func prepare(b driver.Batch) (*args, error) {
	if err := storedriver.ValidateBatch(b); err != nil {
		return nil, err
	}
	switch {
	case b.Fence < 0:
		return nil, fmt.Errorf("%w: negative fence %d", driver.ErrInvalidArgument, b.Fence)
	case b.Fence != 0 && b.Thread.Owner != b.Fence && b.Thread.Owner != 0:
		return nil, fmt.Errorf("%w: a batch fenced by %d must make it the thread's owner or leave the thread unowned, not owned by %d", driver.ErrInvalidArgument, b.Fence, b.Thread.Owner)
	case b.Thread.Owner < 0:
		return nil, fmt.Errorf("%w: negative owner %d", driver.ErrInvalidArgument, b.Thread.Owner)
	}
	a := &args{threadID: b.ThreadID, commitID: b.CommitID, expected: b.ExpectedVersion, version: b.Thread.Version,
		fence: b.Fence, owner: b.Thread.Owner, openRunIDs: b.Thread.OpenRunIDs}
	if a.openRunIDs == nil {
		a.openRunIDs = []string{}
	}
	for _, s := range append([]string{b.ThreadID, b.CommitID}, b.Thread.OpenRunIDs...) {
		if !storable(s) {
			return nil, fmt.Errorf("%w: %q: ids must be UTF-8 without NUL bytes", driver.ErrInvalidArgument, s)
		}
	}
	marshal := func(m proto.Message) []byte {
		if a.marshalErr != nil {
			return nil
		}
		v, err := proto.Marshal(m)
		if err != nil {
			a.marshalErr = err
		}
		a.size += len(v)
		return v
	}
	a.header = marshal(driverrpc.ThreadToProto(b.Thread))
	n := len(b.Runs)
	a.runIDs, a.runStates, a.runSeqs, a.runs = make([]string, n), make([]string, n), make([]int64, n), make([][]byte, n)
	a.runOwners, a.runAttempts = make([]string, n), make([]int64, n)
	for i, r := range b.Runs {
		if !storable(r.ID) || !storable(r.Owner) {
			return nil, fmt.Errorf("%w: run id %q, owner %q: ids must be UTF-8 without NUL bytes", driver.ErrInvalidArgument, r.ID, r.Owner)
		}
		a.runIDs[i], a.runStates[i], a.runSeqs[i], a.runs[i] = r.ID, string(r.State), r.Seq, marshal(driverrpc.RunToProto(r))
		a.runOwners[i], a.runAttempts[i] = r.Owner, int64(r.Attempt)
	}
	n = len(b.Steps)
	a.stepRuns, a.stepIDs, a.stepSeqs, a.steps = make([]string, n), make([]string, n), make([]int64, n), make([][]byte, n)
	for i, st := range b.Steps {
		if !storable(st.ID) || !storable(st.RunID) {
			return nil, fmt.Errorf("%w: step id %q of run %q: ids must be UTF-8 without NUL bytes", driver.ErrInvalidArgument, st.ID, st.RunID)
		}
		a.stepRuns[i], a.stepIDs[i], a.stepSeqs[i], a.steps[i] = st.RunID, st.ID, st.Seq, marshal(driverrpc.StepToProto(st))
	}
	n = len(b.Messages)
	a.msgIDs, a.msgSeqs, a.msgs = make([]string, n), make([]int64, n), make([][]byte, n)
	for i, m := range b.Messages {
		if !storable(m.ID) {
			return nil, fmt.Errorf("%w: message id %q: ids must be UTF-8 without NUL bytes", driver.ErrInvalidArgument, m.ID)
		}
		if i > 0 && m.Seq <= b.Messages[i-1].Seq {
			return nil, fmt.Errorf("%w: message %s seq %d is not after %d", driver.ErrInvalidArgument, m.ID, m.Seq, b.Messages[i-1].Seq)
		}
		a.msgIDs[i], a.msgSeqs[i], a.msgs[i] = m.ID, m.Seq, marshal(driverrpc.MessageToProto(m))
	}
	if n > 0 {
		a.firstSeq, a.lastSeq = b.Messages[0].Seq, b.Messages[n-1].Seq
	}
	n = len(b.Idempotency)
	a.keys, a.keyPayloads = make([]string, n), make([][]byte, n)
	for i, k := range b.Idempotency {
		if !storable(k.Key) {
			return nil, fmt.Errorf("%w: idempotency key %q: keys must be UTF-8 without NUL bytes", driver.ErrInvalidArgument, k.Key)
		}
		a.keys[i], a.keyPayloads[i] = k.Key, marshal(driverrpc.IdempotencyToProto(k))
	}
	if a.marshalErr != nil {
		return nil, fmt.Errorf("%w: encoding the batch: %v", driver.ErrInvalidArgument, a.marshalErr)
	}
	if a.size > MaxBatchBytes {
		return nil, fmt.Errorf("%w: batch of %d bytes exceeds the limit of %d bytes", driver.ErrTooLarge, a.size, MaxBatchBytes)
	}
	return a, nil
}

// Commit implements driver.Driver. The batch is one call of commit_batch3
// (see schema.go): one statement, prepared on the connection, one round
// trip, one implicit transaction, in which the version and the fence are
// checked and the records written, or nothing at all.
//
// It is sent again only when its failure proves it did not commit (see
// rolledBack). When the connection fails after the batch was sent, the
// outcome is unknown: Commit returns driver.ErrUnavailable, and the host
// reads the thread's LastCommitID to settle it.
func (d *Driver) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	a, err := prepare(b)
	if err != nil {
		return 0, err
	}
	if err := d.enter(ctx); err != nil {
		return 0, err
	}
	defer d.leave()
	sent := false
	err = d.retry(ctx, func(err error) bool { return !sent || rolledBack(err) }, func(ctx context.Context) error {
		sent = false
		conn, err := d.pool.Acquire(ctx)
		if err != nil {
			return err // nothing was sent
		}
		defer conn.Release()
		sent = true
		_, err = conn.Exec(ctx, d.sql.commit, a.threadID, a.expected, a.version, a.fence, a.owner,
			a.commitID, a.openRunIDs, a.header, a.firstSeq, a.lastSeq,
			a.runIDs, a.runStates, a.runSeqs, a.runs,
			a.msgSeqs, a.msgIDs, a.msgs,
			a.keys, a.keyPayloads, a.runOwners, a.runAttempts,
			a.stepRuns, a.stepSeqs, a.stepIDs, a.steps)
		return err
	})
	if err == nil {
		return b.Thread.Version, nil
	}
	if sent && !rolledBack(err) && (connectionLost(err) || ctx.Err() != nil) {
		why := "the connection failed"
		if ctx.Err() != nil {
			why = ctx.Err().Error()
		}
		return 0, fmt.Errorf("%w: pgstore: commit %s of thread %s: outcome unknown (%s: %v); read the thread's LastCommitID",
			driver.ErrUnavailable, b.CommitID, b.ThreadID, why, err)
	}
	return 0, mapOpError(ctx, err)
}

var _ driver.ManyCommitter = (*Driver)(nil)

// CommitMany implements driver.ManyCommitter: the batches that a host
// sends together share one transaction, and so one round trip and one flush
// of the write-ahead log, each still applied or refused on its own. They
// are applied in thread order (stable: batches of one thread keep theirs),
// so that two groups lock their threads in the same order and never
// deadlock: as commit_group calls (sendGroup), or, when a write of the
// group fails, as one commit_batch3_try per batch, each in a
// subtransaction (sendMany).
//
// When the transaction fails as a whole — the connection drops, the server
// refuses the commit — every batch sent has an unknown outcome
// (driver.ErrUnavailable, settled by the host through LastCommitID), unless
// the failure proves nothing was committed, in which case the group is sent
// again.
func (d *Driver) CommitMany(ctx context.Context, bs []driver.Batch) ([]int64, []error) {
	versions := make([]int64, len(bs))
	errs := make([]error, len(bs))
	var order []int
	as := make([]*args, len(bs))
	for i, b := range bs {
		a, err := prepare(b)
		if err != nil {
			errs[i] = err
			continue
		}
		as[i] = a
		order = append(order, i)
	}
	if len(order) == 0 {
		return versions, errs
	}
	slices.SortStableFunc(order, func(x, y int) int { return strings.Compare(bs[x].ThreadID, bs[y].ThreadID) })
	if err := d.enter(ctx); err != nil {
		for _, i := range order {
			errs[i] = err
		}
		return versions, errs
	}
	defer d.leave()
	if d.sendGroup(ctx, bs, as, order, versions, errs) {
		return versions, errs
	}
	// The group as commit_group rolled back whole: a write of a member
	// failed. Sent again as one commit_batch3_try per member, each in a
	// subtransaction, the members are told apart. Members a serialization
	// failure or deadlock rolled back are sent again, never reported as a
	// conflict: the host would read the thread for nothing, and a run's
	// take would count it as refused.
	resendRolledBack(order, func(order []int) []rolledBackMember[int] {
		return d.sendMany(ctx, bs, as, order, versions, errs)
	}, func(i int, err error) { errs[i] = err }, func(i int, state, msg string) error {
		return fmt.Errorf("%w: pgstore: commit %s of thread %s rolled back on every try (%s, SQLSTATE %s); not applied",
			driver.ErrUnavailable, bs[i].CommitID, bs[i].ThreadID, msg, state)
	})
	return versions, errs
}

// groupArgs are the arguments of one commit_group call: the batches of a
// round, flattened (see migration4).
type groupArgs struct {
	threads, commitIDs                []string
	expected, versions, fences, owner []int64
	headers                           [][]byte
	firstSeqs, lastSeqs               []int64
	openBatch                         []int32
	openIDs                           []string
	runBatch                          []int32
	runIDs, runStates, runOwners      []string
	runSeqs, runAttempts              []int64
	runs                              [][]byte
	msgBatch                          []int32
	msgSeqs                           []int64
	msgIDs                            []string
	msgs                              [][]byte
	keyBatch                          []int32
	keys                              []string
	keyPayloads                       [][]byte
	stepBatch                         []int32
	stepRuns, stepIDs                 []string
	stepSeqs                          []int64
	steps                             [][]byte
}

func (g *groupArgs) add(a *args) {
	g.threads = append(g.threads, a.threadID)
	g.commitIDs = append(g.commitIDs, a.commitID)
	g.expected = append(g.expected, a.expected)
	g.versions = append(g.versions, a.version)
	g.fences = append(g.fences, a.fence)
	g.owner = append(g.owner, a.owner)
	g.headers = append(g.headers, a.header)
	g.firstSeqs = append(g.firstSeqs, a.firstSeq)
	g.lastSeqs = append(g.lastSeqs, a.lastSeq)
	b := int32(len(g.threads)) // 1-based, as PostgreSQL's arrays
	for _, id := range a.openRunIDs {
		g.openBatch, g.openIDs = append(g.openBatch, b), append(g.openIDs, id)
	}
	for i := range a.runIDs {
		g.runBatch = append(g.runBatch, b)
		g.runIDs, g.runStates, g.runOwners = append(g.runIDs, a.runIDs[i]), append(g.runStates, a.runStates[i]), append(g.runOwners, a.runOwners[i])
		g.runSeqs, g.runAttempts, g.runs = append(g.runSeqs, a.runSeqs[i]), append(g.runAttempts, a.runAttempts[i]), append(g.runs, a.runs[i])
	}
	for i := range a.msgIDs {
		g.msgBatch = append(g.msgBatch, b)
		g.msgSeqs, g.msgIDs, g.msgs = append(g.msgSeqs, a.msgSeqs[i]), append(g.msgIDs, a.msgIDs[i]), append(g.msgs, a.msgs[i])
	}
	for i := range a.keys {
		g.keyBatch = append(g.keyBatch, b)
		g.keys, g.keyPayloads = append(g.keys, a.keys[i]), append(g.keyPayloads, a.keyPayloads[i])
	}
	for i := range a.stepIDs {
		g.stepBatch = append(g.stepBatch, b)
		g.stepRuns, g.stepSeqs = append(g.stepRuns, a.stepRuns[i]), append(g.stepSeqs, a.stepSeqs[i])
		g.stepIDs, g.steps = append(g.stepIDs, a.stepIDs[i]), append(g.steps, a.steps[i])
	}
}

// rounds splits order (sorted by thread) into rounds of distinct threads:
// the first batch of each thread, then the second, and so on, each round
// still in thread order. A round's threads are locked by the rounds
// before it, or are new to the transaction in thread order: two groups
// never wait for each other in a cycle.
func rounds(bs []driver.Batch, order []int) [][]int {
	var out [][]int
	prev := 0
	for k, i := range order {
		r := 0
		if k > 0 && bs[order[k-1]].ThreadID == bs[i].ThreadID {
			r = prev + 1
		}
		prev = r
		if r == len(out) {
			out = append(out, nil)
		}
		out[r] = append(out[r], i)
	}
	return out
}

// sendGroup sends the batches bs[i], i in order, as one transaction of
// commit_group calls, one a round (see rounds), and sets versions[i] or
// errs[i] for each. It returns false, having set nothing, when the
// server refused the transaction with an error, which rolled it back
// whole: a member's write failed, and CommitMany sends the members again
// one by one, in subtransactions.
func (d *Driver) sendGroup(ctx context.Context, bs []driver.Batch, as []*args, order []int, versions []int64, errs []error) bool {
	rs := rounds(bs, order)
	gs := make([]groupArgs, len(rs))
	for r, round := range rs {
		for _, i := range round {
			gs[r].add(as[i])
		}
	}
	states := make([][]pgtype.Text, len(rs))
	messages := make([][]pgtype.Text, len(rs))
	sent := false
	err := d.retry(ctx, func(err error) bool { return !sent || rolledBack(err) }, func(ctx context.Context) error {
		sent = false
		conn, err := d.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		batch := &pgx.Batch{}
		for r := range gs {
			g := &gs[r]
			states[r], messages[r] = nil, nil
			batch.Queue(d.sql.commitGroup, g.threads, g.expected, g.versions, g.fences, g.owner,
				g.commitIDs, g.headers, g.firstSeqs, g.lastSeqs,
				g.openBatch, g.openIDs,
				g.runBatch, g.runIDs, g.runStates, g.runSeqs, g.runs, g.runOwners, g.runAttempts,
				g.msgBatch, g.msgSeqs, g.msgIDs, g.msgs,
				g.keyBatch, g.keys, g.keyPayloads,
				g.stepBatch, g.stepRuns, g.stepSeqs, g.stepIDs, g.steps).QueryRow(func(row pgx.Row) error {
				return row.Scan(&states[r], &messages[r])
			})
		}
		sent = true
		return conn.SendBatch(ctx, batch).Close()
	})
	var pe *pgconn.PgError
	if err != nil && sent && errors.As(err, &pe) && pe.Severity == "ERROR" && pe.Code != "40003" && !connectionLost(err) {
		return false
	}
	for r, round := range rs {
		for j, i := range round {
			switch {
			case err == nil && (j >= len(states[r]) || j >= len(messages[r])):
				errs[i] = fmt.Errorf("%w: pgstore: commit %s of thread %s: commit_group answered %d outcomes for %d batches; read the thread's LastCommitID",
					driver.ErrUnavailable, bs[i].CommitID, bs[i].ThreadID, len(states[r]), len(round))
			case err == nil && !states[r][j].Valid:
				versions[i] = bs[i].Thread.Version
			case err == nil:
				errs[i] = mapError(&pgconn.PgError{Code: states[r][j].String, Message: messages[r][j].String})
			case sent && !rolledBack(err) && (connectionLost(err) || ctx.Err() != nil):
				errs[i] = fmt.Errorf("%w: pgstore: commit %s of thread %s (in a group of %d): outcome unknown (%v); read the thread's LastCommitID",
					driver.ErrUnavailable, bs[i].CommitID, bs[i].ThreadID, len(order), err)
			default:
				errs[i] = mapOpError(ctx, err)
			}
		}
	}
	return true
}

// sendMany sends the batches bs[i], i in order, as one transaction and
// sets versions[i] or errs[i] for each, except those rolled back by a
// serialization failure or deadlock, which it returns.
func (d *Driver) sendMany(ctx context.Context, bs []driver.Batch, as []*args, order []int, versions []int64, errs []error) []rolledBackMember[int] {
	type outcome struct{ state, constraint, message, detail *string }
	outs := make([]outcome, len(bs))
	sent := false
	err := d.retry(ctx, func(err error) bool { return !sent || rolledBack(err) }, func(ctx context.Context) error {
		sent = false
		conn, err := d.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		batch := &pgx.Batch{}
		for _, i := range order {
			a := as[i]
			o := &outs[i]
			*o = outcome{}
			batch.Queue(d.sql.commitTry, a.threadID, a.expected, a.version, a.fence, a.owner,
				a.commitID, a.openRunIDs, a.header, a.firstSeq, a.lastSeq,
				a.runIDs, a.runStates, a.runSeqs, a.runs,
				a.msgSeqs, a.msgIDs, a.msgs,
				a.keys, a.keyPayloads, a.runOwners, a.runAttempts,
				a.stepRuns, a.stepSeqs, a.stepIDs, a.steps).QueryRow(func(row pgx.Row) error {
				return row.Scan(&o.state, &o.constraint, &o.message, &o.detail)
			})
		}
		sent = true
		// One pipeline, one implicit transaction: it commits when the last
		// statement succeeds, or not at all.
		return conn.SendBatch(ctx, batch).Close()
	})
	var again []rolledBackMember[int]
	for _, i := range order {
		switch {
		case err == nil && outs[i].state == nil:
			versions[i] = bs[i].Thread.Version
		case err == nil && retryableState(*outs[i].state):
			again = append(again, rolledBackMember[int]{i, *outs[i].state, deref(outs[i].message)})
		case err == nil:
			o := outs[i]
			errs[i] = mapError(&pgconn.PgError{Code: *o.state, ConstraintName: deref(o.constraint), Message: deref(o.message), Detail: deref(o.detail)})
		case sent && !rolledBack(err) && (connectionLost(err) || ctx.Err() != nil):
			errs[i] = fmt.Errorf("%w: pgstore: commit %s of thread %s (in a group of %d): outcome unknown (%v); read the thread's LastCommitID",
				driver.ErrUnavailable, bs[i].CommitID, bs[i].ThreadID, len(order), err)
		default:
			errs[i] = mapOpError(ctx, err)
		}
	}
	return again
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

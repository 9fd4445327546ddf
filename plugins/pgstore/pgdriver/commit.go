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
	"github.com/jackc/pgx/v5/pgxpool"

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
	threadID, commitID string
	expected, version  int64
	fence, owner       int64
}

// records are a batch's records in the form the tables store them (the
// payload columns): each its storepb encoding, in the batch's order.
type records struct {
	header                  []byte
	runs, msgs, keys, steps [][]byte
}

// check checks the shape of b: storedriver.ValidateBatch and the rules a
// batch must meet before the database sees it.
func check(b driver.Batch) error {
	if err := storedriver.ValidateBatch(b); err != nil {
		return err
	}
	switch {
	case b.Fence < 0:
		return fmt.Errorf("%w: negative fence %d", driver.ErrInvalidArgument, b.Fence)
	case b.Fence != 0 && b.Thread.Owner != b.Fence && b.Thread.Owner != 0:
		return fmt.Errorf("%w: a batch fenced by %d must make it the thread's owner or leave the thread unowned, not owned by %d", driver.ErrInvalidArgument, b.Fence, b.Thread.Owner)
	case b.Thread.Owner < 0:
		return fmt.Errorf("%w: negative owner %d", driver.ErrInvalidArgument, b.Thread.Owner)
	}
	for _, s := range [2]string{b.ThreadID, b.CommitID} {
		if !storable(s) {
			return fmt.Errorf("%w: %q: ids must be UTF-8 without NUL bytes", driver.ErrInvalidArgument, s)
		}
	}
	for _, s := range b.Thread.OpenRunIDs {
		if !storable(s) {
			return fmt.Errorf("%w: %q: ids must be UTF-8 without NUL bytes", driver.ErrInvalidArgument, s)
		}
	}
	for _, r := range b.Runs {
		if !storable(r.ID) || !storable(r.Owner) {
			return fmt.Errorf("%w: run id %q, owner %q: ids must be UTF-8 without NUL bytes", driver.ErrInvalidArgument, r.ID, r.Owner)
		}
	}
	for _, st := range b.Steps {
		if !storable(st.ID) || !storable(st.RunID) {
			return fmt.Errorf("%w: step id %q of run %q: ids must be UTF-8 without NUL bytes", driver.ErrInvalidArgument, st.ID, st.RunID)
		}
	}
	for i, m := range b.Messages {
		if !storable(m.ID) {
			return fmt.Errorf("%w: message id %q: ids must be UTF-8 without NUL bytes", driver.ErrInvalidArgument, m.ID)
		}
		if i > 0 && m.Seq <= b.Messages[i-1].Seq {
			return fmt.Errorf("%w: message %s seq %d is not after %d", driver.ErrInvalidArgument, m.ID, m.Seq, b.Messages[i-1].Seq)
		}
	}
	for _, k := range b.Idempotency {
		if !storable(k.Key) {
			return fmt.Errorf("%w: idempotency key %q: keys must be UTF-8 without NUL bytes", driver.ErrInvalidArgument, k.Key)
		}
	}
	return nil
}

// encode returns b's records in their stored form. Where wire, the
// records as the host sent them, has them, they are stored as they came:
// the tables hold each record's storepb encoding, which is what the host
// sent, and decoding them gives b's records (driverrpc.EncodedCommitter).
// Otherwise they are encoded here. The batch's size is checked against
// MaxBatchBytes.
func encode(b driver.Batch, wire *driverrpc.Encoded) (records, error) {
	if wire != nil && wire.Thread != nil && len(wire.Runs) == len(b.Runs) && len(wire.Messages) == len(b.Messages) &&
		len(wire.Idempotency) == len(b.Idempotency) && len(wire.Steps) == len(b.Steps) {
		rec := records{header: wire.Thread, runs: wire.Runs, msgs: wire.Messages, keys: wire.Idempotency, steps: wire.Steps}
		return rec, rec.checkSize()
	}
	var err error
	marshal := func(m proto.Message) []byte {
		if err != nil {
			return nil
		}
		var v []byte
		v, err = proto.Marshal(m)
		return v
	}
	rec := records{header: marshal(driverrpc.ThreadToProto(b.Thread)),
		runs: make([][]byte, len(b.Runs)), msgs: make([][]byte, len(b.Messages)),
		keys: make([][]byte, len(b.Idempotency)), steps: make([][]byte, len(b.Steps))}
	for i, r := range b.Runs {
		rec.runs[i] = marshal(driverrpc.RunToProto(r))
	}
	for i, m := range b.Messages {
		rec.msgs[i] = marshal(driverrpc.MessageToProto(m))
	}
	for i, k := range b.Idempotency {
		rec.keys[i] = marshal(driverrpc.IdempotencyToProto(k))
	}
	for i, st := range b.Steps {
		rec.steps[i] = marshal(driverrpc.StepToProto(st))
	}
	if err != nil {
		return records{}, fmt.Errorf("%w: encoding the batch: %v", driver.ErrInvalidArgument, err)
	}
	return rec, rec.checkSize()
}

// checkSize refuses records larger than MaxBatchBytes.
func (rec *records) checkSize() error {
	size := len(rec.header)
	for _, vs := range [4][][]byte{rec.runs, rec.msgs, rec.keys, rec.steps} {
		for _, v := range vs {
			size += len(v)
		}
	}
	if size > MaxBatchBytes {
		return fmt.Errorf("%w: batch of %d bytes exceeds the limit of %d bytes", driver.ErrTooLarge, size, MaxBatchBytes)
	}
	return nil
}

// prepare checks b and encodes its records (encode, with wire) as the
// arguments of commit_batch.
func prepare(b driver.Batch, wire *driverrpc.Encoded) (*args, error) {
	if err := check(b); err != nil {
		return nil, err
	}
	rec, err := encode(b, wire)
	if err != nil {
		return nil, err
	}
	return newArgs(b, rec), nil
}

// newArgs returns the arguments of commit_batch for b, a checked batch,
// and rec, its records.
func newArgs(b driver.Batch, rec records) *args {
	a := &args{threadID: b.ThreadID, commitID: b.CommitID, expected: b.ExpectedVersion, version: b.Thread.Version,
		fence: b.Fence, owner: b.Thread.Owner, openRunIDs: b.Thread.OpenRunIDs, header: rec.header,
		runs: rec.runs, msgs: rec.msgs, keyPayloads: rec.keys, steps: rec.steps}
	if a.openRunIDs == nil {
		a.openRunIDs = []string{}
	}
	n := len(b.Runs)
	a.runIDs, a.runStates, a.runSeqs = make([]string, n), make([]string, n), make([]int64, n)
	a.runOwners, a.runAttempts = make([]string, n), make([]int64, n)
	for i, r := range b.Runs {
		a.runIDs[i], a.runStates[i], a.runSeqs[i] = r.ID, string(r.State), r.Seq
		a.runOwners[i], a.runAttempts[i] = r.Owner, int64(r.Attempt)
	}
	n = len(b.Steps)
	a.stepRuns, a.stepIDs, a.stepSeqs = make([]string, n), make([]string, n), make([]int64, n)
	for i, st := range b.Steps {
		a.stepRuns[i], a.stepIDs[i], a.stepSeqs[i] = st.RunID, st.ID, st.Seq
	}
	n = len(b.Messages)
	a.msgIDs, a.msgSeqs = make([]string, n), make([]int64, n)
	for i, m := range b.Messages {
		a.msgIDs[i], a.msgSeqs[i] = m.ID, m.Seq
	}
	if n > 0 {
		a.firstSeq, a.lastSeq = b.Messages[0].Seq, b.Messages[n-1].Seq
	}
	a.keys = make([]string, len(b.Idempotency))
	for i, k := range b.Idempotency {
		a.keys[i] = k.Key
	}
	return a
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
	a, err := prepare(b, nil)
	if err != nil {
		return 0, err
	}
	if err := d.enter(ctx); err != nil {
		return 0, err
	}
	defer d.leave()
	sent, err := d.send(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		_, err := conn.Exec(ctx, d.sql.commit, a.threadID, a.expected, a.version, a.fence, a.owner,
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

var _ driverrpc.EncodedCommitter = (*Driver)(nil)

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
	return d.CommitManyEncoded(ctx, bs, nil)
}

// CommitManyEncoded implements driverrpc.EncodedCommitter: CommitMany,
// storing the records as the host sent them where enc has them (see
// encode), instead of encoding them again.
func (d *Driver) CommitManyEncoded(ctx context.Context, bs []driver.Batch, enc []*driverrpc.Encoded) ([]int64, []error) {
	versions := make([]int64, len(bs))
	errs := make([]error, len(bs))
	order := make([]int, 0, len(bs))
	recs := make([]records, len(bs))
	for i, b := range bs {
		var wire *driverrpc.Encoded
		if i < len(enc) {
			wire = enc[i]
		}
		if errs[i] = check(b); errs[i] != nil {
			continue
		}
		if recs[i], errs[i] = encode(b, wire); errs[i] != nil {
			continue
		}
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
	if d.sendGroup(ctx, bs, recs, order, versions, errs) {
		return versions, errs
	}
	// The group as commit_group rolled back whole: a write of a member
	// failed. Sent again as one commit_batch3_try per member, each in a
	// subtransaction, the members are told apart. Members a serialization
	// failure or deadlock rolled back are sent again, never reported as a
	// conflict: the host would read the thread for nothing, and a run's
	// take would count it as refused.
	as := make([]*args, len(bs))
	for _, i := range order {
		as[i] = newArgs(bs[i], recs[i])
	}
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

// newGroupArgs returns the arguments of commit_group for the batches
// bs[i], i in round, with their records recs[i]. Every array is allocated
// once, at its length.
func newGroupArgs(bs []driver.Batch, recs []records, round []int) *groupArgs {
	var open, runs, msgs, keys, steps int
	for _, i := range round {
		b := &bs[i]
		open, runs, msgs = open+len(b.Thread.OpenRunIDs), runs+len(b.Runs), msgs+len(b.Messages)
		keys, steps = keys+len(b.Idempotency), steps+len(b.Steps)
	}
	n := len(round)
	g := &groupArgs{
		threads: make([]string, n), commitIDs: make([]string, n),
		expected: make([]int64, n), versions: make([]int64, n), fences: make([]int64, n), owner: make([]int64, n),
		headers: make([][]byte, n), firstSeqs: make([]int64, n), lastSeqs: make([]int64, n),
		openBatch: make([]int32, 0, open), openIDs: make([]string, 0, open),
		runBatch: make([]int32, 0, runs), runIDs: make([]string, 0, runs), runStates: make([]string, 0, runs),
		runOwners: make([]string, 0, runs), runSeqs: make([]int64, 0, runs), runAttempts: make([]int64, 0, runs),
		runs:     make([][]byte, 0, runs),
		msgBatch: make([]int32, 0, msgs), msgSeqs: make([]int64, 0, msgs), msgIDs: make([]string, 0, msgs),
		msgs:     make([][]byte, 0, msgs),
		keyBatch: make([]int32, 0, keys), keys: make([]string, 0, keys), keyPayloads: make([][]byte, 0, keys),
		stepBatch: make([]int32, 0, steps), stepRuns: make([]string, 0, steps), stepIDs: make([]string, 0, steps),
		stepSeqs: make([]int64, 0, steps), steps: make([][]byte, 0, steps),
	}
	for j, i := range round {
		b, rec := &bs[i], &recs[i]
		g.threads[j], g.commitIDs[j] = b.ThreadID, b.CommitID
		g.expected[j], g.versions[j], g.fences[j], g.owner[j] = b.ExpectedVersion, b.Thread.Version, b.Fence, b.Thread.Owner
		g.headers[j] = rec.header
		if m := len(b.Messages); m > 0 {
			g.firstSeqs[j], g.lastSeqs[j] = b.Messages[0].Seq, b.Messages[m-1].Seq
		}
		k := int32(j + 1) // 1-based, as PostgreSQL's arrays
		for _, id := range b.Thread.OpenRunIDs {
			g.openBatch, g.openIDs = append(g.openBatch, k), append(g.openIDs, id)
		}
		for x, r := range b.Runs {
			g.runBatch = append(g.runBatch, k)
			g.runIDs, g.runStates, g.runOwners = append(g.runIDs, r.ID), append(g.runStates, string(r.State)), append(g.runOwners, r.Owner)
			g.runSeqs, g.runAttempts, g.runs = append(g.runSeqs, r.Seq), append(g.runAttempts, int64(r.Attempt)), append(g.runs, rec.runs[x])
		}
		for x, m := range b.Messages {
			g.msgBatch = append(g.msgBatch, k)
			g.msgSeqs, g.msgIDs, g.msgs = append(g.msgSeqs, m.Seq), append(g.msgIDs, m.ID), append(g.msgs, rec.msgs[x])
		}
		for x, key := range b.Idempotency {
			g.keyBatch = append(g.keyBatch, k)
			g.keys, g.keyPayloads = append(g.keys, key.Key), append(g.keyPayloads, rec.keys[x])
		}
		for x, st := range b.Steps {
			g.stepBatch = append(g.stepBatch, k)
			g.stepRuns, g.stepSeqs = append(g.stepRuns, st.RunID), append(g.stepSeqs, st.Seq)
			g.stepIDs, g.steps = append(g.stepIDs, st.ID), append(g.steps, rec.steps[x])
		}
	}
	return g
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
func (d *Driver) sendGroup(ctx context.Context, bs []driver.Batch, recs []records, order []int, versions []int64, errs []error) bool {
	rs := rounds(bs, order)
	gs := make([]*groupArgs, len(rs))
	for r, round := range rs {
		gs[r] = newGroupArgs(bs, recs, round)
	}
	states := make([][]pgtype.Text, len(rs))
	messages := make([][]pgtype.Text, len(rs))
	sent, err := d.sendBatch(ctx, func(batch *pgx.Batch) {
		for r, g := range gs {
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
			default:
				errs[i] = memberError(ctx, bs[i], len(order), sent, err)
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
	sent, err := d.sendBatch(ctx, func(batch *pgx.Batch) {
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
		default:
			errs[i] = memberError(ctx, bs[i], len(order), sent, err)
		}
	}
	return again
}

// send acquires a connection and calls fn with it, to send one
// transaction. It tries again while nothing was sent or the failure proves
// the transaction rolled back (see rolledBack). sent says whether the last
// try got as far as fn, err is its error.
func (d *Driver) send(ctx context.Context, fn func(context.Context, *pgxpool.Conn) error) (sent bool, err error) {
	err = d.retry(ctx, func(err error) bool { return !sent || rolledBack(err) }, func(ctx context.Context) error {
		sent = false
		conn, err := d.pool.Acquire(ctx)
		if err != nil {
			return err // nothing was sent
		}
		defer conn.Release()
		sent = true
		return fn(ctx, conn)
	})
	return sent, err
}

// sendBatch sends the statements queue puts in a batch as one pipeline on
// one connection, and so one implicit transaction: it commits when the
// last statement succeeds, or not at all. queue is called on every try
// (see send), on a new batch, and must reset whatever its statements'
// callbacks set.
func (d *Driver) sendBatch(ctx context.Context, queue func(*pgx.Batch)) (sent bool, err error) {
	return d.send(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		batch := &pgx.Batch{}
		queue(batch)
		return conn.SendBatch(ctx, batch).Close()
	})
}

// memberError is the error of batch b, one of n sent together, when
// sendBatch failed with err: driver.ErrUnavailable when the batch was sent
// and the failure leaves its outcome unknown (the host settles it through
// LastCommitID), else err mapped as any operation's.
func memberError(ctx context.Context, b driver.Batch, n int, sent bool, err error) error {
	if sent && !rolledBack(err) && (connectionLost(err) || ctx.Err() != nil) {
		return fmt.Errorf("%w: pgstore: commit %s of thread %s (in a group of %d): outcome unknown (%v); read the thread's LastCommitID",
			driver.ErrUnavailable, b.CommitID, b.ThreadID, n, err)
	}
	return mapOpError(ctx, err)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

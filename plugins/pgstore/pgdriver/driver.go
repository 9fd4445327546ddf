package pgdriver

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/abi/storepb"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// Name and Version identify the driver in its Info.
const (
	Name    = "pgstore"
	Version = "1.0.0"
)

// RetryBudget bounds how long a read (or a commit that provably did not
// reach the database) is retried after transient failures.
var RetryBudget = 3 * time.Second

// Driver is a store driver on a PostgreSQL database. It is safe for
// concurrent use.
type Driver struct {
	cfg  Config
	pool *pgxpool.Pool
	s    string // the schema's quoted name
	sql  statements

	// mu guards closed. Calls hold it shared for their whole length, so
	// that Close waits for them.
	mu     sync.RWMutex
	closed bool
	// wmu guards watchers (taken inside mu, or alone: a lease acquired
	// ends the watches without waiting for the calls in progress).
	wmu      sync.Mutex
	watchers map[*watcher]struct{}

	// held are the epochs of the leases acquired through this driver: its
	// watches leave out notices addressed to other epochs (lease.go).
	held atomic.Pointer[map[int64]bool]

	stepq     chan *stepReq // to the step committers (steps.go)
	stepsDone sync.WaitGroup
}

var (
	_ driver.Driver = (*Driver)(nil)
	_ driver.Leaser = (*Driver)(nil)
)

// statements are the driver's SQL, with the schema filled in. pgx prepares
// each on every connection the first time it runs there, and runs the
// prepared statement afterwards.
type statements struct {
	commit, commitTry, commitGroup, loadThread, getRuns        string
	getIdem, history                                           string
	listRuns, stepsTry, readSteps, threads                     string
	acquire, gcLeases, renew, release, leases, notify, channel string
	// epochChannel is the start of a lease's own notice channel (the
	// epoch follows: lease.go).
	epochChannel string
}

// params returns "$1, $2, ..., $n".
func params(n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprintf("$%d", i+1)
	}
	return strings.Join(ps, ", ")
}

func newStatements(s, schema string) statements {
	return statements{
		commit:      "SELECT " + s + ".commit_batch3(" + params(25) + ")",
		commitTry:   "SELECT o_state, o_constraint, o_message, o_detail FROM " + s + ".commit_batch3_try(" + params(25) + ")",
		commitGroup: "SELECT o_states, o_messages FROM " + s + ".commit_group(" + params(30) + ")",
		stepsTry:    "SELECT o_state, o_constraint, o_message, o_detail FROM " + s + ".commit_steps_try(" + params(8) + ")",
		readSteps:   "SELECT payload FROM " + s + ".steps WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
		threads:     "SELECT payload FROM " + s + ".threads WHERE id > $1 ORDER BY id LIMIT $2",
		loadThread: "SELECT t.payload, o.id, r.payload FROM " + s + ".threads t " +
			"LEFT JOIN LATERAL unnest(t.open_run_ids) WITH ORDINALITY AS o(id, n) ON true " +
			"LEFT JOIN " + s + ".runs r ON r.id = o.id " +
			"WHERE t.id = $1 ORDER BY o.n",
		getRuns:  "SELECT id, payload FROM " + s + ".runs WHERE id = ANY($1)",
		getIdem:  "SELECT payload FROM " + s + ".idempotency WHERE thread_id = $1 AND key = $2",
		history:  "SELECT payload FROM " + s + ".messages WHERE thread_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
		listRuns: "SELECT payload FROM " + s + ".runs WHERE state = $1 AND id > $2 ORDER BY id LIMIT $3",
		acquire: "WITH c AS (SELECT clock_timestamp() AS now) " +
			"INSERT INTO " + s + ".leases (epoch, holder, acquired_at, renewed_at, expires_at) " +
			"SELECT nextval('" + s + ".lease_epochs'), $1, c.now, c.now, c.now + $2 * interval '1 microsecond' FROM c " +
			"RETURNING epoch, holder, expires_at, renewed_at",
		gcLeases: "DELETE FROM " + s + ".leases WHERE expires_at < clock_timestamp() - interval '1 day'",
		renew:    "SELECT o_holder, o_expires, o_now FROM " + s + ".renew_lease($1, $2)",
		release:  "UPDATE " + s + ".leases SET released = true, expires_at = least(expires_at, clock_timestamp()) WHERE epoch = $1",
		leases: "SELECT l.epoch, l.holder, l.expires_at, c.now FROM " + s + ".leases l, (SELECT clock_timestamp() AS now) c " +
			"WHERE l.expires_at > c.now ORDER BY l.epoch",
		// Every notice goes on the schema's channel, and on the channel of
		// the lease it is for: Owner's, or, for every host (Owner 0), each
		// live lease's but the sender's own ($5).
		notify: "SELECT pg_notify(c.name, p.p) FROM unnest($2::text[]) WITH ORDINALITY AS p(p, n) CROSS JOIN (" +
			"SELECT $1::text AS name " +
			"UNION ALL SELECT $3::text || $4::bigint WHERE $4::bigint <> 0 " +
			"UNION ALL SELECT $3::text || l.epoch FROM " + s + ".leases l WHERE $4::bigint = 0 AND l.expires_at > clock_timestamp() AND l.epoch <> ALL($5::bigint[])" +
			") AS c ORDER BY c.name, p.n",
		channel:      schema + "_notices",
		epochChannel: epochChannelPrefix(schema),
	}
}

// epochChannelPrefix is what a lease's notice channel starts with, the
// epoch following: within PostgreSQL's 63 bytes for any epoch, and
// distinct for distinct schemas.
func epochChannelPrefix(schema string) string {
	if len(schema) > 40 {
		h := fnv.New32a()
		h.Write([]byte(schema))
		schema = fmt.Sprintf("%s%08x", schema[:32], h.Sum32())
	}
	return schema + "_n"
}

// Open connects to the database of cfg and brings its schema up to date.
// It fails with driver.ErrInvalidArgument for a bad configuration (a bad
// URL, a missing database, refused credentials) and driver.ErrUnavailable
// for a server that cannot be reached.
func Open(ctx context.Context, cfg Config) (*Driver, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	pc, err := cfg.poolConfig()
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("%w: pgstore config url: %s", driver.ErrInvalidArgument, redact(err.Error(), cfg.URL))
	}
	// Connect once, to tell the configuration's errors apart.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("pgstore: connecting to %s: %w", where(pc.ConnConfig), ctx.Err())
		}
		return nil, connectError(pc.ConnConfig, cfg.URL, err)
	}
	conn.Release()
	s := pgx.Identifier{cfg.Schema}.Sanitize()
	if err := migrate(ctx, pool, cfg.Schema); err != nil {
		pool.Close()
		var pe interface{ SQLState() string }
		if errors.As(err, &pe) && pe.SQLState() == "42501" {
			return nil, fmt.Errorf("%w: %v (the user needs CREATE on the database, or the schema made for it)", driver.ErrInvalidArgument, err)
		}
		if errors.Is(err, driver.ErrInvalidArgument) {
			return nil, err
		}
		if transient(err) {
			return nil, fmt.Errorf("%w: %v", driver.ErrUnavailable, err)
		}
		return nil, err
	}
	d := &Driver{cfg: cfg, pool: pool, s: s, sql: newStatements(s, cfg.Schema), watchers: map[*watcher]struct{}{}}
	d.startStepCommitters()
	return d, nil
}

// Info implements driver.Driver.
func (d *Driver) Info(ctx context.Context) (driver.Info, error) {
	return driver.Info{ProtocolVersion: driver.ProtocolVersion, Name: Name, Version: Version, Durable: true, Leases: true}, nil
}

// Schema is the schema the driver's tables live in.
func (d *Driver) Schema() string { return d.cfg.Schema }

// enter holds the driver open for a call; leave ends the call.
func (d *Driver) enter(ctx context.Context) error {
	d.mu.RLock()
	if d.closed {
		d.mu.RUnlock()
		return driver.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		d.mu.RUnlock()
		return err
	}
	return nil
}

func (d *Driver) leave() { d.mu.RUnlock() }

// retry runs op until it succeeds, fails for good, or transient failures
// have lasted RetryBudget, with exponential backoff and jitter between
// tries. retryable says which failures to try again. A connection that
// failed makes the pool drop its idle connections (the server may have
// ended them all: a restart, an administrator).
func (d *Driver) retry(ctx context.Context, retryable func(error) bool, op func(ctx context.Context) error) error {
	deadline := time.Now().Add(RetryBudget)
	wait := 5 * time.Millisecond
	for {
		err := op(ctx)
		if err == nil || !retryable(err) {
			return err
		}
		if connectionLost(err) {
			d.pool.Reset()
		}
		if ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// read runs a read, retrying transient failures, and maps its error.
func (d *Driver) read(ctx context.Context, op func(ctx context.Context) error) error {
	if err := d.enter(ctx); err != nil {
		return err
	}
	defer d.leave()
	return mapOpError(ctx, d.retry(ctx, transient, op))
}

// mapOpError maps the error of an operation; a driver sentinel the
// operation returned itself stays as it is.
func mapOpError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	for _, s := range []error{driver.ErrNotFound, driver.ErrInvalidArgument, driver.ErrVersionConflict, driver.ErrFenced,
		driver.ErrTooLarge, driver.ErrUnavailable, driver.ErrClosed} {
		if errors.Is(err, s) {
			return err
		}
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return ctx.Err()
	}
	return mapError(err)
}

func unmarshal(b []byte, m proto.Message) error {
	if err := proto.Unmarshal(b, m); err != nil {
		return fmt.Errorf("pgstore: a stored record does not decode: %w", err)
	}
	return nil
}

// LoadThread implements driver.Driver: one statement, so the header and the
// runs it lists are one snapshot.
func (d *Driver) LoadThread(ctx context.Context, threadID string) (driver.ThreadSnapshot, error) {
	if threadID == "" {
		return driver.ThreadSnapshot{}, fmt.Errorf("%w: empty thread id", driver.ErrInvalidArgument)
	}
	var snap driver.ThreadSnapshot
	err := d.read(ctx, func(ctx context.Context) error {
		snap = driver.ThreadSnapshot{Thread: record.Thread{ID: threadID}}
		rows, err := d.pool.Query(ctx, d.sql.loadThread, threadID)
		if err != nil {
			return err
		}
		defer rows.Close()
		first := true
		for rows.Next() {
			var hdr, run []byte
			var runID *string
			if err := rows.Scan(&hdr, &runID, &run); err != nil {
				return err
			}
			if first {
				var t storepb.Thread
				if err := unmarshal(hdr, &t); err != nil {
					return err
				}
				snap.Thread = driverrpc.ThreadFromProto(&t)
				first = false
			}
			if runID == nil {
				continue
			}
			if run == nil {
				return fmt.Errorf("pgstore: thread %s lists open run %s, which does not exist", threadID, *runID)
			}
			var r storepb.Run
			if err := unmarshal(run, &r); err != nil {
				return err
			}
			snap.Runs = append(snap.Runs, driverrpc.RunFromProto(&r))
		}
		return rows.Err()
	})
	if err != nil {
		return driver.ThreadSnapshot{}, err
	}
	return snap, nil
}

// GetRuns implements driver.Driver.
func (d *Driver) GetRuns(ctx context.Context, ids []string) ([]record.Run, error) {
	found := make(map[string]record.Run, len(ids))
	err := d.read(ctx, func(ctx context.Context) error {
		clear(found)
		rows, err := d.pool.Query(ctx, d.sql.getRuns, validIDs(ids))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var b []byte
			if err := rows.Scan(&id, &b); err != nil {
				return err
			}
			var r storepb.Run
			if err := unmarshal(b, &r); err != nil {
				return err
			}
			found[id] = driverrpc.RunFromProto(&r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	out := make([]record.Run, 0, len(ids))
	for _, id := range ids {
		r, ok := found[id]
		if !ok {
			return nil, fmt.Errorf("%w: run %q", driver.ErrNotFound, id)
		}
		out = append(out, r)
	}
	return out, nil
}

// validIDs drops the ids no record can have (PostgreSQL text holds no NUL
// byte and only UTF-8), so that asking for one is ErrNotFound, not an error
// of the database.
func validIDs(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if storable(id) {
			out = append(out, id)
		}
	}
	return out
}

// storable reports whether s can be stored as PostgreSQL text.
func storable(s string) bool {
	return !strings.ContainsRune(s, 0) && strings.ToValidUTF8(s, "\uFFFD") == s
}

// GetIdempotency implements driver.Driver.
func (d *Driver) GetIdempotency(ctx context.Context, threadID, key string) (record.Idempotency, error) {
	if threadID == "" || key == "" {
		return record.Idempotency{}, fmt.Errorf("%w: idempotency lookup needs a thread and a key", driver.ErrInvalidArgument)
	}
	notFound := fmt.Errorf("%w: idempotency key %q on thread %s", driver.ErrNotFound, key, threadID)
	if !storable(threadID) || !storable(key) {
		return record.Idempotency{}, notFound
	}
	var k storepb.Idempotency
	err := d.read(ctx, func(ctx context.Context) error {
		var b []byte
		err := d.pool.QueryRow(ctx, d.sql.getIdem, threadID, key).Scan(&b)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound
		}
		if err != nil {
			return err
		}
		return unmarshal(b, &k)
	})
	if err != nil {
		return record.Idempotency{}, err
	}
	return driverrpc.IdempotencyFromProto(&k), nil
}

// ReadHistory implements driver.Driver.
func (d *Driver) ReadHistory(ctx context.Context, threadID string, afterSeq int64, limit int) ([]record.Message, error) {
	if threadID == "" {
		return nil, fmt.Errorf("%w: empty thread id", driver.ErrInvalidArgument)
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit %d must be positive", driver.ErrInvalidArgument, limit)
	}
	out := []record.Message{}
	if !storable(threadID) || afterSeq == math.MaxInt64 {
		return out, d.read(ctx, func(context.Context) error { return nil })
	}
	return readPayloads(ctx, d, func(b []byte) (record.Message, error) {
		var m storepb.Message
		err := unmarshal(b, &m)
		return driverrpc.MessageFromProto(&m), err
	}, d.sql.history, threadID, afterSeq, limit)
}

// ListRuns implements driver.Driver.
func (d *Driver) ListRuns(ctx context.Context, state record.RunState, after string, limit int) ([]record.Run, error) {
	if err := storedriver.ValidateListRuns(state, limit); err != nil {
		return nil, err
	}
	// Stored ids hold no NUL byte, so the ids after a cursor with one are
	// those after its part before the NUL (that part itself sorts before
	// the cursor).
	if i := strings.IndexByte(after, 0); i >= 0 {
		after = after[:i]
	}
	after = strings.ToValidUTF8(after, "")
	return readPayloads(ctx, d, func(b []byte) (record.Run, error) {
		var r storepb.Run
		err := unmarshal(b, &r)
		return driverrpc.RunFromProto(&r), err
	}, d.sql.listRuns, string(state), after, limit)
}

// readPayloads runs query, whose rows are one payload each, as a read
// (retried while that is safe) and decodes every payload. The result is
// never nil.
func readPayloads[T any](ctx context.Context, d *Driver, decode func([]byte) (T, error), query string, args ...any) ([]T, error) {
	out := []T{}
	err := d.read(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := d.pool.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var b []byte
			if err := rows.Scan(&b); err != nil {
				return err
			}
			v, err := decode(b)
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Close implements driver.Driver: it waits for the calls in progress, ends
// the watches and closes the pool. Closing twice is not an error.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.wmu.Lock()
	ws := d.watchers
	d.watchers = nil
	d.wmu.Unlock()
	d.mu.Unlock()
	for w := range ws {
		w.stop()
	}
	for w := range ws {
		<-w.done
	}
	close(d.stepq) // no call is in progress: none sends
	d.stepsDone.Wait()
	d.pool.Close()
	return nil
}

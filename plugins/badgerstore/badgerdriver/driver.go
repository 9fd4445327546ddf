package badgerdriver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/abi/storepb"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// Name and Version identify the driver in its Info.
const (
	Name    = "badgerstore"
	Version = "1.0.0"
)

// Driver is a store driver on a badger database. It is safe for concurrent
// use.
type Driver struct {
	cfg Config
	db  *badger.DB
	log hclog.Logger

	// mu guards closed. Reads hold it shared for their whole length, so that
	// Close waits for them; Commit holds it shared while it queues.
	mu     sync.RWMutex
	closed bool

	lock  *os.File    // the data directory's process lock; nil in memory
	space *spaceGuard // refuses commits on a full disk; nil in memory

	reqs      chan []*commitReq     // to the committer, a caller's batches together
	heads     map[string]threadHead // the committer's cache of thread heads (its goroutine only)
	maxHeads  int                   // bounds heads and stepHeads: maxHeads, or less in tests
	stepHeads map[string]stepHead   // the committer's cache of active runs' step heads (its goroutine only)
	txnSteps  map[string]stepHead   // step heads the committer's current transaction wrote
	msgIDs    *idFloor              // proves new message ids unused (its goroutine only)
	runIDs    *idFloor              // proves new run ids unused (its goroutine only)
	stepIDs   *idFloor              // proves new step ids unused (its goroutine only)
	committed chan struct{}         // closed when the committer has ended
	stopGC    chan struct{}
	gcDone    chan struct{}
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.ManyCommitter = (*Driver)(nil)

	_ driverrpc.EncodedCommitter = (*Driver)(nil)
)

// Open opens (creating if needed) the database in cfg.Dir.
func Open(cfg Config) (*Driver, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: Name, Level: hclog.Warn})
	}
	opts := badger.DefaultOptions(cfg.Dir).
		WithInMemory(cfg.InMemory).
		WithSyncWrites(cfg.SyncWrites).
		WithLogger(badgerLogger{cfg.Logger}).
		WithNumCompactors(2).
		WithBlockCacheSize(32 << 20).
		WithDetectConflicts(false) // the committer is the only writer (ADR 0145)
	var lock *os.File
	if cfg.InMemory {
		opts.Dir, opts.ValueDir = "", ""
	} else {
		var err error
		if lock, err = lockDir(cfg.Dir, lockWait); err != nil {
			return nil, err
		}
		if err := removeEmptyMemtables(cfg.Dir, cfg.Logger); err != nil {
			lock.Close()
			return nil, fmt.Errorf("%w: badgerstore: opening %s: %v", driver.ErrInvalidArgument, cfg.Dir, err)
		}
	}
	db, err := badger.Open(opts)
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		return nil, fmt.Errorf("%w: badgerstore: opening %s: %v", driver.ErrInvalidArgument, cfg.Dir, err)
	}
	if err := checkFormat(db, cfg.Logger); err != nil {
		db.Close()
		if lock != nil {
			lock.Close()
		}
		return nil, fmt.Errorf("badgerstore: opening %s: %w", cfg.Dir, err)
	}
	floors := make([]*idFloor, 0, 3)
	for _, table := range []byte{tMsgID, tRun, tStepID} {
		last, err := lastID(db, table)
		if err != nil {
			db.Close()
			if lock != nil {
				lock.Close()
			}
			return nil, fmt.Errorf("badgerstore: opening %s: %w", cfg.Dir, err)
		}
		floors = append(floors, newIDFloor(last, maxAbove))
	}
	d := &Driver{
		cfg: cfg, db: db, log: cfg.Logger, lock: lock,
		msgIDs: floors[0], runIDs: floors[1], stepIDs: floors[2],
		reqs:      make(chan []*commitReq, cfg.MaxGroup),
		heads:     make(map[string]threadHead),
		stepHeads: make(map[string]stepHead),
		txnSteps:  make(map[string]stepHead),
		maxHeads:  maxHeads,
		committed: make(chan struct{}),
		stopGC:    make(chan struct{}),
		gcDone:    make(chan struct{}),
	}
	if !cfg.InMemory {
		d.space = newSpaceGuard(cfg.Dir)
	}
	go d.committer()
	go d.gcLoop()
	return d, nil
}

// Info implements driver.Driver.
func (d *Driver) Info(ctx context.Context) (driver.Info, error) {
	return driver.Info{ProtocolVersion: driver.ProtocolVersion, Name: Name, Version: Version,
		Durable: d.cfg.SyncWrites && !d.cfg.InMemory}, nil
}

// view runs fn in a read transaction, unless the driver is closed.
func (d *Driver) view(ctx context.Context, fn func(txn *badger.Txn) error) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return driver.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.db.View(fn)
}

// getProto reads key into m. It returns badger.ErrKeyNotFound as is.
func getProto(txn *badger.Txn, key []byte, m proto.Message) error {
	item, err := txn.Get(key)
	if err != nil {
		return err
	}
	return item.Value(func(v []byte) error { return proto.Unmarshal(v, m) })
}

// getThread reads a thread header and the last seq of its history.
func getThread(txn *badger.Txn, id string) (t *storepb.Thread, lastSeq int64, err error) {
	item, err := txn.Get(threadKey(id))
	if err != nil {
		return nil, 0, err
	}
	t = &storepb.Thread{}
	err = item.Value(func(v []byte) error {
		if len(v) < 8 {
			return fmt.Errorf("badgerstore: thread %s: short header", id)
		}
		lastSeq = int64(binary.BigEndian.Uint64(v))
		return proto.Unmarshal(v[8:], t)
	})
	return t, lastSeq, err
}

func getRun(txn *badger.Txn, id string) (*storepb.Run, error) {
	r := &storepb.Run{}
	if err := getProto(txn, runKey(id), r); err != nil {
		return nil, err
	}
	return r, nil
}

// LoadThread implements driver.Driver.
func (d *Driver) LoadThread(ctx context.Context, threadID string) (driver.ThreadSnapshot, error) {
	if threadID == "" {
		return driver.ThreadSnapshot{}, fmt.Errorf("%w: empty thread id", driver.ErrInvalidArgument)
	}
	var snap driver.ThreadSnapshot
	err := d.view(ctx, func(txn *badger.Txn) error {
		t, _, err := getThread(txn, threadID)
		if errors.Is(err, badger.ErrKeyNotFound) {
			snap.Thread = record.Thread{ID: threadID}
			return nil
		}
		if err != nil {
			return err
		}
		snap.Thread = driverrpc.ThreadFromProto(t)
		for _, id := range t.OpenRunIds {
			r, err := getRun(txn, id)
			if err != nil {
				return fmt.Errorf("badgerstore: thread %s lists open run %s: %w", threadID, id, err)
			}
			snap.Runs = append(snap.Runs, driverrpc.RunFromProto(r))
		}
		return nil
	})
	if err != nil {
		return driver.ThreadSnapshot{}, err
	}
	return snap, nil
}

// GetRuns implements driver.Driver.
func (d *Driver) GetRuns(ctx context.Context, ids []string) ([]record.Run, error) {
	out := make([]record.Run, 0, len(ids))
	err := d.view(ctx, func(txn *badger.Txn) error {
		for _, id := range ids {
			r, err := getRun(txn, id)
			if errors.Is(err, badger.ErrKeyNotFound) || id == "" {
				return fmt.Errorf("%w: run %q", driver.ErrNotFound, id)
			}
			if err != nil {
				return err
			}
			out = append(out, driverrpc.RunFromProto(r))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetIdempotency implements driver.Driver.
func (d *Driver) GetIdempotency(ctx context.Context, threadID, key string) (record.Idempotency, error) {
	if threadID == "" || key == "" {
		return record.Idempotency{}, fmt.Errorf("%w: idempotency lookup needs a thread and a key", driver.ErrInvalidArgument)
	}
	var k storepb.Idempotency
	err := d.view(ctx, func(txn *badger.Txn) error {
		err := getProto(txn, idemKey(threadID, key), &k)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("%w: idempotency key %q on thread %s", driver.ErrNotFound, key, threadID)
		}
		return err
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
	return readLog(ctx, d, threadPrefix(tHistory, threadID), func(seq int64) []byte { return historyKey(threadID, seq) },
		afterSeq, limit, driverrpc.MessageFromProto)
}

// readLog reads up to limit records of one log kept by seq (a thread's
// history, a run's steps) with seq > afterSeq, in seq order, under prefix;
// key gives a record's key by seq.
func readLog[M any, PM interface {
	*M
	proto.Message
}, R any](ctx context.Context, d *Driver, prefix []byte, key func(int64) []byte, afterSeq int64, limit int, conv func(PM) R) ([]R, error) {
	out := []R{}
	if afterSeq == math.MaxInt64 {
		return out, d.view(ctx, func(*badger.Txn) error { return nil })
	}
	afterSeq = max(afterSeq, 0)
	err := d.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: min(limit, 100), Prefix: prefix})
		defer it.Close()
		for it.Seek(key(afterSeq + 1)); it.Valid() && len(out) < limit; it.Next() {
			var m M
			if err := it.Item().Value(func(v []byte) error { return proto.Unmarshal(v, PM(&m)) }); err != nil {
				return err
			}
			out = append(out, conv(PM(&m)))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListRuns implements driver.Driver.
func (d *Driver) ListRuns(ctx context.Context, state record.RunState, after string, limit int) ([]record.Run, error) {
	if err := storedriver.ValidateListRuns(state, limit); err != nil {
		return nil, err
	}
	out := []record.Run{}
	prefix := statePrefix(state)
	start := stateKey(state, after)
	err := d.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(start); it.Valid() && len(out) < limit; it.Next() {
			key := it.Item().Key()
			if bytes.Equal(key, start) {
				continue
			}
			id := string(key[len(prefix):])
			r, err := getRun(txn, id)
			if err != nil {
				return fmt.Errorf("badgerstore: run %s indexed as %s: %w", id, state, err)
			}
			out = append(out, driverrpc.RunFromProto(r))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Close implements driver.Driver: it waits for queued commits, stops the
// value log GC and closes the database. Closing twice is not an error.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.reqs)
	d.mu.Unlock()
	<-d.committed
	close(d.stopGC)
	<-d.gcDone
	err := d.db.Close()
	if d.lock != nil {
		d.lock.Close() // releases the process lock
	}
	if err != nil {
		return fmt.Errorf("badgerstore: closing: %w", err)
	}
	return nil
}

// lockWait is how long Open waits for a previous process to release the
// data directory.
const lockWait = 30 * time.Second

// gcLoop runs the value log GC every GCInterval until Close.
func (d *Driver) gcLoop() {
	defer close(d.gcDone)
	if d.cfg.GCInterval <= 0 || d.cfg.InMemory {
		<-d.stopGC
		return
	}
	tick := time.NewTicker(d.cfg.GCInterval)
	defer tick.Stop()
	for {
		select {
		case <-d.stopGC:
			return
		case <-tick.C:
			for n := 0; n < 16; n++ { // rewrite files while there is garbage
				err := d.db.RunValueLogGC(d.cfg.GCDiscardRatio)
				if err != nil {
					if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
						d.log.Warn("value log GC", "error", err)
					}
					break
				}
			}
		}
	}
}

// badgerLogger routes badger's log to an hclog logger, keeping warnings
// and errors; badger's info and debug lines are dropped.
type badgerLogger struct{ l hclog.Logger }

func (b badgerLogger) Errorf(f string, args ...any)   { b.l.Error(fmt.Sprintf(f, args...)) }
func (b badgerLogger) Warningf(f string, args ...any) { b.l.Warn(fmt.Sprintf(f, args...)) }
func (b badgerLogger) Infof(string, ...any)           {}
func (b badgerLogger) Debugf(string, ...any)          {}

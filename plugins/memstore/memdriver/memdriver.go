// Package memdriver is the in-memory store driver: the reference
// implementation of the driver contract, used by the host's tests and served
// as a subprocess by the memstore plugin.
//
// It is not durable: everything is lost when the process ends.
package memdriver

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// Name and Version identify the driver in its Info.
const (
	Name    = "memstore"
	Version = "1.0.0"
)

type idemKey struct{ thread, key string }

// Driver keeps every record in memory behind one lock.
type Driver struct {
	mu       sync.RWMutex
	closed   bool
	threads  map[string]record.Thread
	runs     map[string]record.Run
	byState  map[record.RunState][]string // sorted run ids
	history  map[string][]record.Message  // per thread, in Seq order
	msgIDs   map[string]bool
	idem     map[idemKey]record.Idempotency
	steps    map[string][]record.Step // per run, in Seq order
	stepIDs  map[string]bool
	commitFn func(driver.Batch) // test hook, see SetCommitHook
	lease    *leases            // nil: no leases (see NewShared)
}

var (
	_ driver.Driver       = (*Driver)(nil)
	_ driver.StepStore    = (*Driver)(nil)
	_ driver.ThreadLister = (*Driver)(nil)
)

// New returns an empty driver.
func New() *Driver {
	return &Driver{
		threads: map[string]record.Thread{},
		runs:    map[string]record.Run{},
		byState: map[record.RunState][]string{},
		history: map[string][]record.Message{},
		msgIDs:  map[string]bool{},
		idem:    map[idemKey]record.Idempotency{},
		steps:   map[string][]record.Step{},
		stepIDs: map[string]bool{},
	}
}

// Info implements driver.Driver.
func (d *Driver) Info(ctx context.Context) (driver.Info, error) {
	return driver.Info{ProtocolVersion: driver.ProtocolVersion, Name: Name, Version: Version, Durable: false, Leases: d.lease != nil}, nil
}

func (d *Driver) check(ctx context.Context) error {
	if d.closed {
		return driver.ErrClosed
	}
	return ctx.Err()
}

// LoadThread implements driver.Driver.
func (d *Driver) LoadThread(ctx context.Context, threadID string) (driver.ThreadSnapshot, error) {
	if threadID == "" {
		return driver.ThreadSnapshot{}, fmt.Errorf("%w: empty thread id", driver.ErrInvalidArgument)
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.check(ctx); err != nil {
		return driver.ThreadSnapshot{}, err
	}
	t, ok := d.threads[threadID]
	if !ok {
		return driver.ThreadSnapshot{Thread: record.Thread{ID: threadID}}, nil
	}
	snap := driver.ThreadSnapshot{Thread: record.CloneThread(t), Runs: make([]record.Run, 0, len(t.OpenRunIDs))}
	for _, id := range t.OpenRunIDs {
		r, ok := d.runs[id]
		if !ok {
			return driver.ThreadSnapshot{}, fmt.Errorf("thread %s lists open run %s, which does not exist", threadID, id)
		}
		snap.Runs = append(snap.Runs, record.CloneRun(r))
	}
	return snap, nil
}

// Commit implements driver.Driver.
func (d *Driver) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	if err := storedriver.ValidateBatch(b); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(ctx); err != nil {
		return 0, err
	}
	cur := d.threads[b.ThreadID].Version
	if cur != b.ExpectedVersion {
		return 0, fmt.Errorf("%w: thread %s is at version %d, batch expects %d", driver.ErrVersionConflict, b.ThreadID, cur, b.ExpectedVersion)
	}
	if err := d.checkFence(b, d.threads[b.ThreadID].Owner); err != nil {
		return 0, err
	}
	// Check everything before writing anything.
	for _, k := range b.Idempotency {
		if _, ok := d.idem[idemKey{k.ThreadID, k.Key}]; ok {
			return 0, fmt.Errorf("%w: idempotency key %q on thread %s exists", driver.ErrVersionConflict, k.Key, k.ThreadID)
		}
	}
	hist := d.history[b.ThreadID]
	last := int64(0)
	if n := len(hist); n > 0 {
		last = hist[n-1].Seq
	}
	for _, m := range b.Messages {
		if d.msgIDs[m.ID] {
			return 0, fmt.Errorf("%w: message %s exists", driver.ErrInvalidArgument, m.ID)
		}
		if m.Seq <= last {
			return 0, fmt.Errorf("%w: message %s seq %d is not after %d", driver.ErrInvalidArgument, m.ID, m.Seq, last)
		}
		last = m.Seq
	}
	for _, r := range b.Runs {
		if old, ok := d.runs[r.ID]; ok && old.ThreadID != r.ThreadID {
			return 0, fmt.Errorf("%w: run %s belongs to thread %s", driver.ErrInvalidArgument, r.ID, old.ThreadID)
		}
	}
	if err := d.checkSteps(b.ThreadID, b.Steps); err != nil {
		return 0, err
	}
	if d.commitFn != nil {
		d.commitFn(b)
	}
	// Write.
	for _, r := range b.Runs {
		if old, ok := d.runs[r.ID]; ok {
			d.unindex(old)
		}
		d.runs[r.ID] = record.CloneRun(r)
		d.index(r)
	}
	for _, m := range b.Messages {
		hist = append(hist, record.CloneMessage(m))
		d.msgIDs[m.ID] = true
	}
	d.history[b.ThreadID] = hist
	d.appendSteps(b.Steps)
	for _, k := range b.Idempotency {
		d.idem[idemKey{k.ThreadID, k.Key}] = k
	}
	d.threads[b.ThreadID] = record.CloneThread(b.Thread)
	return b.Thread.Version, nil
}

func (d *Driver) index(r record.Run) {
	ids := d.byState[r.State]
	i, _ := slices.BinarySearch(ids, r.ID)
	d.byState[r.State] = slices.Insert(ids, i, r.ID)
}

func (d *Driver) unindex(r record.Run) {
	ids := d.byState[r.State]
	if i, ok := slices.BinarySearch(ids, r.ID); ok {
		d.byState[r.State] = slices.Delete(ids, i, i+1)
	}
}

// GetRuns implements driver.Driver.
func (d *Driver) GetRuns(ctx context.Context, ids []string) ([]record.Run, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	out := make([]record.Run, 0, len(ids))
	for _, id := range ids {
		r, ok := d.runs[id]
		if !ok {
			return nil, fmt.Errorf("%w: run %q", driver.ErrNotFound, id)
		}
		out = append(out, record.CloneRun(r))
	}
	return out, nil
}

// GetIdempotency implements driver.Driver.
func (d *Driver) GetIdempotency(ctx context.Context, threadID, key string) (record.Idempotency, error) {
	if threadID == "" || key == "" {
		return record.Idempotency{}, fmt.Errorf("%w: idempotency lookup needs a thread and a key", driver.ErrInvalidArgument)
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.check(ctx); err != nil {
		return record.Idempotency{}, err
	}
	k, ok := d.idem[idemKey{threadID, key}]
	if !ok {
		return record.Idempotency{}, fmt.Errorf("%w: idempotency key %q on thread %s", driver.ErrNotFound, key, threadID)
	}
	return k, nil
}

// ReadHistory implements driver.Driver.
func (d *Driver) ReadHistory(ctx context.Context, threadID string, afterSeq int64, limit int) ([]record.Message, error) {
	if threadID == "" {
		return nil, fmt.Errorf("%w: empty thread id", driver.ErrInvalidArgument)
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit %d must be positive", driver.ErrInvalidArgument, limit)
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	hist := d.history[threadID]
	i := sort.Search(len(hist), func(i int) bool { return hist[i].Seq > afterSeq })
	hist = hist[i:min(len(hist), i+limit)]
	out := make([]record.Message, len(hist))
	for i, m := range hist {
		out[i] = record.CloneMessage(m)
	}
	return out, nil
}

// ListRuns implements driver.Driver.
func (d *Driver) ListRuns(ctx context.Context, state record.RunState, after string, limit int) ([]record.Run, error) {
	if err := storedriver.ValidateListRuns(state, limit); err != nil {
		return nil, err
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	ids := d.byState[state]
	i, found := slices.BinarySearchFunc(ids, after, cmp.Compare[string])
	if found {
		i++
	}
	ids = ids[i:min(len(ids), i+limit)]
	out := make([]record.Run, len(ids))
	for i, id := range ids {
		out[i] = record.CloneRun(d.runs[id])
	}
	return out, nil
}

// Close implements driver.Driver. Closing twice is not an error.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	return nil
}

// SetCommitHook installs fn, called inside every commit after its checks pass
// and before anything is written, with the driver's lock held. Tests use it
// to observe or interleave commits; fn must not call the driver.
func (d *Driver) SetCommitHook(fn func(driver.Batch)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.commitFn = fn
}

// ServeOptions are how the memstore plugin serves the driver: on one
// thread, since every call takes one lock for a few microseconds, and one
// thread hands a request from goroutine to goroutine without waking another
// (docs/adr/0121-memstore-driver-on-one-thread.md).
var ServeOptions = []storedriver.ServeOption{storedriver.WithMaxProcs(1)}

// Factory opens a fresh in-memory driver; it is what the memstore plugin
// serves. It takes no configuration.
var Factory storedriver.Factory = factory{}

type factory struct{}

// Open implements storedriver.Factory.
func (factory) Open(ctx context.Context, config map[string]string) (driver.Driver, error) {
	for k := range config {
		return nil, fmt.Errorf("%w: memstore config: unknown key %q (memstore takes no configuration)", driver.ErrInvalidArgument, k)
	}
	return New(), nil
}

// ScratchConfig implements conformance.ScratchConfigurer: a scratch
// instance takes no configuration either.
func (factory) ScratchConfig(map[string]string, string) map[string]string { return nil }

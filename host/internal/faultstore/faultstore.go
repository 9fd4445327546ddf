// Package faultstore wraps a store driver with the faults a real one shows,
// for the runtime's simulation: replies lost after a commit was applied,
// commits refused with ErrUnavailable, outages of a given length, group
// commits, and a crash that lands in the middle of any call.
//
// A crash is armed to fire at the n-th driver call from now. That call is
// applied or not (a coin decides), and its caller hears ErrUnavailable; a
// commit in a group applies a prefix of the group, so some batches of one
// group commit land and the rest never do. From then on the wrapper is dead:
// every call fails with ErrUnavailable and nothing more reaches the store
// underneath, as nothing more reaches the disk of a killed process. What the
// store underneath holds is exactly what was durable at the crash; a new
// wrapper over it is the restarted process's view.
//
// Faults are drawn from a random source the caller gives (one per
// simulation seed). The wrapper never changes what a successful call
// returns: a reply it reports is the store's.
package faultstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

// Faults sets how often each fault happens, as a probability per call.
type Faults struct {
	// LoseReply: a commit is applied and its caller told ErrUnavailable.
	LoseReply float64
	// Refuse: a commit is not applied and its caller told ErrUnavailable.
	Refuse float64
	// ReadFail: a read fails with ErrUnavailable.
	ReadFail float64
	// Outage: the store becomes unavailable for OutageFor (every call fails).
	Outage    float64
	OutageFor time.Duration
	// GroupWindow, when positive, makes commits wait that long (on the
	// clock, a fake one in a simulation) and go together in one group,
	// applied in arrival order, as a driver's group commit does.
	GroupWindow time.Duration
}

// Driver is a driver.Driver with faults. It does not implement
// driver.Leaser: the runtime over it runs as the single host.
type Driver struct {
	d driver.Driver

	mu       sync.Mutex
	rng      *rand.Rand
	f        Faults
	calls    int
	crashAt  int // the call that crashes; 0: none armed
	dead     bool
	outageTo time.Time
	group    []*pending
	applied  func(driver.Batch)
	// appliedSteps: see OnSteps.
	appliedSteps func(driver.StepBatch)
	log          []string
	paused       chan struct{} // closed by Release; nil when not paused
}

type pending struct {
	b    driver.Batch
	v    int64
	err  error
	done chan struct{}
}

// New wraps d. applied, when not nil, is called with every batch the store
// underneath applied, in order, under the wrapper's lock: it is the record of
// what became durable.
func New(d driver.Driver, rng *rand.Rand, f Faults, applied func(driver.Batch)) *Driver {
	return &Driver{d: d, rng: rng, f: f, applied: applied}
}

var _ driver.Driver = (*Driver)(nil)

// CrashIn arms a crash at the n-th call from now (n ≥ 1).
func (w *Driver) CrashIn(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.crashAt = w.calls + max(n, 1)
}

// Pause holds every later call until Release, as a process stopped (or cut
// off) holds its requests: they reach the store late, after a new process
// may have taken over. A held read gives up when its context ends.
func (w *Driver) Pause() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.paused == nil {
		w.paused = make(chan struct{})
		w.log = append(w.log, fmt.Sprintf("call %d: paused", w.calls))
	}
}

// Release lets the held calls through.
func (w *Driver) Release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.paused != nil {
		close(w.paused)
		w.paused = nil
	}
}

// Kill crashes the wrapper now: every later call fails.
func (w *Driver) Kill() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.dead {
		w.die("now")
	}
}

// hold waits while the wrapper is paused.
func (w *Driver) hold(ctx context.Context) error {
	w.mu.Lock()
	ch := w.paused
	w.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Dead reports whether the crash has happened.
func (w *Driver) Dead() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dead
}

// SetFaults replaces the fault rates (zero Faults: none) and ends an
// outage under way.
func (w *Driver) SetFaults(f Faults) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.f = f
	w.outageTo = time.Time{}
}

// Log returns the faults injected so far, one line each.
func (w *Driver) Log() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.log...)
}

func unavailable(what string) error {
	return fmt.Errorf("%w: %s (injected)", driver.ErrUnavailable, what)
}

// enter counts a call and decides its fate: crash is set when this call is
// the one the crash lands on; err when the call fails before reaching the
// store. The lock is held.
func (w *Driver) enter(read bool) (crash bool, err error) {
	if w.dead {
		return false, unavailable("the process crashed")
	}
	w.calls++
	if w.crashAt != 0 && w.calls >= w.crashAt {
		return true, nil
	}
	now := time.Now()
	if now.Before(w.outageTo) {
		return false, unavailable("outage")
	}
	if w.f.Outage > 0 && w.rng.Float64() < w.f.Outage {
		w.outageTo = now.Add(w.f.OutageFor)
		w.log = append(w.log, fmt.Sprintf("call %d: outage for %s", w.calls, w.f.OutageFor))
		return false, unavailable("outage")
	}
	if read && w.f.ReadFail > 0 && w.rng.Float64() < w.f.ReadFail {
		w.log = append(w.log, fmt.Sprintf("call %d: read failed", w.calls))
		return false, unavailable("read failed")
	}
	return false, nil
}

// die marks the crash; the lock is held.
func (w *Driver) die(what string) {
	w.dead = true
	w.log = append(w.log, fmt.Sprintf("call %d: crash %s", w.calls, what))
}

// read runs a read call with faults.
func read[T any](ctx context.Context, w *Driver, what string, call func() (T, error)) (T, error) {
	var zero T
	if err := w.hold(ctx); err != nil {
		return zero, err
	}
	w.mu.Lock()
	crash, err := w.enter(true)
	if crash {
		w.die("during " + what)
	}
	w.mu.Unlock()
	if crash {
		return zero, unavailable("the process crashed")
	}
	if err != nil {
		return zero, err
	}
	return call()
}

// Info implements driver.Driver. It never fails: the host reads it once at
// start, before anything can be lost.
func (w *Driver) Info(ctx context.Context) (driver.Info, error) {
	info, err := w.d.Info(ctx)
	info.Leases = false
	return info, err
}

// LoadThread implements driver.Driver.
func (w *Driver) LoadThread(ctx context.Context, threadID string) (driver.ThreadSnapshot, error) {
	return read(ctx, w, "LoadThread", func() (driver.ThreadSnapshot, error) { return w.d.LoadThread(ctx, threadID) })
}

// GetRuns implements driver.Driver.
func (w *Driver) GetRuns(ctx context.Context, ids []string) ([]record.Run, error) {
	return read(ctx, w, "GetRuns", func() ([]record.Run, error) { return w.d.GetRuns(ctx, ids) })
}

// GetIdempotency implements driver.Driver.
func (w *Driver) GetIdempotency(ctx context.Context, threadID, key string) (record.Idempotency, error) {
	return read(ctx, w, "GetIdempotency", func() (record.Idempotency, error) { return w.d.GetIdempotency(ctx, threadID, key) })
}

// ReadHistory implements driver.Driver.
func (w *Driver) ReadHistory(ctx context.Context, threadID string, afterSeq int64, limit int) ([]record.Message, error) {
	return read(ctx, w, "ReadHistory", func() ([]record.Message, error) { return w.d.ReadHistory(ctx, threadID, afterSeq, limit) })
}

// ListRuns implements driver.Driver.
func (w *Driver) ListRuns(ctx context.Context, state record.RunState, after string, limit int) ([]record.Run, error) {
	return read(ctx, w, "ListRuns", func() ([]record.Run, error) { return w.d.ListRuns(ctx, state, after, limit) })
}

// Close implements driver.Driver. It does not close the store underneath,
// which outlives the process the wrapper stands for.
func (w *Driver) Close(ctx context.Context) error { return nil }

// Commit implements driver.Driver: alone, or in a group when GroupWindow is
// set.
func (w *Driver) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	if err := w.hold(ctx); err != nil {
		return 0, err
	}
	w.mu.Lock()
	if w.dead {
		w.mu.Unlock()
		return 0, unavailable("the process crashed")
	}
	if w.f.GroupWindow <= 0 {
		defer w.mu.Unlock()
		g := []*pending{{b: b}}
		w.commitGroup(ctx, g)
		return g[0].v, g[0].err
	}
	p := &pending{b: b, done: make(chan struct{})}
	w.group = append(w.group, p)
	leader := len(w.group) == 1
	window := w.f.GroupWindow
	w.mu.Unlock()
	if leader {
		time.Sleep(window)
		w.mu.Lock()
		g := w.group
		w.group = nil
		w.commitGroup(ctx, g)
		w.mu.Unlock()
		for _, q := range g {
			close(q.done)
		}
	}
	<-p.done
	return p.v, p.err
}

// commitGroup applies the batches of g in order, each with its own faults,
// and sets their results; the lock is held. A crash during the group applies
// a prefix of it: the batch it lands on is applied or not, the rest never.
func (w *Driver) commitGroup(ctx context.Context, g []*pending) {
	for i, p := range g {
		if w.dead {
			p.err = unavailable("the process crashed")
			continue
		}
		crash, err := w.enter(false)
		if err != nil {
			p.err = err
			continue
		}
		if crash {
			applied := w.rng.IntN(2) == 0
			if applied {
				w.apply(ctx, p)
			}
			w.die(fmt.Sprintf("in commit %d of a group of %d (applied: %v)", i+1, len(g), applied && p.err == nil))
			p.v, p.err = 0, unavailable("the process crashed")
			continue
		}
		switch r := w.rng.Float64(); {
		case r < w.f.Refuse:
			w.log = append(w.log, fmt.Sprintf("call %d: commit %s refused", w.calls, p.b.CommitID))
			p.err = unavailable("commit refused")
		case r < w.f.Refuse+w.f.LoseReply:
			w.apply(ctx, p)
			if p.err == nil {
				w.log = append(w.log, fmt.Sprintf("call %d: reply of commit %s lost", w.calls, p.b.CommitID))
				p.v, p.err = 0, unavailable("reply lost")
			}
		default:
			w.apply(ctx, p)
		}
	}
}

// apply commits p's batch to the store underneath; the lock is held.
func (w *Driver) apply(ctx context.Context, p *pending) {
	p.v, p.err = w.d.Commit(context.WithoutCancel(ctx), p.b)
	if p.err == nil && w.applied != nil {
		w.applied(p.b)
	}
}

var _ driver.StepStore = (*Driver)(nil)

// stepStore returns the store underneath as a driver.StepStore.
func (w *Driver) stepStore() (driver.StepStore, error) {
	ss, ok := w.d.(driver.StepStore)
	if !ok {
		return nil, fmt.Errorf("%w: the store underneath keeps no step records", driver.ErrInvalidArgument)
	}
	return ss, nil
}

// OnSteps sets fn, called with every step batch the store underneath
// applied, under the wrapper's lock, like New's applied for batches.
func (w *Driver) OnSteps(fn func(driver.StepBatch)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.appliedSteps = fn
}

// CommitSteps implements driver.StepStore with the faults of a commit: a
// crash during it (applied or not), a refusal, a lost reply. Step commits
// never join a group: a driver writes them at once.
func (w *Driver) CommitSteps(ctx context.Context, b driver.StepBatch) error {
	ss, err := w.stepStore()
	if err != nil {
		return err
	}
	if err := w.hold(ctx); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead {
		return unavailable("the process crashed")
	}
	crash, err := w.enter(false)
	if err != nil {
		return err
	}
	apply := func() error {
		err := ss.CommitSteps(context.WithoutCancel(ctx), b)
		if err == nil && w.appliedSteps != nil {
			w.appliedSteps(b)
		}
		return err
	}
	if crash {
		applied := w.rng.IntN(2) == 0
		if applied {
			applied = apply() == nil
		}
		w.die(fmt.Sprintf("in a step commit of run %s (applied: %v)", b.RunID, applied))
		return unavailable("the process crashed")
	}
	switch r := w.rng.Float64(); {
	case r < w.f.Refuse:
		w.log = append(w.log, fmt.Sprintf("call %d: step commit of run %s refused", w.calls, b.RunID))
		return unavailable("commit refused")
	case r < w.f.Refuse+w.f.LoseReply:
		if err := apply(); err != nil {
			return err
		}
		w.log = append(w.log, fmt.Sprintf("call %d: reply of step commit of run %s lost", w.calls, b.RunID))
		return unavailable("reply lost")
	}
	return apply()
}

// ReadSteps implements driver.StepStore.
func (w *Driver) ReadSteps(ctx context.Context, runID string, afterSeq int64, limit int) ([]record.Step, error) {
	ss, err := w.stepStore()
	if err != nil {
		return nil, err
	}
	return read(ctx, w, "ReadSteps", func() ([]record.Step, error) { return ss.ReadSteps(ctx, runID, afterSeq, limit) })
}

package wasm

import (
	"context"
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// How a hook call is stopped (ADR 0150).
//
// The engine is built WithCloseOnContextDone, so the compiled guest checks
// for closure at every loop header and function entry, and wazero watches
// the context of every call in a goroutine of its own, closing the module
// (without yet closing its resources, which the call does on its way out)
// when that context is done. A context.WithTimeout per call made that
// watch expensive: a timer armed and stopped, a Done channel allocated and
// closed, a context tree wired and unwired, every time.
//
// Instead a call runs under its instance's callContext, whose Done channel
// is made once per instance and closed only to stop a call (the instance is
// then discarded, so a closed channel is never seen by a later call). Two
// things close it: the module's watchdog, one goroutine that sleeps until
// the earliest deadline of the calls in flight and exits when none is left,
// and, when the caller's context can be canceled, a context.AfterFunc on
// it. Both decide under the watchdog's lock and only for a call still in
// flight (and, for the caller's context, still the same call: the
// instance's generation), so a stop that races a normal return cannot touch
// the instance once it is back in the pool.

// watchdog tracks a module's calls in flight.
type watchdog struct {
	mu sync.Mutex
	// busy holds the instances with a call in flight, in no order; an
	// instance's slot is its index here (-1: none), its deadline the call's.
	busy    []*instance
	running bool      // the watch goroutine is running
	epoch   time.Time // deadlines are durations since epoch (monotonic)
}

// callContext is the context of a hook call on one instance: the caller's
// values and the module's logger; done only when the call is stopped.
type callContext struct {
	m      *Module
	inst   *instance
	parent context.Context // the caller's context, during a call
}

func (c *callContext) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done returns the instance's stop channel. It reads only fields that are
// set when the instance is made: wazero's watch goroutine of an earlier call
// may call it after that call has returned.
func (c *callContext) Done() <-chan struct{} { return c.inst.stop }

func (c *callContext) Err() error {
	c.m.wd.mu.Lock()
	defer c.m.wd.mu.Unlock()
	return c.inst.stopped
}

func (c *callContext) Value(key any) any {
	if key == (loggerKey{}) {
		return c.m.log
	}
	return c.parent.Value(key)
}

// invoke calls fn on inst, an instance taken from the pool, with in as its
// request, under the call deadline and the caller's context. After an error
// the instance must be discarded.
func (m *Module) invoke(ctx context.Context, inst *instance, fn api.Function, in []byte) ([]byte, error) {
	cctx := m.begin(ctx, inst)
	out, err := inst.call(cctx, fn, in)
	if stopped := m.end(inst); stopped != nil && err == nil {
		// Stopped as it returned: the answer came too late.
		err = inst.callErr(fn.Definition().ExportNames()[0], sys.NewExitError(exitCode(stopped)))
	}
	return out, err
}

func exitCode(err error) uint32 {
	if err == context.DeadlineExceeded {
		return sys.ExitCodeDeadlineExceeded
	}
	return sys.ExitCodeContextCanceled
}

// begin registers a call on inst and returns its context.
func (m *Module) begin(ctx context.Context, inst *instance) context.Context {
	wd := &m.wd
	// One monotonic clock read: time.Now would read the wall clock too.
	deadline := time.Since(wd.epoch) + m.opts.CallTimeout
	wd.mu.Lock()
	inst.gen++
	gen := inst.gen
	inst.deadline = deadline
	inst.slot = len(wd.busy)
	wd.busy = append(wd.busy, inst)
	if !wd.running {
		wd.running = true
		go m.watch()
	}
	wd.mu.Unlock()
	inst.cctx.parent = ctx
	if ctx.Done() != nil {
		inst.unwatch = context.AfterFunc(ctx, func() {
			err := context.Canceled
			if ctx.Err() == context.DeadlineExceeded {
				err = context.DeadlineExceeded
			}
			wd.mu.Lock()
			if inst.gen == gen {
				m.stopLocked(inst, err)
			}
			wd.mu.Unlock()
		})
	}
	return &inst.cctx
}

// end unregisters the call on inst and returns why it was stopped, or nil.
func (m *Module) end(inst *instance) error {
	if inst.unwatch != nil {
		inst.unwatch()
		inst.unwatch = nil
	}
	m.wd.mu.Lock()
	m.wd.removeLocked(inst)
	err := inst.stopped
	m.wd.mu.Unlock()
	inst.cctx.parent = nil
	return err
}

// stopLocked stops the call on inst if it is still in flight; wazero's
// watch of the call closes the module. The caller holds m.wd.mu.
func (m *Module) stopLocked(inst *instance, err error) {
	if inst.slot < 0 || inst.stopped != nil {
		return
	}
	m.wd.removeLocked(inst)
	inst.stopped = err
	close(inst.stop)
}

// removeLocked takes inst out of the calls in flight, if it is there: the
// last one moves into its slot. The caller holds wd.mu.
func (wd *watchdog) removeLocked(inst *instance) {
	i := inst.slot
	if i < 0 {
		return
	}
	last := len(wd.busy) - 1
	moved := wd.busy[last]
	wd.busy[i], moved.slot = moved, i
	wd.busy[last] = nil
	wd.busy = wd.busy[:last]
	inst.slot = -1
}

// watch stops the calls that run past their deadline. It runs while calls
// are in flight and exits when none is left.
func (m *Module) watch() {
	wd := &m.wd
	t := time.NewTimer(m.opts.CallTimeout)
	defer t.Stop()
	for range t.C {
		wd.mu.Lock()
		now := time.Since(wd.epoch)
		next := time.Duration(-1)
		// Backwards: stopping a call moves the last one, already seen,
		// into its slot.
		for i := len(wd.busy) - 1; i >= 0; i-- {
			inst := wd.busy[i]
			switch {
			case inst.deadline <= now:
				m.stopLocked(inst, context.DeadlineExceeded)
			case next < 0 || inst.deadline < next:
				next = inst.deadline
			}
		}
		if next < 0 {
			wd.running = false
			wd.mu.Unlock()
			return
		}
		wd.mu.Unlock()
		t.Reset(next - now)
	}
}

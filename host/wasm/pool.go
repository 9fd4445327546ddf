package wasm

import (
	"context"
	"sync"
)

// pool holds a module's idle instances and bounds its calls in flight to
// max. A call holds a slot from take to give; the last instance given back
// is the first taken (its memory is the likeliest in the cache). Taking and
// giving back cost one uncontended lock each; only a call that finds every
// slot held waits, on a channel of its own (ADR 0157).
type pool struct {
	mu      sync.Mutex
	idle    []*instance
	held    int             // slots held by calls, at most max
	max     int             // Options.MaxInstances
	waiters []chan struct{} // calls waiting for a slot, first come first
	closed  bool            // no instance is kept once closed
}

// take takes a slot and an idle instance, or nil if none is idle (the
// caller starts one, or gives the slot back). It waits for a slot as long
// as ctx allows.
func (p *pool) take(ctx context.Context) (*instance, error) {
	p.mu.Lock()
	if p.held < p.max && len(p.waiters) == 0 {
		p.held++
		inst := p.popLocked()
		p.mu.Unlock()
		return inst, nil
	}
	w := make(chan struct{})
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()
	select {
	case <-w:
	case <-ctx.Done():
		p.mu.Lock()
		select {
		case <-w:
			// Handed a slot as ctx ended: hand it on.
			p.releaseLocked()
		default:
			for i, x := range p.waiters {
				if x == w {
					p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
					break
				}
			}
		}
		p.mu.Unlock()
		return nil, ctx.Err()
	}
	// The slot was handed over by give.
	p.mu.Lock()
	inst := p.popLocked()
	p.mu.Unlock()
	return inst, nil
}

func (p *pool) popLocked() *instance {
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	inst := p.idle[n-1]
	p.idle[n-1] = nil
	p.idle = p.idle[:n-1]
	return inst
}

// give gives back a slot and, if not nil, an instance to keep idle. It
// returns false if the pool is closed and inst was not kept.
func (p *pool) give(inst *instance) bool {
	p.mu.Lock()
	kept := inst != nil && !p.closed
	if kept {
		p.idle = append(p.idle, inst)
	}
	p.releaseLocked()
	p.mu.Unlock()
	return kept
}

// releaseLocked gives a slot to the first waiter, or frees it.
func (p *pool) releaseLocked() {
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		p.waiters[0] = nil
		p.waiters = p.waiters[1:]
		close(w)
		return
	}
	p.held--
}

// close marks the pool closed and returns its idle instances.
func (p *pool) close() []*instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	return idle
}

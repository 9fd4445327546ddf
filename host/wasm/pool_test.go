package wasm

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPoolWaiters: with every slot held, a taker waits; one whose context
// ends gives up without a slot, the next is handed the instance given back,
// and the slots add up afterwards.
func TestPoolWaiters(t *testing.T) {
	p := &pool{max: 1}
	a := &instance{}
	p.idle = append(p.idle, a)
	got, err := p.take(context.Background())
	if got != a || err != nil {
		t.Fatalf("first take: %p %v", got, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if got, err := p.take(ctx); got != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("take with every slot held: %p %v", got, err)
	}
	taken := make(chan *instance)
	go func() {
		inst, err := p.take(context.Background())
		if err != nil {
			t.Error(err)
		}
		taken <- inst
	}()
	for {
		p.mu.Lock()
		n := len(p.waiters)
		p.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if !p.give(a) {
		t.Fatal("give: not kept")
	}
	if inst := <-taken; inst != a {
		t.Fatalf("waiter got %p, want %p", inst, a)
	}
	p.give(nil) // discarded
	if p.held != 0 || len(p.waiters) != 0 || len(p.idle) != 0 {
		t.Fatalf("after: held %d, waiters %d, idle %d", p.held, len(p.waiters), len(p.idle))
	}
	// A slot freed, the next take starts an instance (nil, no error).
	if inst, err := p.take(context.Background()); inst != nil || err != nil {
		t.Fatalf("take after discard: %p %v", inst, err)
	}
	if idle := p.close(); len(idle) != 0 || p.give(a) {
		t.Fatal("a closed pool kept an instance")
	}
}

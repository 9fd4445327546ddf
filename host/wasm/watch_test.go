package wasm

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
)

// TestCallerDeadline: a caller's deadline shorter than CallTimeout stops a
// running guest.
func TestCallerDeadline(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	m := load(t, e, hostile("loop"), Options{MaxInstances: 1, CallTimeout: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	d, err := m.Decide(ctx, policy.Request{})
	if !isFallback(err, d) || !strings.Contains(err.Error(), "deadline exceeded, guest stopped") {
		t.Fatalf("%+v %v", d, err)
	}
	if st := m.Stats(); st.Failures != 1 || st.Discarded != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestCallerAlreadyCanceled: a call whose caller has given up fails
// without running the guest, and the instance stays in the pool.
func TestCallerAlreadyCanceled(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	m := load(t, e, cGuest(), Options{MaxInstances: 1, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := m.Decide(ctx, request(decideCases[1]))
	var fe *policy.FallbackError
	if !errors.As(err, &fe) || d.Action != runstate.ActionQueue {
		t.Fatalf("%+v %v", d, err)
	}
	if d, err := m.Decide(context.Background(), request(decideCases[1])); err != nil || d.Action != runstate.ActionInject {
		t.Fatalf("after: %+v %v", d, err)
	}
	if st := m.Stats(); st.Discarded != 0 || st.Instances != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestStopRacesReturn: callers cancel their contexts as their calls
// return, on one pooled instance. A cancellation that comes too late must
// not stop the next call on the same instance: every call either decides or
// fails, every failed call's instance is discarded, and a call after the
// storm decides.
func TestStopRacesReturn(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	m := load(t, e, cGuest(), Options{MaxInstances: 1, CallTimeout: time.Minute,
		Logger: slog.New(slog.DiscardHandler)})
	req := request(decideCases[1])
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(time.Duration(rand.IntN(100))*time.Microsecond, cancel)
				d, err := m.Decide(ctx, req)
				if err == nil && d.Action != runstate.ActionInject {
					t.Errorf("decided %+v", d)
				}
				if err != nil && !strings.Contains(err.Error(), "canceled") {
					t.Errorf("failed with %v", err)
				}
			}
		})
	}
	wg.Wait()
	if d, err := m.Decide(context.Background(), req); err != nil || d.Action != runstate.ActionInject {
		t.Fatalf("after: %+v %v", d, err)
	}
	st := m.Stats()
	t.Logf("stats %+v", st)
	if st.Instances != st.Discarded+1 {
		t.Errorf("stats %+v: want one live instance, every other discarded", st)
	}
}

// TestWatchdogExits: the watchdog runs while calls are in flight and exits
// when none is left; a call after that is still stopped at its deadline.
func TestWatchdogExits(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	m := load(t, e, hostile("loop"), Options{MaxInstances: 1, CallTimeout: 50 * time.Millisecond})
	for i := range 2 {
		d, err := m.Decide(context.Background(), policy.Request{})
		if !isFallback(err, d) || !strings.Contains(err.Error(), "deadline exceeded") {
			t.Fatalf("call %d: %+v %v", i, d, err)
		}
		for deadline := time.Now().Add(time.Minute); ; {
			m.wd.mu.Lock()
			running, busy := m.wd.running, len(m.wd.busy)
			m.wd.mu.Unlock()
			if busy != 0 {
				t.Fatalf("call %d: %d calls still registered", i, busy)
			}
			if !running {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("call %d: the watchdog still runs with no call in flight", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

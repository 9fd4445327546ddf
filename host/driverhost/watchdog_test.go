package driverhost

import (
	"context"
	"testing"
	"time"
)

// TestWatchdog: the calls still in flight at their deadline are ended with
// the cause errStalled, in whatever order the others ended; a call that
// ended first is left alone; the goroutine exits once no call is left, and
// starts again for the next one.
func TestWatchdog(t *testing.T) {
	w := newWatchdog(200 * time.Millisecond)
	defer w.stop()
	var ctxs []context.Context
	var calls []*watched
	for range 4 {
		ctx, cancel := context.WithCancelCause(context.Background())
		ctxs = append(ctxs, ctx)
		calls = append(calls, w.begin(cancel))
	}
	w.end(calls[0]) // the oldest, the head
	w.end(calls[2]) // one in the middle
	for _, i := range []int{1, 3} {
		select {
		case <-ctxs[i].Done():
		case <-time.After(time.Minute):
			t.Fatalf("call %d was not ended past its deadline", i)
		}
		if cause := context.Cause(ctxs[i]); cause != errStalled {
			t.Fatalf("call %d ended with %v, want errStalled", i, cause)
		}
		w.end(calls[i]) // as call does, after the watchdog: no effect
	}
	for _, i := range []int{0, 2} {
		if err := ctxs[i].Err(); err != nil {
			t.Fatalf("call %d, ended before its deadline, was canceled: %v", i, err)
		}
	}
	waitIdle(t, w)

	ctx, cancel := context.WithCancelCause(context.Background())
	c := w.begin(cancel)
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("a call after the watchdog went idle was not ended")
	}
	w.end(c)
	waitIdle(t, w)
}

// TestWatchdogStop: stop ends the goroutine with calls still in flight,
// and no goroutine starts after it.
func TestWatchdogStop(t *testing.T) {
	w := newWatchdog(time.Hour)
	_, cancel := context.WithCancelCause(context.Background())
	c := w.begin(cancel)
	w.stop()
	waitIdle(t, w)
	w.end(c)
	_, cancel2 := context.WithCancelCause(context.Background())
	w.begin(cancel2)
	w.mu.Lock()
	running := w.running
	w.mu.Unlock()
	if running {
		t.Fatal("the watchdog started again after stop")
	}
	w.stop() // twice: no panic
}

// TestCallCtxDeadline: a call's deadline is its own, or its parent's when
// that is earlier.
func TestCallCtxDeadline(t *testing.T) {
	own := time.Now().Add(time.Hour)
	if dl, ok := (&callCtx{Context: context.Background(), deadline: own}).Deadline(); !ok || !dl.Equal(own) {
		t.Fatalf("deadline %v %v, want %v", dl, ok, own)
	}
	parent, cancel := context.WithDeadline(context.Background(), own.Add(-time.Minute))
	defer cancel()
	if dl, _ := (&callCtx{Context: parent, deadline: own}).Deadline(); !dl.Equal(own.Add(-time.Minute)) {
		t.Fatalf("deadline %v, want the parent's %v", dl, own.Add(-time.Minute))
	}
	later, cancel2 := context.WithDeadline(context.Background(), own.Add(time.Minute))
	defer cancel2()
	if dl, _ := (&callCtx{Context: later, deadline: own}).Deadline(); !dl.Equal(own) {
		t.Fatalf("deadline %v, want the call's own %v", dl, own)
	}
}

func waitIdle(t *testing.T, w *watchdog) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		w.mu.Lock()
		running := w.running
		w.mu.Unlock()
		if !running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the watchdog's goroutine did not exit")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

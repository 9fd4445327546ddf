package driverhost

import (
	"context"
	"sync"
	"time"
)

// Every call to the driver but Watch's stream runs under CallTimeout. A
// context.WithTimeout per call arms a runtime timer and stops it again,
// which at tens of thousands of calls a second is a measurable share of the
// host's CPU. Instead each Driver has one watchdog: a call registers its
// cancel function and deadline, and one goroutine sleeps until the
// earliest deadline of the calls in flight, ends those past it with the
// cause errStalled, and exits when no call is left (the next call starts
// it again). Every call has the same timeout, so the calls in flight,
// kept in the order they started, are also in the order of their
// deadlines: registering and unregistering are O(1).

// watchdog ends the calls of one Driver that pass their deadline.
type watchdog struct {
	timeout time.Duration

	mu         sync.Mutex
	head, tail *watched // calls in flight, oldest first
	running    bool     // a goroutine runs run
	stopped    bool     // stop was called: no goroutine starts again
	quit       chan struct{}
}

// watched is one call in flight.
type watched struct {
	prev, next *watched
	deadline   time.Time
	cancel     context.CancelCauseFunc
	listed     bool // under watchdog.mu
}

func newWatchdog(timeout time.Duration) *watchdog {
	return &watchdog{timeout: timeout, quit: make(chan struct{})}
}

// begin registers a call whose context cancel ends; the watchdog calls
// cancel(errStalled) once the call has run for the timeout. The caller
// calls end when the call returns.
func (w *watchdog) begin(cancel context.CancelCauseFunc) *watched {
	c := &watched{cancel: cancel}
	w.mu.Lock()
	c.deadline = time.Now().Add(w.timeout)
	c.listed = true
	if w.tail == nil {
		w.head, w.tail = c, c
	} else {
		c.prev = w.tail
		w.tail.next = c
		w.tail = c
	}
	if !w.running && !w.stopped {
		w.running = true
		go w.run()
	}
	w.mu.Unlock()
	return c
}

// end unregisters c.
func (w *watchdog) end(c *watched) {
	w.mu.Lock()
	if c.listed {
		w.unlink(c)
	}
	w.mu.Unlock()
}

func (w *watchdog) unlink(c *watched) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		w.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		w.tail = c.prev
	}
	c.prev, c.next, c.listed = nil, nil, false
}

// stop ends the watchdog's goroutine; calls registered later are not
// watched. The Driver calls it when it closes.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.quit)
	}
}

// run sleeps until the earliest deadline of the calls in flight and ends
// the calls past it, until no call is left or stop is called.
func (w *watchdog) run() {
	var t *time.Timer
	var late []*watched
	for {
		w.mu.Lock()
		now := time.Now()
		for w.head != nil && !now.Before(w.head.deadline) {
			c := w.head
			w.unlink(c)
			late = append(late, c)
		}
		if w.head == nil || w.stopped {
			w.running = false
			w.mu.Unlock()
			for _, c := range late {
				c.cancel(errStalled)
			}
			if t != nil {
				t.Stop()
			}
			return
		}
		sleep := w.head.deadline.Sub(now)
		w.mu.Unlock()
		for _, c := range late {
			c.cancel(errStalled)
		}
		clear(late)
		late = late[:0]
		if t == nil {
			t = time.NewTimer(sleep)
		} else {
			t.Reset(sleep)
		}
		select {
		case <-t.C:
		case <-w.quit:
		}
	}
}

// callCtx is a call's context: its cancelation is the watchdog's, and its
// deadline the call's own (or its parent's, when earlier), so that the
// transport tells the driver how long the call may take.
type callCtx struct {
	context.Context
	deadline time.Time
}

func (c *callCtx) Deadline() (time.Time, bool) {
	if dl, ok := c.Context.Deadline(); ok && dl.Before(c.deadline) {
		return dl, true
	}
	return c.deadline, true
}

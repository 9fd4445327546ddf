package storedriver

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestServeProcs(t *testing.T) {
	env := func(v string, set bool) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k == "GOMAXPROCS" {
				return v, set
			}
			return "", false
		}
	}
	for _, tc := range []struct {
		opts []ServeOption
		env  func(string) (string, bool)
		want int
	}{
		{nil, env("", false), 0},
		{[]ServeOption{WithMaxProcs(1)}, env("", false), 1},
		{[]ServeOption{WithMaxProcs(1)}, env("4", true), 0}, // the host's setting wins
		{[]ServeOption{WithMaxProcs(0)}, env("", false), 0},
	} {
		var o serveOptions
		for _, opt := range tc.opts {
			opt(&o)
		}
		if got := o.procs(tc.env); got != tc.want {
			t.Errorf("options %+v: procs = %d, want %d", o, got, tc.want)
		}
	}
}

// TestOnceStop: when the parent-death signal and the watch of the parent
// both stop the driver, the store is closed once and the second caller
// waits for the first (which exits the process) instead of ending it
// while the store is still closing.
func TestOnceStop(t *testing.T) {
	var ends atomic.Int32
	closing := make(chan struct{})
	release := make(chan struct{})
	stop := onceStop(func(string) {
		ends.Add(1)
		close(closing)
		<-release
	})
	first := make(chan struct{})
	go func() { stop("signal"); close(first) }()
	<-closing
	second := make(chan struct{})
	go func() { stop("parent watch"); close(second) }()
	select {
	case <-second:
		t.Fatal("the second stop returned while the first was still closing the store")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	<-first
	<-second
	if n := ends.Load(); n != 1 {
		t.Fatalf("the store was closed %d times, want 1", n)
	}
}

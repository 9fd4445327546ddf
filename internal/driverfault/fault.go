// Package driverfault is the fault points of a store driver process: a test
// kills a driver process at a chosen moment of a commit, to check that the
// commit is then whole or absent after a relaunch (the conformance suite's
// crash group does).
//
// They are off unless Env is set in the driver's environment, which a host
// never does. Env's value is "POINT@N": the process kills itself (SIGKILL
// where there are signals) the Nth time a commit reaches POINT. The
// protocol's server (package internal/driverrpc) reaches BeforeCommit and
// AfterSyncBeforeReply on its own; a driver that has a moment between
// writing and syncing calls Reach there with AfterWriteBeforeSync.
package driverfault

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

// Env is the environment variable that arms a fault point.
const Env = "AGENTHOST_DRIVER_FAULT"

// The fault points.
const (
	// BeforeCommit: the batch was received and not yet given to the driver.
	// Nothing of it may be visible after a relaunch.
	BeforeCommit = "before-commit"
	// AfterWriteBeforeSync: the driver has written the batch but not made it
	// durable (reached only by drivers that call Reach there). The batch must
	// be whole or absent after a relaunch.
	AfterWriteBeforeSync = "after-write-before-sync"
	// AfterSyncBeforeReply: the driver acknowledged the batch to the server,
	// which has not replied yet. A durable driver must show the whole batch
	// after a relaunch.
	AfterSyncBeforeReply = "after-sync-before-reply"
)

// Points lists the fault points, in commit order.
var Points = []string{BeforeCommit, AfterWriteBeforeSync, AfterSyncBeforeReply}

var fault struct {
	once  sync.Once
	mu    sync.Mutex
	point string
	n     int // hits left before the kill
	kill  func()
}

func killSelf() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill()
	}
	select {} // wait for the signal
}

// Parse parses an Env value. It reports false for an empty or malformed
// one.
func Parse(v string) (point string, n int, ok bool) {
	point, count, found := strings.Cut(v, "@")
	if !found {
		return "", 0, false
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return "", 0, false
	}
	for _, p := range Points {
		if p == point {
			return point, n, true
		}
	}
	return "", 0, false
}

// Reach marks a fault point of a commit. When Env names this point and this
// is its Nth hit, the process is killed here and Reach does not return.
// Otherwise it does nothing, cheaply.
func Reach(point string) {
	fault.once.Do(func() {
		if p, n, ok := Parse(os.Getenv(Env)); ok {
			fault.point, fault.n = p, n
		}
		if fault.kill == nil {
			fault.kill = killSelf
		}
	})
	if fault.point != point {
		return
	}
	fault.mu.Lock()
	fault.n--
	hit := fault.n == 0
	fault.mu.Unlock()
	if hit {
		fault.kill()
	}
}

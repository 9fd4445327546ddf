package storedriver

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

// Fault points let a test kill a driver process at a chosen moment of a
// commit, to check that the commit is then whole or absent (the conformance
// suite's crash group does). They are off unless FaultEnv is set in the
// driver's environment, which a host never does.
//
// FaultEnv's value is "POINT@N": the process kills itself (SIGKILL where
// there are signals) the Nth time a commit reaches POINT. Server reaches
// FaultBeforeCommit and FaultAfterSyncBeforeReply on its own; a driver that
// has a moment between writing and syncing calls Fault there with
// FaultAfterWriteBeforeSync.
const FaultEnv = "AGENTHOST_DRIVER_FAULT"

// The fault points.
const (
	// FaultBeforeCommit: the batch was received and not yet given to the
	// driver. Nothing of it may be visible after a relaunch.
	FaultBeforeCommit = "before-commit"
	// FaultAfterWriteBeforeSync: the driver has written the batch but not
	// made it durable (reached only by drivers that call Fault there). The
	// batch must be whole or absent after a relaunch.
	FaultAfterWriteBeforeSync = "after-write-before-sync"
	// FaultAfterSyncBeforeReply: the driver acknowledged the batch to the
	// server, which has not replied yet. A durable driver must show the whole
	// batch after a relaunch.
	FaultAfterSyncBeforeReply = "after-sync-before-reply"
)

// FaultPoints lists the fault points, in commit order.
var FaultPoints = []string{FaultBeforeCommit, FaultAfterWriteBeforeSync, FaultAfterSyncBeforeReply}

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

// ParseFault parses a FaultEnv value. It reports false for an empty or
// malformed one.
func ParseFault(v string) (point string, n int, ok bool) {
	point, count, found := strings.Cut(v, "@")
	if !found {
		return "", 0, false
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return "", 0, false
	}
	for _, p := range FaultPoints {
		if p == point {
			return point, n, true
		}
	}
	return "", 0, false
}

// Fault marks a fault point of a commit. When FaultEnv names this point and
// this is its Nth hit, the process is killed here and Fault does not return.
// Otherwise it does nothing, cheaply.
func Fault(point string) {
	fault.once.Do(func() {
		if p, n, ok := ParseFault(os.Getenv(FaultEnv)); ok {
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

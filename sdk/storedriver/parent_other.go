//go:build !linux

package storedriver

import (
	"os"
	"time"
)

// watchParent arranges for onDeath to run when the parent process dies, by
// polling the parent pid.
func watchParent(onDeath func()) {
	ppid := os.Getppid()
	go func() {
		for {
			if os.Getppid() != ppid {
				onDeath()
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
}

package storedriver

import (
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// watchParent arranges for onDeath to run when the parent process dies.
//
// The parent-death signal (SIGTERM, handled by Serve) is set from a goroutine
// that holds its OS thread for the life of the process: the kernel keeps
// that setting per thread, and a Go thread can otherwise exit. A poll of the
// parent pid covers the parent dying before the signal was set, and systems
// where the signal is not delivered.
func watchParent(onDeath func()) {
	ppid := os.Getppid()
	set := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0)
		close(set)
		select {}
	}()
	<-set
	go pollParent(ppid, onDeath)
}

func pollParent(ppid int, onDeath func()) {
	for {
		if os.Getppid() != ppid {
			onDeath()
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

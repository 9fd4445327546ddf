// Command lazyfs mounts a file system that keeps every write in memory
// and forgets, at a power cut, everything not synced (package
// internal/lazyfs), and takes its commands on a FIFO:
//
//	lazyfs [-strict] [-control FIFO] [-debug] MOUNTPOINT
//
// Commands, one a line, written to the FIFO (made if missing; default
// MOUNTPOINT.control), e.g. echo cut > /tmp/mnt.control:
//
//	cut      cut the power: the mount point then holds what was synced
//	stats    print the counts of writes, syncs and cuts
//	unmount  unmount and exit
//
// Each command's outcome is a line on standard output. SIGINT and SIGTERM
// unmount and exit too. Kill the processes using the mount before a cut,
// as a power cut kills them: files they hold open answer EIO after it.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/agenthost/agenthost/internal/lazyfs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("lazyfs", flag.ContinueOnError)
	fl.SetOutput(stderr)
	strict := fl.Bool("strict", false, "make a name durable only when its directory is synced (POSIX), not also when its file is")
	control := fl.String("control", "", "the control FIFO (default MOUNTPOINT.control)")
	debug := fl.Bool("debug", false, "log every FUSE request")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: lazyfs [-strict] [-control FIFO] [-debug] MOUNTPOINT")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() != 1 {
		fl.Usage()
		return 2
	}
	mnt := fl.Arg(0)
	if *control == "" {
		*control = strings.TrimSuffix(mnt, "/") + ".control"
	}
	if err := syscall.Mkfifo(*control, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
		fmt.Fprintf(stderr, "lazyfs: control FIFO %s: %v\n", *control, err)
		return 1
	}
	if st, err := os.Stat(*control); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		fmt.Fprintf(stderr, "lazyfs: control %s is not a FIFO\n", *control)
		return 1
	}
	// Read and write: the FIFO never reads end-of-file between writers.
	ctl, err := os.OpenFile(*control, os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintf(stderr, "lazyfs: control FIFO: %v\n", err)
		return 1
	}
	defer ctl.Close()
	f, err := lazyfs.Mount(mnt, lazyfs.Options{Strict: *strict, Debug: *debug})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "mounted %s; commands on %s: cut, stats, unmount\n", mnt, *control)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			lines <- strings.TrimSpace(sc.Text())
		}
	}()
	for {
		var cmd string
		select {
		case <-ctx.Done():
			cmd = "unmount"
		case cmd = <-lines:
		}
		switch cmd {
		case "":
		case "cut":
			cs, err := f.Cut()
			if err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
			fmt.Fprintf(stdout, "cut: unsynced changes to %d files and %d directories dropped\n", cs.Files, cs.Dirs)
		case "stats":
			st := f.Stats()
			fmt.Fprintf(stdout, "stats: %d writes (%d bytes), %d file syncs, %d directory syncs, %d made, %d renames, %d cuts\n",
				st.Writes, st.BytesWritten, st.Syncs, st.DirSyncs, st.Creates, st.Renames, st.Cuts)
		case "unmount":
			if err := f.Unmount(); err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
			fmt.Fprintln(stdout, "unmounted")
			return 0
		default:
			fmt.Fprintf(stdout, "unknown command %q (cut, stats, unmount)\n", cmd)
		}
	}
}

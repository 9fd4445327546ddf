package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/lazyfs"
)

// TestControl drives the command through its FIFO: a file written and not
// synced is gone after "cut".
func TestControl(t *testing.T) {
	mnt := t.TempDir()
	probe, err := lazyfs.Mount(mnt, lazyfs.Options{})
	if err != nil {
		if errors.Is(err, lazyfs.ErrUnavailable) && os.Getenv("AGENTHOST_REQUIRE_ALL") != "1" {
			t.Skipf("%v (AGENTHOST_REQUIRE_ALL=1 makes this a failure)", err)
		}
		t.Fatal(err)
	}
	if err := probe.Unmount(); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), "ctl")
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		var stderr strings.Builder
		code := run(context.Background(), []string{"-control", fifo, mnt}, outW, &stderr)
		if code != 0 {
			t.Errorf("exit %d: %s", code, stderr.String())
		}
		outW.Close()
		done <- code
	}()
	lines := bufio.NewScanner(outR)
	next := func() string {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("the command's output ended: %v", lines.Err())
		}
		return lines.Text()
	}
	if got := next(); !strings.HasPrefix(got, "mounted ") {
		t.Fatalf("first line %q", got)
	}
	ctl, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	send := func(cmd string) string {
		t.Helper()
		if _, err := io.WriteString(ctl, cmd+"\n"); err != nil {
			t.Fatal(err)
		}
		return next()
	}
	if err := os.WriteFile(filepath.Join(mnt, "unsynced"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := send("stats"); !strings.Contains(got, "1 made") {
		t.Errorf("stats: %q", got)
	}
	if got := send("cut"); got != "cut: unsynced changes to 1 files and 1 directories dropped" {
		t.Errorf("cut: %q", got)
	}
	if _, err := os.Stat(filepath.Join(mnt, "unsynced")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file never synced is there after the cut: %v", err)
	}
	if got := send("bogus"); !strings.HasPrefix(got, "unknown command") {
		t.Errorf("bogus: %q", got)
	}
	if got := send("unmount"); got != "unmounted" {
		t.Errorf("unmount: %q", got)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the command did not exit after unmount")
	}
}

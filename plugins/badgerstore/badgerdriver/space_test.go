package badgerdriver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
)

// TestSpaceGuard: a commit is refused, with driver.ErrUnavailable and a
// clear message, when the filesystem cannot hold the unwritten part of the
// memtable logs and one more flush; accepted again once there is room.
func TestSpaceGuard(t *testing.T) {
	var free, unwritten int64
	measured := 0
	g := &spaceGuard{dir: "/data",
		statfs: func(_ string, st *syscall.Statfs_t) error {
			st.Bsize, st.Bavail = 4096, uint64(free/4096)
			return nil
		},
		unwritten: func(string) int64 { measured++; return unwritten },
	}
	var warned []string
	warn := func(msg string, _ ...any) { warned = append(warned, msg) }

	free, unwritten = 100<<20, 50<<20 // needs 50 + 64 + 8 MiB + the batch
	err := g.check(1000, warn)
	if !errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), "no space left on device") || !strings.Contains(err.Error(), "100 MiB free") {
		t.Fatalf("full disk: %v", err)
	}
	if err := g.check(1000, warn); err == nil || len(warned) != 1 {
		t.Fatalf("second refusal: %v, %d warnings (want one per 10s)", err, len(warned))
	}
	free = 200 << 20
	if err := g.check(1000, warn); err != nil {
		t.Fatalf("room again: %v", err)
	}
	measured = 0
	free = 8 << 30
	if err := g.check(1000, warn); err != nil || measured != 0 {
		t.Fatalf("plenty of room: %v, logs measured %d times", err, measured)
	}

	// A verdict of plenty is reused for a while and for a bounded number
	// of bytes, then the filesystem is asked again.
	free = 100 << 20
	if err := g.check(1000, warn); err != nil {
		t.Fatalf("plenty of room a moment ago: %v", err)
	}
	if err := g.check(plentyReuseBytes, warn); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("past the bytes a verdict of plenty covers: %v", err)
	}
	free = 8 << 30
	if err := g.check(1000, warn); err != nil {
		t.Fatalf("plenty of room again: %v", err)
	}
	free = 100 << 20
	g.mu.Lock()
	g.plentyAt = g.plentyAt.Add(-plentyReuse)
	g.mu.Unlock()
	if err := g.check(1000, warn); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("past the time a verdict of plenty covers: %v", err)
	}
}

// TestUnwrittenLogBytes: the newest memtable log counts what is not yet
// allocated of one memtable's size.
func TestUnwrittenLogBytes(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(DefaultConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(t.Context())
	n := unwrittenLogBytes(dir)
	if n <= 0 || n > memTableSize {
		t.Fatalf("unwritten log bytes of a fresh store: %d, want in (0, %d]", n, memTableSize)
	}
}

// TestUnwrittenLogBytesNewestOnly: older logs are full or being flushed,
// and badger switches logs after one memtable's size, not at the end of the
// sparse file twice that size.
func TestUnwrittenLogBytesNewestOnly(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"00009.mem", "00010.mem", "notes.mem"} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(2 * memTableSize); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if n := unwrittenLogBytes(dir); n != memTableSize {
		t.Fatalf("two empty sparse logs: %d unwritten bytes, want %d", n, memTableSize)
	}
	// Allocate the head of the newest log: its gap shrinks by as much.
	f, err := os.OpenFile(filepath.Join(dir, "00010.mem"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if n := unwrittenLogBytes(dir); n > memTableSize-1<<20 || n < memTableSize-2<<20 {
		t.Fatalf("newest log with 1 MiB written: %d unwritten bytes, want about %d", n, memTableSize-1<<20)
	}
}

package lazyfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// TestCutDetachFails: when the old mount cannot be detached at a cut,
// Unmount still detaches it, and its mount point can then be removed.
func TestCutDetachFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := Mount(dir, Options{})
	if err != nil {
		if errors.Is(err, ErrUnavailable) && os.Getenv("AGENTHOST_REQUIRE_ALL") != "1" {
			t.Skipf("%v (AGENTHOST_REQUIRE_ALL=1 makes this a failure)", err)
		}
		t.Fatal(err)
	}
	failed := errors.New("detach refused")
	f.detach = func(*fuse.Server, string) error { return failed }
	if _, err := f.Cut(); !errors.Is(err, failed) {
		_ = f.Unmount()
		t.Fatalf("cut with a failing detach: %v", err)
	}
	f.detach = detach
	if err := f.Unmount(); err != nil {
		t.Fatalf("unmount after the failed cut: %v", err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatalf("the mount point stays after Unmount: %v", err)
	}
}

package lazyfs_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agenthost/agenthost/internal/lazyfs"
)

// helperEnv re-executes this test binary as a helper process that maps a
// file on the mount: a page fault on a FUSE file must not be taken in the
// process that serves the file system (the Go runtime cannot stop a thread
// stuck in one).
const helperEnv = "LAZYFS_TEST_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		if err := helper(h, os.Args[len(os.Args)-1]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helper maps path shared and does what h says (or, for
// "mount-and-die", mounts a file system on path and exits without
// unmounting it): "write-sync" writes
// "mapped" at 4096 and msyncs, "write" writes it without a sync, "read"
// prints the 6 bytes at 4096.
func helper(h, path string) error {
	if h == "mount-and-die" {
		if _, err := lazyfs.Mount(path, lazyfs.Options{}); err != nil {
			return err
		}
		os.Exit(0) // without unmounting
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(m)
	switch h {
	case "write-sync":
		copy(m[4096:], "mapped")
		return unix.Msync(m, unix.MS_SYNC)
	case "write":
		copy(m[4096:], "mapped")
		return nil
	case "read":
		_, err := os.Stdout.Write(m[4096 : 4096+6])
		return err
	}
	return fmt.Errorf("unknown helper %q", h)
}

// mount mounts a file system for t, skipping t when FUSE cannot be
// mounted here, unless AGENTHOST_REQUIRE_ALL=1.
func mount(t *testing.T, opts lazyfs.Options) *lazyfs.FS {
	t.Helper()
	dir := t.TempDir()
	f, err := lazyfs.Mount(dir, opts)
	if err != nil {
		if errors.Is(err, lazyfs.ErrUnavailable) && os.Getenv("AGENTHOST_REQUIRE_ALL") != "1" {
			t.Skipf("%v (AGENTHOST_REQUIRE_ALL=1 makes this a failure)", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, s string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	must(t, err)
	_, err = f.WriteString(s)
	must(t, err)
	if sync {
		must(t, f.Sync())
	}
	must(t, f.Close())
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	must(t, err)
	must(t, d.Sync())
	must(t, d.Close())
}

func cut(t *testing.T, f *lazyfs.FS) lazyfs.CutStats {
	t.Helper()
	cs, err := f.Cut()
	must(t, err)
	return cs
}

// content is the file's content, "<absent>" when it does not exist.
func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "<absent>"
	}
	must(t, err)
	return string(b)
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	must(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteNeedsFsync(t *testing.T) {
	f := mount(t, lazyfs.Options{})
	a, b := filepath.Join(f.Dir(), "a"), filepath.Join(f.Dir(), "b")
	write(t, a, "synced", true)
	write(t, b, "unsynced", false)
	syncDir(t, f.Dir())
	if got := content(t, b); got != "unsynced" {
		t.Fatalf("before the cut b reads %q", got)
	}
	cs := cut(t, f)
	if got := content(t, a); got != "synced" {
		t.Errorf("a synced file reads %q after the cut", got)
	}
	if got := content(t, b); got != "" {
		t.Errorf("a file whose name was synced but not its data reads %q after the cut, want it empty", got)
	}
	if cs.Files != 1 {
		t.Errorf("the cut dropped %d files' changes, want 1", cs.Files)
	}
	// A write after the sync is lost; the data synced before it is not.
	fh, err := os.OpenFile(a, os.O_WRONLY, 0)
	must(t, err)
	_, err = fh.WriteAt([]byte("SY"), 0)
	must(t, err)
	must(t, fh.Close())
	cut(t, f)
	if got := content(t, a); got != "synced" {
		t.Errorf("a write after the last fsync survived the cut: %q", got)
	}
}

func TestFdatasyncAndODsync(t *testing.T) {
	f := mount(t, lazyfs.Options{})
	p := filepath.Join(f.Dir(), "d")
	fh, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
	must(t, err)
	_, err = fh.WriteString("datasync")
	must(t, err)
	must(t, unix.Fdatasync(int(fh.Fd())))
	must(t, fh.Close())
	q := filepath.Join(f.Dir(), "o")
	fh, err = os.OpenFile(q, os.O_CREATE|os.O_WRONLY|syscall.O_DSYNC, 0o644)
	must(t, err)
	_, err = fh.WriteString("odsync")
	must(t, err)
	must(t, fh.Close())
	cut(t, f)
	if got := content(t, p); got != "datasync" {
		t.Errorf("after fdatasync: %q", got)
	}
	if got := content(t, q); got != "odsync" {
		t.Errorf("written with O_DSYNC: %q", got)
	}
}

// TestNames: a new name is durable once its directory is synced; by
// default also once the file itself is, never otherwise.
func TestNames(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			f := mount(t, lazyfs.Options{Strict: strict})
			d := filepath.Join(f.Dir(), "d")
			must(t, os.Mkdir(d, 0o755))
			write(t, filepath.Join(d, "filesynced"), "x", true)
			write(t, filepath.Join(f.Dir(), "nosync"), "y", false)
			cut(t, f)
			want := []string{"d"}
			if strict {
				want = nil
			}
			if got := names(t, f.Dir()); !slices.Equal(got, want) {
				t.Fatalf("after the cut the root holds %v, want %v", got, want)
			}
			if !strict {
				if got := content(t, filepath.Join(d, "filesynced")); got != "x" {
					t.Fatalf("a synced new file reads %q", got)
				}
			}
			// With the directories synced, every name is kept.
			must(t, os.MkdirAll(d, 0o755))
			write(t, filepath.Join(d, "filesynced"), "x", true)
			write(t, filepath.Join(f.Dir(), "nosync"), "", false)
			syncDir(t, d)
			syncDir(t, f.Dir())
			cut(t, f)
			if got := names(t, f.Dir()); !slices.Equal(got, []string{"d", "nosync"}) {
				t.Fatalf("after syncing the directories the root holds %v", got)
			}
			if got := names(t, d); !slices.Equal(got, []string{"filesynced"}) {
				t.Fatalf("after syncing the directories d holds %v", got)
			}
		})
	}
}

func TestUnlinkAndRename(t *testing.T) {
	f := mount(t, lazyfs.Options{})
	root := f.Dir()
	for _, n := range []string{"gone", "old", "keep"} {
		write(t, filepath.Join(root, n), n, true)
	}
	syncDir(t, root)
	must(t, os.Remove(filepath.Join(root, "gone")))
	must(t, os.Rename(filepath.Join(root, "old"), filepath.Join(root, "new")))
	if got := names(t, root); !slices.Equal(got, []string{"keep", "new"}) {
		t.Fatalf("before the cut: %v", got)
	}
	cut(t, f)
	if got := names(t, root); !slices.Equal(got, []string{"gone", "keep", "old"}) {
		t.Fatalf("an unlink and a rename not synced: after the cut %v, want them undone", got)
	}
	must(t, os.Remove(filepath.Join(root, "gone")))
	must(t, os.Rename(filepath.Join(root, "old"), filepath.Join(root, "keep"))) // over a file
	syncDir(t, root)
	cut(t, f)
	if got := names(t, root); !slices.Equal(got, []string{"keep"}) {
		t.Fatalf("an unlink and a rename synced: after the cut %v", got)
	}
	if got := content(t, filepath.Join(root, "keep")); got != "old" {
		t.Fatalf("the file renamed over keep reads %q", got)
	}
	// Errors a program relies on.
	must(t, os.Mkdir(filepath.Join(root, "dir"), 0o755))
	write(t, filepath.Join(root, "dir", "x"), "", false)
	if err := os.Remove(filepath.Join(root, "dir")); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Errorf("rmdir of a directory with a file: %v, want ENOTEMPTY", err)
	}
	if err := syscall.Rename(filepath.Join(root, "keep"), filepath.Join(root, "dir")); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("renaming a file over a directory: %v, want EISDIR", err)
	}
	if _, err := os.OpenFile(filepath.Join(root, "keep"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errors.Is(err, os.ErrExist) {
		t.Errorf("O_EXCL on an existing file: %v", err)
	}
}

func TestTruncate(t *testing.T) {
	f := mount(t, lazyfs.Options{})
	p := filepath.Join(f.Dir(), "t")
	big := bytes.Repeat([]byte("0123456789"), 20000)
	write(t, p, string(big), true)
	syncDir(t, f.Dir())
	must(t, os.Truncate(p, 10))
	cut(t, f)
	if got := content(t, p); got != string(big) {
		t.Fatalf("a truncation not synced survived: %d bytes", len(got))
	}
	fh, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	must(t, fh.Truncate(10))
	must(t, fh.Sync())
	must(t, fh.Close())
	cut(t, f)
	if got := content(t, p); got != "0123456789" {
		t.Fatalf("a synced truncation: %d bytes", len(got))
	}
	// Sparse: a file of 2 GiB with 3 bytes at its end.
	fh, err = os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	must(t, fh.Truncate(2<<30))
	_, err = fh.WriteAt([]byte("end"), 2<<30-3)
	must(t, err)
	must(t, fh.Sync())
	must(t, fh.Close())
	cut(t, f)
	st, err := os.Stat(p)
	must(t, err)
	if st.Size() != 2<<30 {
		t.Fatalf("size %d after the cut, want 2 GiB", st.Size())
	}
}

// TestMmap: a shared mapping reads the file, and its writes are durable
// once msync'd (the kernel writes the pages back, then syncs), lost
// otherwise.
func TestMmap(t *testing.T) {
	f := mount(t, lazyfs.Options{})
	exe, err := os.Executable()
	must(t, err)
	run := func(h, path string) string {
		t.Helper()
		cmd := exec.Command(exe, "-test.run=^$", path)
		cmd.Env = append(os.Environ(), helperEnv+"="+h)
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("helper %s: %v\n%s", h, err, ee.Stderr)
			}
			t.Fatalf("helper %s: %v", h, err)
		}
		return string(out)
	}
	p := filepath.Join(f.Dir(), "m")
	fh, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	must(t, err)
	must(t, fh.Truncate(1<<20))
	_, err = fh.WriteAt([]byte("pwrite"), 4096)
	must(t, err)
	must(t, fh.Sync())
	must(t, fh.Close())
	syncDir(t, f.Dir())
	if got := run("read", p); got != "pwrite" {
		t.Fatalf("a mapping reads %q, want what pwrite wrote", got)
	}
	run("write", p)
	cut(t, f)
	if got := run("read", p); got != "pwrite" {
		t.Fatalf("a write through a mapping, never synced, survived the cut: %q", got)
	}
	run("write-sync", p)
	cut(t, f)
	if got := run("read", p); got != "mapped" {
		t.Fatalf("a write through a mapping, msync'd, reads %q after the cut", got)
	}
	b, err := os.ReadFile(p)
	must(t, err)
	if string(b[4096:4102]) != "mapped" {
		t.Fatalf("read(2) sees %q", b[4096:4102])
	}
}

// TestCutWithOpenFile: a file still open at the cut answers EIO, and the
// new mount serves what was synced.
func TestCutWithOpenFile(t *testing.T) {
	f := mount(t, lazyfs.Options{})
	p := filepath.Join(f.Dir(), "open")
	fh, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	must(t, err)
	defer fh.Close()
	_, err = fh.WriteString("before")
	must(t, err)
	must(t, fh.Sync())
	syncDir(t, f.Dir())
	cut(t, f)
	if _, err := fh.WriteString("after"); err == nil {
		t.Fatal("a write to a file opened before the cut succeeded")
	}
	if got := content(t, p); got != "before" {
		t.Fatalf("after the cut: %q", got)
	}
	st := f.Stats()
	if st.Cuts != 1 || st.Syncs < 1 || st.DirSyncs < 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMountErrors(t *testing.T) {
	if _, err := lazyfs.Mount(filepath.Join(t.TempDir(), "missing"), lazyfs.Options{}); err == nil || errors.Is(err, lazyfs.ErrUnavailable) {
		t.Errorf("mounting on a missing directory: %v", err)
	}
	p := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(p, nil, 0o644))
	if _, err := lazyfs.Mount(p, lazyfs.Options{}); err == nil || errors.Is(err, lazyfs.ErrUnavailable) {
		t.Errorf("mounting on a file: %v", err)
	}
}

// TestDetachStale: a mount whose process died is detached, a live one is
// left alone.
func TestDetachStale(t *testing.T) {
	live := mount(t, lazyfs.Options{})
	parent := filepath.Dir(live.Dir())
	dead := filepath.Join(parent, "dead")
	must(t, os.Mkdir(dead, 0o755))
	exe, err := os.Executable()
	must(t, err)
	cmd := exec.Command(exe, "-test.run=^$", dead)
	cmd.Env = append(os.Environ(), helperEnv+"=mount-and-die")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if _, err := os.Stat(dead); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("the dead mount answers %v, want ENOTCONN", err)
	}
	got, err := lazyfs.DetachStale(parent)
	must(t, err)
	if !slices.Equal(got, []string{dead}) {
		t.Fatalf("detached %v, want [%s]", got, dead)
	}
	if _, err := os.Stat(dead); err != nil {
		t.Fatalf("after the detach: %v", err)
	}
	write(t, filepath.Join(live.Dir(), "still"), "live", false)
	if got := content(t, filepath.Join(live.Dir(), "still")); got != "live" {
		t.Fatalf("the live mount reads %q", got)
	}
}

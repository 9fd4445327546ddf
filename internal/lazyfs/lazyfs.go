package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// ErrUnavailable: FUSE cannot be mounted here (no /dev/fuse, no
// permission to mount, no fusermount for a user other than root).
var ErrUnavailable = errors.New("lazyfs: FUSE is not available")

// Options configure a file system.
type Options struct {
	// Strict makes a name durable only when its directory is synced, as
	// POSIX promises. By default syncing a file or a directory also makes
	// its own name durable, and its directory's name up to the root, as
	// ext4, XFS and btrfs do (see the package documentation).
	Strict bool
	// Debug logs every FUSE request.
	Debug bool
}

// Stats count what the file system was asked to do, over all its mounts.
type Stats struct {
	Writes       int64 // write and truncate requests
	BytesWritten int64
	Syncs        int64 // fsync and fdatasync of files (O_SYNC writes too)
	DirSyncs     int64 // fsync of directories
	Creates      int64 // files and directories made
	Renames      int64
	Cuts         int64
}

// CutStats say what a power cut dropped: the files and directories
// changed since they were last synced (some may have been removed).
type CutStats struct {
	Files, Dirs int
}

// FS is a mounted file system that forgets, at a power cut, everything
// not synced. See the package documentation for its rules.
type FS struct {
	dir  string
	opts Options

	cutMu  sync.Mutex                       // one Cut or Unmount at a time
	detach func(*fuse.Server, string) error // detach, but in tests

	mu    sync.Mutex // guards every node's state, and what follows
	srv   *fuse.Server
	gen   *generation
	root  *node
	stats Stats
}

// Mount mounts an empty file system on dir, an existing directory. It
// fails with ErrUnavailable when FUSE cannot be mounted here.
func Mount(dir string, opts Options) (*FS, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount point: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("lazyfs: mount point %s is not a directory", dir)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	f := &FS{dir: dir, opts: opts, detach: detach}
	m := newMeta(context.Background(), 0o755)
	root := &node{fsys: f, dir: true, attr: m, sattr: m}
	if err := f.mount(root); err != nil {
		return nil, err
	}
	return f, nil
}

// mount mounts a new generation whose root is root.
func (f *FS) mount(root *node) error {
	g := &generation{nodes: []*node{root}}
	root.gen = g
	timeout := time.Second
	srv, err := fs.Mount(f.dir, root, &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName: "lazyfs", Name: "lazyfs",
			DirectMount:   os.Geteuid() == 0,
			DisableXAttrs: true,
			Debug:         f.opts.Debug,
		},
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
	})
	if err != nil {
		return fmt.Errorf("%w: mounting %s: %v", ErrUnavailable, f.dir, err)
	}
	f.mu.Lock()
	f.srv, f.gen, f.root = srv, g, root
	f.mu.Unlock()
	return nil
}

// Dir is the mount point.
func (f *FS) Dir() string { return f.dir }

// Stats returns the counts so far.
func (f *FS) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Cut cuts the power: from this instant every request to the mount fails
// with EIO and changes nothing, and the mount point then holds a new mount
// whose contents are what was synced before the cut. Processes that still
// have files open on the old mount keep getting EIO from them; they should
// have been killed first, as a power cut kills them.
func (f *FS) Cut() (CutStats, error) {
	f.cutMu.Lock()
	defer f.cutMu.Unlock()
	f.mu.Lock()
	if f.srv == nil {
		f.mu.Unlock()
		return CutStats{}, errors.New("lazyfs: not mounted")
	}
	old, oldRoot, srv := f.gen, f.root, f.srv
	old.dead = true
	var cs CutStats
	for _, n := range old.nodes {
		switch {
		case !n.dirty:
		case n.dir:
			cs.Dirs++
		default:
			cs.Files++
		}
	}
	f.stats.Cuts++
	f.srv = nil
	f.mu.Unlock()
	if err := f.detach(srv, f.dir); err != nil {
		// The dead mount is still there: Unmount tries again (else its
		// mount point stays busy, and nothing can remove it).
		f.mu.Lock()
		f.srv = srv
		f.mu.Unlock()
		return cs, err
	}
	// The old mount is dead: its nodes change no more, and the new one
	// is built from what they synced without the lock.
	root := &node{fsys: f, dir: true, attr: oldRoot.sattr, sattr: oldRoot.sattr, from: oldRoot}
	return cs, f.mount(root)
}

// Unmount unmounts the file system; what it held is gone.
func (f *FS) Unmount() error {
	f.cutMu.Lock()
	defer f.cutMu.Unlock()
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	if f.gen != nil {
		f.gen.dead = true
	}
	f.mu.Unlock()
	if srv == nil {
		return nil
	}
	return f.detach(srv, f.dir)
}

// detach unmounts srv from dir: at once when nothing holds it, lazily
// otherwise (the kernel ends the mount when the last file open on it is
// closed, and srv answers EIO until then).
func detach(srv *fuse.Server, dir string) error {
	if err := srv.Unmount(); err == nil {
		return nil
	}
	if err := lazyDetach(dir); err != nil {
		return err
	}
	go srv.Wait()
	return nil
}

// lazyDetach detaches the mount on dir, which the kernel ends once nothing
// holds it.
func lazyDetach(dir string) error {
	var err error
	if os.Geteuid() == 0 {
		err = syscall.Unmount(dir, syscall.MNT_DETACH)
	} else {
		bin, lerr := exec.LookPath("fusermount3")
		if lerr != nil {
			bin = "fusermount"
		}
		var out []byte
		if out, err = exec.Command(bin, "-u", "-z", dir).CombinedOutput(); err != nil {
			err = fmt.Errorf("%v: %s", err, out)
		}
	}
	if err != nil {
		return fmt.Errorf("lazyfs: unmounting %s: %w", dir, err)
	}
	return nil
}

// DetachStale detaches the mounts of this file system under dir whose
// server is gone (a process that mounted one and died without unmounting
// it: the mount point then answers ENOTCONN, and nothing can remove the
// directory it is in), and returns their mount points. Live mounts, of
// this process or another, are left alone.
func DetachStale(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	var out []string
	for line := range strings.Lines(string(b)) {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) || fields[sep+1] != "fuse.lazyfs" {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp != dir && !strings.HasPrefix(mp, dir+"/") {
			continue
		}
		if _, err := os.Stat(mp); !errors.Is(err, syscall.ENOTCONN) {
			continue
		}
		if err := lazyDetach(mp); err != nil {
			return out, err
		}
		out = append(out, mp)
	}
	return out, nil
}

// unescapeMount undoes the octal escapes of /proc/self/mountinfo.
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

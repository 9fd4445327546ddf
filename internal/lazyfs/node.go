package lazyfs

import (
	"context"
	"slices"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// generation is one mount of the file system. A power cut ends it: from
// then on every request to it fails with EIO, whatever process makes it,
// and nothing it does reaches the file system's state.
type generation struct {
	dead  bool    // guarded by FS.mu
	nodes []*node // every node of the mount, for the cut's count
}

// meta is the attributes of a file or directory kept across a cut.
type meta struct {
	mode         uint32 // permission bits
	uid, gid     uint32
	atime, mtime time.Time
	ctime        time.Time
}

// node is a file or a directory. Its state is guarded by its FS's mu.
// A directory's entries as they are now are its fs.Inode children; those
// a cut keeps are entries, as of its last sync.
type node struct {
	fs.Inode
	fsys *FS
	gen  *generation
	dir  bool

	data, synced contents // files: now, and as of the last sync
	attr, sattr  meta     // now, and as of the last sync
	entries      map[string]*node
	dirty        bool // changed since the last sync

	from *node // a new mount's root: the root of the mount the cut ended
}

var (
	_ fs.NodeLookuper  = (*node)(nil)
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeCreater   = (*node)(nil)
	_ fs.NodeMkdirer   = (*node)(nil)
	_ fs.NodeUnlinker  = (*node)(nil)
	_ fs.NodeRmdirer   = (*node)(nil)
	_ fs.NodeRenamer   = (*node)(nil)
	_ fs.NodeOpener    = (*node)(nil)
	_ fs.NodeOpendirer = (*node)(nil)
	_ fs.NodeReader    = (*node)(nil)
	_ fs.NodeWriter    = (*node)(nil)
	_ fs.NodeFsyncer   = (*node)(nil)
	_ fs.NodeFlusher   = (*node)(nil)
	_ fs.NodeAllocater = (*node)(nil)
	_ fs.NodeStatfser  = (*node)(nil)
	_ fs.NodeOnAdder   = (*node)(nil)
	_ fs.NodeReleaser  = (*node)(nil)
	_ fs.NodeAccesser  = (*node)(nil)
)

// handle is an open file: whether its writes are synced as they are made
// (O_SYNC, O_DSYNC).
type handle struct{ sync bool }

func (g *generation) add(fsys *FS, dir bool, m meta) *node {
	n := &node{fsys: fsys, gen: g, dir: dir, attr: m}
	g.nodes = append(g.nodes, n)
	return n
}

func (n *node) stable() fs.StableAttr {
	if n.dir {
		return fs.StableAttr{Mode: syscall.S_IFDIR}
	}
	return fs.StableAttr{Mode: syscall.S_IFREG}
}

// lock takes the file system's lock; false (and unlocked) when the mount
// has been cut.
func (n *node) lock() bool {
	n.fsys.mu.Lock()
	if n.gen.dead {
		n.fsys.mu.Unlock()
		return false
	}
	return true
}

func (n *node) unlock() { n.fsys.mu.Unlock() }

// fill writes n's attributes; the lock is held.
func (n *node) fill(a *fuse.Attr) {
	a.Mode = n.attr.mode
	a.Uid, a.Gid = n.attr.uid, n.attr.gid
	a.SetTimes(&n.attr.atime, &n.attr.mtime, &n.attr.ctime)
	a.Blksize = 4096
	if n.dir {
		a.Nlink = 2
		a.Size = 4096
	} else {
		a.Nlink = 1
		a.Size = uint64(n.data.size)
		a.Blocks = uint64(len(n.data.chunks)) * chunkSize / 512
	}
}

func newMeta(ctx context.Context, mode uint32) meta {
	now := time.Now()
	m := meta{mode: mode & 0o7777, atime: now, mtime: now, ctime: now}
	if c, ok := ctx.(*fuse.Context); ok {
		m.uid, m.gid = c.Caller.Uid, c.Caller.Gid
	}
	return m
}

// OnAdd builds a new mount's tree from what the cut mount had synced.
func (n *node) OnAdd(ctx context.Context) {
	if n.from == nil {
		return
	}
	seen := map[*node]*fs.Inode{n.from: n.EmbeddedInode()}
	n.adopt(ctx, n.from, seen)
	n.from = nil
}

// adopt gives n, new, the synced entries of old, recursively. A file
// synced under two names (renamed, and only one directory synced since)
// has both; a directory is kept in the first place found.
func (n *node) adopt(ctx context.Context, old *node, seen map[*node]*fs.Inode) {
	n.entries = map[string]*node{}
	names := make([]string, 0, len(old.entries))
	for name := range old.entries {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		oc := old.entries[name]
		if in, ok := seen[oc]; ok {
			if !oc.dir {
				n.AddChild(name, in, false)
				n.entries[name] = in.Operations().(*node)
			}
			continue
		}
		c := n.gen.add(n.fsys, oc.dir, oc.sattr)
		c.sattr = oc.sattr
		c.synced = oc.synced.clone()
		c.data = oc.synced.clone()
		in := n.NewPersistentInode(ctx, c, c.stable())
		seen[oc] = in
		n.AddChild(name, in, false)
		n.entries[name] = c
		if oc.dir {
			c.adopt(ctx, oc, seen)
		}
	}
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.lock() {
		return nil, syscall.EIO
	}
	defer n.unlock()
	ch := n.GetChild(name)
	if ch == nil {
		return nil, syscall.ENOENT
	}
	ch.Operations().(*node).fill(&out.Attr)
	return ch, 0
}

func (n *node) Access(ctx context.Context, mask uint32) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	n.unlock()
	return 0
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	defer n.unlock()
	n.fill(&out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	defer n.unlock()
	now := time.Now()
	if sz, ok := in.GetSize(); ok {
		if n.dir {
			return syscall.EISDIR
		}
		n.data.truncate(int64(sz), n.synced.chunks)
		n.attr.mtime = now
		n.fsys.stats.Writes++
	}
	if m, ok := in.GetMode(); ok {
		n.attr.mode = m & 0o7777
	}
	if u, ok := in.GetUID(); ok {
		n.attr.uid = u
	}
	if g, ok := in.GetGID(); ok {
		n.attr.gid = g
	}
	if t, ok := in.GetATime(); ok {
		n.attr.atime = t
	}
	if t, ok := in.GetMTime(); ok {
		n.attr.mtime = t
	}
	n.attr.ctime = now
	n.dirty = true
	n.fill(&out.Attr)
	return 0
}

// create makes a child of n; the lock is held.
func (n *node) create(ctx context.Context, name string, dir bool, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.dir {
		return nil, syscall.ENOTDIR
	}
	if n.GetChild(name) != nil {
		return nil, syscall.EEXIST
	}
	c := n.gen.add(n.fsys, dir, newMeta(ctx, mode))
	c.dirty = true
	n.dirty = true
	n.attr.mtime = c.attr.mtime
	c.fill(&out.Attr)
	n.fsys.stats.Creates++
	return n.NewPersistentInode(ctx, c, c.stable()), 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if !n.lock() {
		return nil, nil, 0, syscall.EIO
	}
	defer n.unlock()
	in, errno := n.create(ctx, name, false, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return in, &handle{sync: flags&syscall.O_DSYNC != 0}, fuse.FOPEN_KEEP_CACHE, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.lock() {
		return nil, syscall.EIO
	}
	defer n.unlock()
	return n.create(ctx, name, true, mode, out)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, false)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, true)
}

func (n *node) remove(name string, dir bool) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	defer n.unlock()
	ch := n.GetChild(name)
	switch {
	case ch == nil:
		return syscall.ENOENT
	case dir && !ch.IsDir():
		return syscall.ENOTDIR
	case !dir && ch.IsDir():
		return syscall.EISDIR
	case dir && len(ch.Children()) > 0:
		return syscall.ENOTEMPTY
	}
	n.dirty = true
	n.attr.mtime = time.Now()
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	defer n.unlock()
	np, ok := newParent.(*node)
	if !ok || np.gen != n.gen {
		return syscall.EXDEV
	}
	if flags&^uint32(unix.RENAME_NOREPLACE) != 0 {
		return syscall.EINVAL // RENAME_EXCHANGE, RENAME_WHITEOUT
	}
	src := n.GetChild(name)
	if src == nil {
		return syscall.ENOENT
	}
	if dst := np.GetChild(newName); dst != nil && dst != src {
		switch {
		case flags&unix.RENAME_NOREPLACE != 0:
			return syscall.EEXIST
		case src.IsDir() && !dst.IsDir():
			return syscall.ENOTDIR
		case !src.IsDir() && dst.IsDir():
			return syscall.EISDIR
		case dst.IsDir() && len(dst.Children()) > 0:
			return syscall.ENOTEMPTY
		}
	}
	now := time.Now()
	n.dirty, np.dirty = true, true
	n.attr.mtime, np.attr.mtime = now, now
	n.fsys.stats.Renames++
	return 0
}

func (n *node) Opendir(ctx context.Context) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	n.unlock()
	return 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if !n.lock() {
		return nil, 0, syscall.EIO
	}
	defer n.unlock()
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		n.data.truncate(0, n.synced.chunks)
		n.attr.mtime = time.Now()
		n.dirty = true
	}
	return &handle{sync: flags&syscall.O_DSYNC != 0}, fuse.FOPEN_KEEP_CACHE, 0
}

func (n *node) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if !n.lock() {
		return nil, syscall.EIO
	}
	defer n.unlock()
	k := n.data.readAt(dest, off)
	return fuse.ReadResultData(dest[:k]), 0
}

func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if !n.lock() {
		return 0, syscall.EIO
	}
	defer n.unlock()
	if off < 0 {
		return 0, syscall.EINVAL
	}
	n.data.writeAt(data, off, n.synced.chunks)
	n.attr.mtime = time.Now()
	n.dirty = true
	n.fsys.stats.Writes++
	n.fsys.stats.BytesWritten += int64(len(data))
	if h, ok := fh.(*handle); ok && h.sync {
		n.sync()
	}
	return uint32(len(data)), 0
}

func (n *node) Allocate(ctx context.Context, fh fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	const keepSize, punchHole = 0x01, 0x02 // FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE
	if !n.lock() {
		return syscall.EIO
	}
	defer n.unlock()
	end := int64(off + size)
	switch mode {
	case 0:
		if end > n.data.size {
			n.data.truncate(end, n.synced.chunks)
		}
	case keepSize:
	case punchHole | keepSize:
		n.data.zero(int64(off), end, n.synced.chunks)
	default:
		return syscall.EOPNOTSUPP
	}
	n.attr.mtime = time.Now()
	n.dirty = true
	return 0
}

func (n *node) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	n.unlock()
	return 0
}

func (n *node) Release(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

// Fsync makes n durable: a file's contents and attributes, a directory's
// entries (fsync and fdatasync alike).
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	defer n.unlock()
	n.sync()
	return 0
}

// sync makes n durable; the lock is held. Unless the file system is
// strict, n's name, and its directory's up to the root, become durable
// with it.
func (n *node) sync() {
	n.sattr = n.attr
	if n.dir {
		n.fsys.stats.DirSyncs++
		n.entries = map[string]*node{}
		for name, ch := range n.Children() {
			n.entries[name] = ch.Operations().(*node)
		}
	} else {
		n.fsys.stats.Syncs++
		n.synced = n.data.clone()
	}
	n.dirty = false
	if n.fsys.opts.Strict {
		return
	}
	for c := n; ; {
		name, p := c.Parent()
		if p == nil {
			return
		}
		pn := p.Operations().(*node)
		if pn.entries == nil {
			pn.entries = map[string]*node{}
		}
		pn.entries[name] = c
		c = pn
	}
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	defer n.unlock()
	const blocks = 1 << 30 // 4 TiB of 4 KiB blocks
	var used uint64
	for _, x := range n.gen.nodes {
		used += uint64(len(x.data.chunks)) * (chunkSize / 4096)
	}
	out.Bsize, out.Frsize, out.NameLen = 4096, 4096, 255
	out.Blocks = blocks
	out.Bfree = blocks - min(used, blocks)
	out.Bavail = out.Bfree
	out.Files = 1 << 20
	out.Ffree = out.Files - min(uint64(len(n.gen.nodes)), out.Files)
	return 0
}

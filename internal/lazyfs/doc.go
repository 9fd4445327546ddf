// Package lazyfs is a FUSE file system that keeps every write in memory
// until it is synced, and forgets, at a simulated power cut, everything
// not synced: what a machine's disk holds after it loses power. The
// conformance suite runs a durable store driver on it, cuts the power
// after the driver acknowledged commits, and checks that the driver still
// has them: a driver that acknowledges a commit before it is synced passes
// a kill -9 (the kernel keeps the written pages), but not this.
//
// Mount mounts an empty file system on a directory; FS.Cut cuts the power;
// FS.Unmount ends it. The command internal/lazyfs/cmd/lazyfs mounts one
// and takes "cut" on a FIFO. Mounting needs /dev/fuse and either root
// (the mount is made directly) or fusermount3 (Debian package fuse3);
// Mount fails with ErrUnavailable otherwise.
//
// # What is durable
//
// Everything lives in memory: the file system as it is now, which every
// process sees, and the file system as a power cut would leave it, which
// changes only by syncs:
//
//   - write, pwrite, truncate (and ftruncate, fallocate, O_TRUNC) change a
//     file now; fsync or fdatasync of the file makes its contents, size and
//     attributes durable (fdatasync is fsync here). A file opened with
//     O_SYNC or O_DSYNC is synced by each write.
//   - Writes through a shared memory mapping reach the file system when the
//     kernel writes the pages back; msync(MS_SYNC) writes them back and
//     syncs the file, as fsync does. Mapped reads read the file.
//   - create, mkdir, unlink, rmdir and rename change a directory's entries
//     now; fsync of the directory makes its entries, all of them, durable.
//   - By default, syncing a file or a directory also makes its own name
//     durable, and its directory's name, up to the root: ext4 and XFS
//     commit every earlier name change with their journal at an fsync, and
//     btrfs logs a synced file's new name, so on Linux a new file that was
//     synced is found after a crash. With Options.Strict, only a
//     directory's sync makes names durable, as POSIX promises and nothing
//     more.
//
// A program that never syncs a directory therefore loses, at a cut, every
// name it made there that no sync of the file under it made durable (by
// default), or every name it made there (strict); an unlink or a rename
// not followed by a sync of its directories is undone (a rename whose
// target directory alone was synced leaves the file under both names).
// sync(2) and syncfs(2) do not reach a FUSE file system and make nothing
// durable here; nor does close(2).
//
// # A power cut
//
// From the instant of Cut, every request to the mount fails with EIO and
// changes nothing, whatever process makes it; the mount is detached and a
// new one mounted on the same directory, whose contents are what was
// durable. The kernel's caches go with the old mount, so nothing written
// before the cut can come back from them. Processes should be killed
// before the cut, as a power cut kills them; a file one still holds open
// keeps answering EIO.
//
// It is meant for tests: every mount's files stay in memory, the contents
// of removed files included, until the next cut or the unmount.
//
// Not kept: hard links, symbolic links, special files, extended
// attributes (each refused). File locks are the kernel's, per mount.
package lazyfs

package badgerdriver

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
)

// A full disk must be refused, not written into. badger appends each commit
// to its memtable's write-ahead log through a memory map of a sparse file
// (twice the memtable's size): on a filesystem with no room left for the
// next page, the write faults (SIGBUS) and the process dies, again at every
// relaunch while the disk stays full. So before a commit is queued, the
// driver checks that the filesystem still has room for the unwritten part
// of the current log and for one more flush of a memtable to a table file; a
// commit that does not fit is refused with driver.ErrUnavailable (the host
// answers 503 and retries; nothing acknowledged is at risk), and accepted
// again once space is freed.

// memTableSize is badger's memtable size (its default, which Open keeps).
const memTableSize = 64 << 20

// spaceSlack is room beyond the logs and one flush: the manifest, the
// directory's lock, a few pages of metadata.
const spaceSlack = 8 << 20

// plentyOfSpace is the free space above which the logs are not measured.
const plentyOfSpace = 4 << 30

// A verdict of plenty of space is reused, without asking the filesystem
// again, for up to plentyReuse and plentyReuseBytes of accepted commits:
// a statfs per commit cost about 3 % of a commit's CPU in the driver, and
// no writer fills 4 GiB in that time or with those bytes.
const (
	plentyReuse      = 50 * time.Millisecond
	plentyReuseBytes = 256 << 20
)

// spaceGuard checks the free space of the data directory's filesystem.
type spaceGuard struct {
	dir string

	mu        sync.Mutex
	lastWarn  time.Time
	plentyAt  time.Time // when statfs last found plenty of space; zero if not
	sinceThen int64     // bytes accepted since plentyAt
	statfs    func(string, *syscall.Statfs_t) error
	unwritten func(dir string) int64
}

func newSpaceGuard(dir string) *spaceGuard {
	return &spaceGuard{dir: dir, statfs: syscall.Statfs, unwritten: unwrittenLogBytes}
}

// check returns an error wrapping driver.ErrUnavailable when a commit of
// size bytes may not fit, and logs it at most every 10s through warn.
func (g *spaceGuard) check(size int, warn func(msg string, args ...any)) error {
	g.mu.Lock()
	if !g.plentyAt.IsZero() && g.sinceThen+int64(size) <= plentyReuseBytes && time.Since(g.plentyAt) < plentyReuse {
		g.sinceThen += int64(size)
		g.mu.Unlock()
		return nil
	}
	g.plentyAt = time.Time{}
	g.mu.Unlock()
	var st syscall.Statfs_t
	if err := g.statfs(g.dir, &st); err != nil {
		return nil // cannot tell: let the write say
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free >= plentyOfSpace {
		g.mu.Lock()
		g.plentyAt, g.sinceThen = time.Now(), int64(size)
		g.mu.Unlock()
		return nil
	}
	need := g.unwritten(g.dir) + memTableSize + spaceSlack + int64(size)
	if free >= need {
		return nil
	}
	err := fmt.Errorf("%w: badgerstore: the disk holding %s is full: no space left on device for a safe write (%d MiB free, %d MiB needed); free space and retry",
		driver.ErrUnavailable, g.dir, free>>20, need>>20)
	g.mu.Lock()
	if time.Since(g.lastWarn) >= 10*time.Second {
		g.lastWarn = time.Now()
		g.mu.Unlock()
		warn("refusing commits: the disk is full", "dir", g.dir, "free_mib", free>>20, "needed_mib", need>>20, "error", "no space left on device")
	} else {
		g.mu.Unlock()
	}
	return err
}

// unwrittenLogBytes returns the bytes the filesystem has not allocated yet
// in badger's current memtable log: what writing it until badger moves to
// the next memtable will take. badger creates each log (*.mem, named by an
// increasing file id) at twice the memtable's size but switches to a new
// memtable once one memtable's size is written, so only the newest log is
// still written to and its gap is at most memTableSize less what is already
// allocated; counting every log's whole sparse size would ask a fresh store
// for about 200 MiB and refuse commits on small volumes with room left.
func unwrittenLogBytes(dir string) int64 {
	files, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
	newest, newestID := "", int64(-1)
	for _, f := range files {
		id, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(f), ".mem"), 10, 64)
		if err != nil || id <= newestID {
			continue
		}
		newest, newestID = f, id
	}
	if newest == "" {
		return 0
	}
	info, err := os.Stat(newest)
	if err != nil {
		return 0
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	return max(0, memTableSize-st.Blocks*512)
}

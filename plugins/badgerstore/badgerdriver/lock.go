package badgerdriver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agenthost/agenthost/abi/driver"
)

// lockName is the file in the data directory that a driver process holds
// locked for as long as it runs.
const lockName = "agenthost.lock"

// lockDir takes the data directory's process lock, waiting up to wait for a
// previous process to let go of it. The kernel drops the lock when its
// holder exits, however it exits, so a driver relaunched after a crash
// starts as soon as the old process is gone, and never opens the files
// while another process still writes them (a dying driver may still be
// closing its database).
func lockDir(dir string, wait time.Duration) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("%w: badgerstore: data directory %s: %v", driver.ErrInvalidArgument, dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: badgerstore: %v", driver.ErrInvalidArgument, err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("%w: badgerstore: %s is in use by another process (waited %s)", driver.ErrUnavailable, dir, wait)
			}
			return nil, fmt.Errorf("%w: badgerstore: locking %s: %v", driver.ErrInvalidArgument, dir, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

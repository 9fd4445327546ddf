package conformance_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// acksBeforeWrite is a durable driver but for one rule of the crash tier:
// it keeps its records in memory and in a log file under its data
// directory, replayed at open, but acknowledges a commit before the commit
// reaches the log, which it writes a little later. Closed cleanly, it loses
// nothing; killed, it loses the commits acknowledged in the last moments.
type acksBeforeWrite struct {
	*memdriver.Driver
	mu    sync.Mutex
	f     *os.File
	queue []queued // acknowledged, not yet logged, in commit order
}

type queued struct {
	line []byte
	due  time.Time
}

// writeDelay is how long an acknowledged commit waits before it is logged.
const writeDelay = 500 * time.Millisecond

func openAcksBeforeWrite(config map[string]string) (driver.Driver, error) {
	dir := config["dir"]
	if dir == "" {
		return nil, fmt.Errorf("%w: broken driver acks-before-write needs a dir", driver.ErrInvalidArgument)
	}
	p := filepath.Join(dir, "batches.log")
	d := memdriver.New()
	if f, err := os.Open(p); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var b driver.Batch
			if err := json.Unmarshal(sc.Bytes(), &b); err != nil {
				break // a torn last line
			}
			if _, err := d.Commit(context.Background(), b); err != nil {
				f.Close()
				return nil, fmt.Errorf("replaying %s: %w", p, err)
			}
		}
		f.Close()
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	return &acksBeforeWrite{Driver: d, f: f}, nil
}

func (a *acksBeforeWrite) Info(ctx context.Context) (driver.Info, error) {
	info, err := a.Driver.Info(ctx)
	info.Name, info.Durable = "broken-acks-before-write", true
	return info, err
}

func (a *acksBeforeWrite) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	// Commits are applied and logged in one order under the lock, so the
	// log replays them in the order they were applied.
	a.mu.Lock()
	defer a.mu.Unlock()
	v, err := a.Driver.Commit(ctx, b)
	if err != nil {
		return v, err
	}
	line, err := json.Marshal(b)
	if err != nil {
		return 0, err
	}
	a.queue = append(a.queue, queued{line: append(line, '\n'), due: time.Now().Add(writeDelay)})
	time.AfterFunc(writeDelay, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.flush(time.Now())
	})
	return v, nil
}

// flush logs the queued commits due by now, in order; the lock is held.
func (a *acksBeforeWrite) flush(now time.Time) {
	n := 0
	for n < len(a.queue) && !a.queue[n].due.After(now) {
		_, _ = a.f.Write(a.queue[n].line)
		n++
	}
	if n > 0 {
		_ = a.f.Sync()
		a.queue = a.queue[n:]
	}
}

func (a *acksBeforeWrite) Close(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f != nil {
		a.flush(time.Now().Add(writeDelay))
		a.f.Close()
		a.f = nil
	}
	return a.Driver.Close(ctx)
}

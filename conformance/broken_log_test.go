package conformance_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// logDriver keeps its records in memory and in a log file under its data
// directory, replayed at open: each commit and each step batch a line. It
// is durable but for one rule, by its flavour:
//
//   - acks-before-write acknowledges a commit before the commit reaches the
//     log, which it writes (and syncs) a little later. Closed cleanly, it
//     loses nothing; killed, it loses the commits acknowledged in the last
//     moments.
//   - acks-unsynced writes every commit to the log before acknowledging it,
//     but never syncs the log (nor its directory). Killed, it loses nothing
//     (the kernel keeps the writes); at a power cut, it loses what the
//     kernel had not yet written back: on the suite's power cut file
//     system, everything.
//
// One flavour is durable, with its data kept elsewhere:
//
//   - data-elsewhere keeps (and syncs) its log in the directory
//     config["elsewhere"], as a database server would, and leaves only a
//     configuration file in its data directory; with config["trace"] set
//     it also appends a line per commit to an unsynced trace file there.
type logDriver struct {
	*memdriver.Driver
	name  string
	mu    sync.Mutex
	f     *os.File
	trace *os.File // data-elsewhere with trace
	queue []queued // acks-before-write: acknowledged, not yet logged, in commit order
}

type queued struct {
	line []byte
	due  time.Time
}

// logEntry is one line of the log.
type logEntry struct {
	Batch *driver.Batch     `json:"batch,omitempty"`
	Steps *driver.StepBatch `json:"steps,omitempty"`
}

// writeDelay is how long an acknowledged commit of acks-before-write waits
// before it is logged.
const writeDelay = 500 * time.Millisecond

func openLogDriver(name string, config map[string]string) (driver.Driver, error) {
	dir := config["dir"]
	if dir == "" {
		return nil, fmt.Errorf("%w: broken driver %s needs a dir", driver.ErrInvalidArgument, name)
	}
	p := filepath.Join(dir, "batches.log")
	var trace *os.File
	if name == "data-elsewhere" {
		if config["elsewhere"] == "" {
			return nil, fmt.Errorf("%w: driver %s needs elsewhere", driver.ErrInvalidArgument, name)
		}
		// Its data directory holds its configuration, written (and synced)
		// at every open; its log is elsewhere, one per data directory.
		if err := writeSynced(filepath.Join(dir, "driver.conf"), []byte("log elsewhere\n")); err != nil {
			return nil, err
		}
		p = filepath.Join(config["elsewhere"], fmt.Sprintf("%x.log", sha256.Sum256([]byte(dir))))
		if config["trace"] != "" {
			var err error
			if trace, err = os.OpenFile(filepath.Join(dir, "trace.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err != nil {
				return nil, err
			}
		}
	}
	d := memdriver.New()
	if f, err := os.Open(p); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var e logEntry
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				break // a torn last line
			}
			switch {
			case e.Batch != nil:
				_, err = d.Commit(context.Background(), *e.Batch)
			case e.Steps != nil:
				err = d.CommitSteps(context.Background(), *e.Steps)
			}
			if err != nil {
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
	return &logDriver{Driver: d, name: name, f: f, trace: trace}, nil
}

// writeSynced writes a file and syncs it.
func writeSynced(p string, b []byte) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (a *logDriver) Info(ctx context.Context) (driver.Info, error) {
	info, err := a.Driver.Info(ctx)
	info.Name, info.Durable = "broken-"+a.name, true
	return info, err
}

func (a *logDriver) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	// Commits are applied and logged in one order under the lock, so the
	// log replays them in the order they were applied.
	a.mu.Lock()
	defer a.mu.Unlock()
	v, err := a.Driver.Commit(ctx, b)
	if err != nil {
		return v, err
	}
	return v, a.log(logEntry{Batch: &b})
}

func (a *logDriver) CommitSteps(ctx context.Context, b driver.StepBatch) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.Driver.CommitSteps(ctx, b); err != nil {
		return err
	}
	return a.log(logEntry{Steps: &b})
}

// log logs e, or queues it (acks-before-write); the lock is held.
func (a *logDriver) log(e logEntry) error {
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if a.name == "data-elsewhere" {
		if a.trace != nil {
			if _, err := fmt.Fprintf(a.trace, "%d bytes logged\n", len(line)); err != nil { // and no Sync
				return err
			}
		}
		if _, err := a.f.Write(line); err != nil {
			return err
		}
		return a.f.Sync()
	}
	if a.name == "acks-unsynced" {
		_, err := a.f.Write(line) // and no Sync
		return err
	}
	a.queue = append(a.queue, queued{line: line, due: time.Now().Add(writeDelay)})
	time.AfterFunc(writeDelay, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.flush(time.Now())
	})
	return nil
}

// flush logs the queued commits due by now, in order; the lock is held.
func (a *logDriver) flush(now time.Time) {
	if a.f == nil {
		return
	}
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

func (a *logDriver) Close(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f != nil {
		a.flush(time.Now().Add(writeDelay))
		a.f.Close()
		a.f = nil
	}
	if a.trace != nil {
		a.trace.Close()
		a.trace = nil
	}
	return a.Driver.Close(ctx)
}

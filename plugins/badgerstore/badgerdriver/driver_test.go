package badgerdriver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/plugins/badgerstore/badgerdriver"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// badger's and ristretto's process-wide background goroutines.
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreAnyFunction("github.com/dgraph-io/ristretto/v2/z.(*AllocatorPool).freeupAllocators"),
		goleak.IgnoreAnyFunction("github.com/dgraph-io/badger/v4/y.(*WaterMark).process"),
	)
}

func open(t testing.TB, dir string) *badgerdriver.Driver {
	t.Helper()
	cfg := badgerdriver.DefaultConfig(dir)
	cfg.MaxBatchBytes = 64 << 20 // let badger's own transaction limit show
	d, err := badgerdriver.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestContract(t *testing.T) {
	storedrivertest.Run(t, func(t *testing.T) driver.Driver { return open(t, t.TempDir()) })
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  map[string]string
		want string
	}{
		{map[string]string{}, "no data directory"},
		{map[string]string{"dir": "/x", "sync_writes": "maybe"}, "sync_writes"},
		{map[string]string{"dir": "/x", "gc_interval": "soon"}, "gc_interval"},
		{map[string]string{"dir": "/x", "gc_discard_ratio": "2"}, "gc_discard_ratio"},
		{map[string]string{"dir": "/x", "max_group": "0"}, "max_group"},
		{map[string]string{"dir": "/x", "colour": "blue"}, "unknown key"},
	} {
		_, err := badgerdriver.ParseConfig(tc.cfg)
		if !errors.Is(err, driver.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%v) = %v, want ErrInvalidArgument about %q", tc.cfg, err, tc.want)
		}
	}
	c, err := badgerdriver.ParseConfig(map[string]string{"dir": "/x", "sync_writes": "false", "gc_interval": "0"})
	if err != nil || c.SyncWrites || c.GCInterval != 0 || c.Dir != "/x" {
		t.Errorf("ParseConfig = %+v, %v", c, err)
	}
	// A directory badger cannot use is an error at open, not a crash.
	_, err = badgerdriver.Factory{}.Open(context.Background(), map[string]string{"dir": "/proc/agenthost-no"})
	if !errors.Is(err, driver.ErrInvalidArgument) {
		t.Errorf("Open on an unusable directory: %v", err)
	}
}

// batch returns the commit of message seq on thread th at version v.
func batch(th string, v int64, extra ...record.Message) driver.Batch {
	cid := fmt.Sprintf("%s-c%d", th, v+1)
	b := driver.Batch{CommitID: cid, ThreadID: th, ExpectedVersion: v,
		Thread:   record.Thread{ID: th, Version: v + 1, LastCommitID: cid},
		Messages: []record.Message{{ID: fmt.Sprintf("%s-m%d", th, v+1), ThreadID: th, Seq: (v + 1) * 100, Role: record.RoleUser}},
		Runs:     []record.Run{{ID: fmt.Sprintf("%s-r%d", th, v+1), ThreadID: th, Seq: v + 1, State: record.StateQueued}},
	}
	b.Messages = append(b.Messages, extra...)
	return b
}

// TestGroupCommitIsolation: many concurrent commits, some bad in each way a
// member of a group can fail; every good one lands, every bad one alone
// fails, and nothing of a bad one is visible.
func TestGroupCommitIsolation(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := open(t, dir)
	const threads, rounds = 16, 6
	big := func(th string, v int64, n int) []record.Message {
		var ms []record.Message
		for k := 0; k < n; k++ {
			ms = append(ms, record.Message{ID: fmt.Sprintf("%s-big-%d-%d", th, v, k), ThreadID: th, Seq: (v+1)*100 + 1 + int64(k),
				Role: record.RoleTool, Content: strings.Repeat("x", 900<<10)})
		}
		return ms
	}
	var wg sync.WaitGroup
	counts := make([]int, threads)
	errc := make(chan error, threads)
	for i := range threads {
		wg.Go(func() {
			th := fmt.Sprintf("th-%02d", i)
			v, msgs := int64(0), 0
			defer func() { counts[i] = msgs }()
			for r := 0; r < rounds; r++ {
				// A bad commit first: wrong version, duplicate message id,
				// or too large for one transaction.
				bad := batch(th, v)
				bad.CommitID, bad.Thread.LastCommitID = "bad-"+bad.CommitID, "bad-"+bad.CommitID
				want := driver.ErrVersionConflict
				switch (i + r) % 3 {
				case 0:
					bad.ExpectedVersion, bad.Thread.Version = v+1, v+2
				case 1:
					want = driver.ErrInvalidArgument
					if v == 0 {
						bad.ExpectedVersion, bad.Thread.Version = v+1, v+2
						want = driver.ErrVersionConflict
					} else {
						bad.Messages[0].ID = fmt.Sprintf("%s-m%d", th, v)
					}
				case 2:
					// Over badger's transaction size (15% of a 64 MB memtable).
					want = driver.ErrTooLarge
					bad.Messages = append(bad.Messages, big(th, v, 12)...)
				}
				if _, err := d.Commit(ctx, bad); !errors.Is(err, want) {
					errc <- fmt.Errorf("%s round %d: bad commit: %v, want %v", th, r, err, want)
					return
				}
				// A good one, large on every third round: several of them do
				// not fit one transaction together.
				good := batch(th, v)
				if (i+r)%3 == 2 {
					good.Messages = append(good.Messages, big(th, v, 3)...)
				}
				if _, err := d.Commit(ctx, good); err != nil {
					errc <- fmt.Errorf("%s round %d: %w", th, r, err)
					return
				}
				msgs += len(good.Messages)
				v++
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Reopen: everything acknowledged is there, nothing else.
	d = open(t, dir)
	defer d.Close(ctx)
	for i := range threads {
		th := fmt.Sprintf("th-%02d", i)
		snap, err := d.LoadThread(ctx, th)
		if err != nil || snap.Thread.Version != rounds || strings.HasPrefix(snap.Thread.LastCommitID, "bad-") {
			t.Fatalf("%s: %+v, %v", th, snap.Thread, err)
		}
		msgs, err := d.ReadHistory(ctx, th, 0, 100)
		if err != nil || len(msgs) != counts[i] {
			t.Fatalf("%s history: %d, %v", th, len(msgs), err)
		}
	}
	queued, err := d.ListRuns(ctx, record.StateQueued, "", 1_000_000)
	if err != nil || len(queued) != threads*rounds {
		t.Fatalf("%d queued runs, %v; want %d", len(queued), err, threads*rounds)
	}
}

func TestCloseWithQueuedCommits(t *testing.T) {
	ctx := context.Background()
	d := open(t, t.TempDir())
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			th := fmt.Sprintf("th-%d", i)
			for v := int64(0); ; v++ {
				if _, err := d.Commit(ctx, batch(th, v)); err != nil {
					if !errors.Is(err, driver.ErrClosed) {
						t.Errorf("commit during close: %v", err)
					}
					return
				}
			}
		})
	}
	for {
		snap, err := d.LoadThread(ctx, "th-0")
		if err != nil {
			t.Fatal(err)
		}
		if snap.Thread.Version >= 3 {
			break
		}
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if _, err := d.LoadThread(ctx, "th-0"); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// BenchmarkCommit: group commit in process, with SyncWrites on.
func BenchmarkCommit(b *testing.B) {
	for _, threads := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			d := open(b, b.TempDir())
			defer d.Close(context.Background())
			storedrivertest.BenchCommits(b, d, threads)
		})
	}
}

// BenchmarkCommitSteps: step commits in process, with SyncWrites on, each
// of many active runs appending its steps one at a time.
func BenchmarkCommitSteps(b *testing.B) {
	for _, runs := range []int{1, 64} {
		b.Run(fmt.Sprintf("runs=%d", runs), func(b *testing.B) {
			d := open(b, b.TempDir())
			defer d.Close(context.Background())
			storedrivertest.BenchStepCommits(b, d, runs)
		})
	}
}

// TestValueLogGC: with a short GC interval the scheduled value log GC runs
// alongside commits of large values, and Close still ends it cleanly.
func TestValueLogGC(t *testing.T) {
	ctx := context.Background()
	cfg := badgerdriver.DefaultConfig(t.TempDir())
	cfg.GCInterval = 5 * time.Millisecond
	d, err := badgerdriver.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for v := int64(0); v < 20; v++ {
		b := batch("th", v)
		b.Messages[0].Content = strings.Repeat("y", 2<<20) // into the value log
		if _, err := d.Commit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCommitMany: batches committed together each get their own result,
// and a bad one takes nothing of the others down with it.
func TestCommitMany(t *testing.T) {
	ctx := context.Background()
	d := open(t, t.TempDir())
	defer d.Close(ctx)
	big := batch("big", 0)
	for k := range 12 { // values under the value threshold count in full
		big.Messages = append(big.Messages, record.Message{ID: fmt.Sprintf("big-%d", k), ThreadID: "big", Seq: 101 + int64(k), Content: strings.Repeat("z", 900<<10)})
	}
	bs := []driver.Batch{
		batch("a", 0),
		batch("a", 0), // same thread and version, after the first: conflict
		{},            // invalid
		big,           // too large for one transaction
		batch("b", 0),
	}
	vs, errs := d.CommitMany(ctx, bs)
	want := []error{nil, driver.ErrVersionConflict, driver.ErrInvalidArgument, driver.ErrTooLarge, nil}
	for i := range bs {
		if (want[i] == nil) != (errs[i] == nil) || (want[i] != nil && !errors.Is(errs[i], want[i])) {
			t.Errorf("batch %d: %v, want %v", i, errs[i], want[i])
		}
		if want[i] == nil && vs[i] != 1 {
			t.Errorf("batch %d: version %d", i, vs[i])
		}
	}
	for _, th := range []string{"a", "b"} {
		if snap, err := d.LoadThread(ctx, th); err != nil || snap.Thread.Version != 1 {
			t.Errorf("thread %s: %+v, %v", th, snap.Thread, err)
		}
	}
	if snap, err := d.LoadThread(ctx, "big"); err != nil || snap.Thread.Version != 0 {
		t.Errorf("thread big: %+v, %v", snap.Thread, err)
	}
}

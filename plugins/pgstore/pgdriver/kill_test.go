package pgdriver_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
)

// nth is commit n (1-based) of a thread in a stream: a run, its input and
// answer, and a key.
func nth(th string, n int64) driver.Batch {
	cid := fmt.Sprintf("%s-c%d", th, n)
	run := fmt.Sprintf("%s-r%d", th, n)
	return driver.Batch{
		CommitID: cid, ThreadID: th, ExpectedVersion: n - 1,
		Thread: record.Thread{ID: th, Version: n, LastCommitID: cid, NextRunSeq: n + 1, NextMessageSeq: 2*n + 1},
		Runs: []record.Run{{ID: run, ThreadID: th, Seq: n, State: record.StateCompleted, TerminalReason: record.ReasonCompleted,
			InputMessageIDs: []string{run + "-in"}, AssistantMessageID: run + "-out", AnswerSeq: 2 * n, Attempt: 1, EndSeq: n}},
		Messages: []record.Message{
			{ID: run + "-in", ThreadID: th, RunID: run, Seq: 2*n - 1, Role: record.RoleUser, Content: "q"},
			{ID: run + "-out", ThreadID: th, RunID: run, Seq: 2 * n, Role: record.RoleAssistant, Content: "a"},
		},
		Idempotency: []record.Idempotency{{ThreadID: th, Key: fmt.Sprintf("key-%d", n), RunID: run, InputMessageID: run + "-in"}},
	}
}

// admin runs sql on url from a connection of its own.
func admin(t testing.TB, url, sql string, args ...any) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

const killAll = `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
	WHERE datname = current_database() AND application_name = 'agenthost-pgstore' AND pid <> pg_backend_pid()`

// TestKilledConnections: the driver's connections are ended by the server
// (pg_terminate_backend) again and again during streams of commits. A
// commit cut that way fails with ErrUnavailable or not at all; settled by
// reading the thread's LastCommitID, as the host does, no batch lands in
// part, and the driver serves again once the kills stop. Reads ride
// through the kills.
func TestKilledConnections(t *testing.T) {
	url := pgtest.URL(t)
	d := open(t, url, pgdriver.DefaultSchema)
	ctx := context.Background()
	const writers = 6
	var stop atomic.Bool
	var unknown, reads atomic.Int64
	versions := make([]int64, writers)
	errc := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			th := fmt.Sprintf("killed-%d", w)
			for n := int64(1); !stop.Load(); {
				b := nth(th, n)
				_, err := d.Commit(ctx, b)
				if err != nil && !errors.Is(err, driver.ErrUnavailable) {
					errc <- fmt.Errorf("commit %d of %s: %w", n, th, err)
					return
				}
				if err != nil {
					unknown.Add(1)
				}
				// Settle by reading, as the host does after ErrUnavailable;
				// read anyway, to read through the kills.
				snap, rerr := d.LoadThread(ctx, th)
				reads.Add(1)
				if rerr != nil {
					errc <- fmt.Errorf("reading %s: %w", th, rerr)
					return
				}
				switch {
				case snap.Thread.LastCommitID == b.CommitID && snap.Thread.Version == n:
					n++
				case err == nil:
					errc <- fmt.Errorf("commit %d of %s succeeded, but the thread is %+v", n, th, snap.Thread)
					return
				case snap.Thread.Version != n-1:
					errc <- fmt.Errorf("after commit %d of %s failed, the thread is at %d", n, th, snap.Thread.Version)
					return
				}
				versions[w] = n - 1
			}
		})
	}
	var killed int64
	for range 10 {
		time.Sleep(150 * time.Millisecond)
		killed += admin(t, url, killAll)
	}
	stop.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if killed == 0 {
		t.Fatal("no connection of the driver was ended: the test tested nothing")
	}
	t.Logf("%d connections ended, %d commits of unknown outcome, %d reads", killed, unknown.Load(), reads.Load())

	// Every thread holds its committed batches whole, and nothing of the
	// next.
	for w := range writers {
		th := fmt.Sprintf("killed-%d", w)
		snap, err := d.LoadThread(ctx, th)
		if err != nil {
			t.Fatal(err)
		}
		v := snap.Thread.Version
		if v < versions[w] {
			t.Fatalf("%s is at version %d, below %d", th, v, versions[w])
		}
		msgs, err := d.ReadHistory(ctx, th, 0, 100000)
		if err != nil || int64(len(msgs)) != 2*v {
			t.Fatalf("%s at version %d has %d messages, %v: a batch landed in part", th, v, len(msgs), err)
		}
		for n := int64(1); n <= v; n++ {
			b := nth(th, n)
			if _, err := d.GetRuns(ctx, []string{b.Runs[0].ID}); err != nil {
				t.Fatalf("%s at version %d lacks run %d: %v", th, v, n, err)
			}
			if _, err := d.GetIdempotency(ctx, th, b.Idempotency[0].Key); err != nil {
				t.Fatalf("%s at version %d lacks key %d: %v", th, v, n, err)
			}
		}
		next := nth(th, v+1)
		if _, err := d.GetRuns(ctx, []string{next.Runs[0].ID}); !errors.Is(err, driver.ErrNotFound) {
			t.Fatalf("%s at version %d holds run %d: %v", th, v, v+1, err)
		}
		// The driver serves again.
		if _, err := d.Commit(ctx, next); err != nil {
			t.Fatalf("commit %d of %s after the kills: %v", v+1, th, err)
		}
	}
}

// TestConcurrentOpen: several drivers opening one schema at once migrate
// it once.
func TestConcurrentOpen(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	ds := make([]*pgdriver.Driver, 8)
	for i := range ds {
		wg.Go(func() {
			cfg := pgdriver.DefaultConfig(url)
			cfg.Schema = "together"
			ds[i], errs[i] = pgdriver.Open(ctx, cfg)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		defer ds[i].Close(ctx)
	}
	if n := admin(t, url, "SELECT count(*) FROM together.schema_migrations"); n != int64(pgdriver.SchemaVersion) {
		t.Fatalf("%d migrations recorded, want %d", n, pgdriver.SchemaVersion)
	}
	// Each sees the others' commits.
	if _, err := ds[0].Commit(ctx, nth("t", 1)); err != nil {
		t.Fatal(err)
	}
	if snap, err := ds[7].LoadThread(ctx, "t"); err != nil || snap.Thread.Version != 1 {
		t.Fatalf("another driver sees %+v, %v", snap.Thread, err)
	}
	// A schema a newer driver migrated is refused.
	admin(t, url, "WITH x AS (INSERT INTO together.schema_migrations (version, name) VALUES (999, 'future') RETURNING 1) SELECT count(*) FROM x")
	cfg := pgdriver.DefaultConfig(url)
	cfg.Schema = "together"
	if d, err := pgdriver.Open(ctx, cfg); !errors.Is(err, driver.ErrInvalidArgument) {
		if d != nil {
			d.Close(ctx)
		}
		t.Fatalf("opening a schema at version 999: %v, want ErrInvalidArgument", err)
	}
}

// TestNotices: a long notice arrives whole, in parts; a watch whose
// connection the server ends is closed; Close ends the watches.
func TestNotices(t *testing.T) {
	url := pgtest.URL(t)
	d := open(t, url, pgdriver.DefaultSchema)
	ctx := context.Background()
	ch, err := d.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var settled []string
	for i := range 2000 {
		settled = append(settled, fmt.Sprintf("run-%08d-settled", i))
	}
	if err := d.Notify(ctx, driver.Notice{ThreadID: "th", RunID: "r", ReplyTo: 5, Settled: settled}); err != nil {
		t.Fatal(err)
	}
	var got []string
	parts := 0
	timeout := time.After(10 * time.Second)
	for len(got) < len(settled) {
		select {
		case n := <-ch:
			if n.ThreadID != "th" || n.RunID != "r" || n.ReplyTo != 5 {
				t.Fatalf("part %+v", n)
			}
			got = append(got, n.Settled...)
			parts++
		case <-timeout:
			t.Fatalf("%d of %d settled runs arrived", len(got), len(settled))
		}
	}
	if parts < 2 || fmt.Sprint(got) != fmt.Sprint(settled) {
		t.Fatalf("%d parts, %d runs", parts, len(got))
	}
	// The server ends the watch's connection: the channel closes.
	admin(t, url, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`)
	waitClosed(t, ch)
	// Close ends the others.
	ch2, err := d.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d.Close(ctx)
	waitClosed(t, ch2)
	if _, err := d.Watch(ctx); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Watch after Close: %v", err)
	}
}

func waitClosed(t *testing.T, ch <-chan driver.Notice) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("the watch channel did not close")
		}
	}
}

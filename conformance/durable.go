package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/driverfault"
)

func init() {
	cases = append(cases,
		testCase{"scale", "runs-and-threads", TierBasic, false, testScaleRuns},
		testCase{"scale", "large-messages", TierBasic, false, testLargeMessages},
		testCase{"durability", "reopen", TierDurable, false, testReopen},
		testCase{"durability", "kill-during-commits", TierDurable, false, testKillDuringCommits},
		testCase{"crash", "mid-commit", TierDurable, false, testCrashMidCommit},
		testCase{"shared", "fencing", TierShared, false, testShared},
	)
}

// nthBatch is commit n (1-based) of a thread in a stream: one completed run,
// its input and answer, and a key.
func nthBatch(th string, n int64) driver.Batch {
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

// checkStream checks a thread written by nthBatch after a relaunch: its
// version is at least acked, every commit up to the version is whole, and
// the next one is absent.
func (c *C) checkStream(d driver.Driver, th string, acked int64) int64 {
	return c.checkStreamAfter("durability.acked-survives-kill", d, th, acked, "the relaunch")
}

// checkStreamAfter is checkStream after what (a relaunch, a power cut),
// a lost acknowledged commit breaking rule.
func (c *C) checkStreamAfter(rule string, d driver.Driver, th string, acked int64, what string) int64 {
	snap, err := d.LoadThread(c.ctx, th)
	if errors.Is(err, driver.ErrNotFound) {
		if acked > 0 {
			c.Fatalf(rule, "thread %s is not found after %s, but commit %d was acknowledged", th, what, acked)
		}
		// Never acknowledged, never written: its first commit is absent.
		c.runAbsent("durability.no-partial-batch", d, nthBatch(th, 1).Runs[0].ID)
		return 0
	}
	c.ok(rule, "LoadThread after "+what, err)
	v := snap.Thread.Version
	if v < acked {
		c.Fatalf(rule, "thread %s is at version %d after %s, but commit %d was acknowledged", th, v, what, acked)
	}
	hist := c.allHistory("durability.no-partial-batch", d, th, 1000)
	if int64(len(hist)) != 2*v {
		c.Fatalf("durability.no-partial-batch", "thread %s at version %d has %d messages, want %d: a batch landed in part", th, v, len(hist), 2*v)
	}
	for n := int64(1); n <= v; n++ {
		b := nthBatch(th, n)
		if _, err := d.GetRuns(c.ctx, []string{b.Runs[0].ID}); err != nil {
			c.Fatalf("durability.no-partial-batch", "thread %s at version %d lacks run %s of commit %d: %v", th, v, b.Runs[0].ID, n, err)
		}
		if _, err := d.GetIdempotency(c.ctx, th, b.Idempotency[0].Key); err != nil {
			c.Fatalf("durability.no-partial-batch", "thread %s at version %d lacks key %s of commit %d: %v", th, v, b.Idempotency[0].Key, n, err)
		}
	}
	next := nthBatch(th, v+1)
	c.runAbsent("durability.no-partial-batch", d, next.Runs[0].ID)
	if _, err := d.GetIdempotency(c.ctx, th, next.Idempotency[0].Key); !errors.Is(err, driver.ErrNotFound) {
		c.Fatalf("durability.no-partial-batch", "thread %s at version %d holds the key of commit %d: a batch landed in part", th, v, v+1)
	}
	return v
}

// mustKill kills the instance's process, if it still runs, and reaps it.
func (c *C) mustKill(in Instance) {
	if err := in.Kill(); errors.Is(err, ErrCannotKill) {
		c.Skipf("the driver runs in this process and cannot be killed; test the durable tier on a binary")
	}
	_ = in.Close(c.ctx) // reaps the process
}

func testReopen(c *C) {
	d, dir := c.start()
	th := c.thread(d, "reopen")
	b, _, _, _ := bigBatch(th)
	th.commit("durability.reopen", b)
	c.ok("durability.reopen", "closing the driver", d.Close(c.ctx))
	d = c.startOn(dir)
	c.checkWhole("durability.reopen", d, b)
}

func testKillDuringCommits(c *C) {
	d, dir := c.start()
	if d.Pid() == 0 {
		c.Skipf("the driver runs in this process and cannot be killed; test the durable tier on a binary")
	}
	writers, killAfter := 4, int64(40)
	if c.full {
		writers, killAfter = 8, 400
	}
	acked := make([]int64, writers)
	var total atomic.Int64
	killed := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for w := range writers {
		wg.Go(func() {
			th := fmt.Sprintf("kill-%d", w)
			for n := int64(1); n < 1<<20; n++ {
				if _, err := d.Commit(c.ctx, nthBatch(th, n)); err != nil {
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				acked[w] = n
				select {
				case <-killed:
					return // the driver may have restarted; the stream is over
				default:
				}
				if total.Add(1) == killAfter {
					once.Do(func() {
						_ = d.Kill()
						close(killed)
					})
				}
			}
		})
	}
	wg.Wait()
	select {
	case <-killed:
	default:
		c.Fatalf("durability.commit", "the commit stream stopped before the kill: %v", firstErr.Load())
	}
	c.mustKill(d)
	d = c.startOn(dir)
	for w := range writers {
		c.checkStream(d, fmt.Sprintf("kill-%d", w), acked[w])
	}
}

// testCrashMidCommit kills the driver at each fault point of the SDK
// (driverfault.Env) during a multi-record commit, relaunches it on the
// same data and settles the outcome by reading: whole or absent, and whole
// once the driver acknowledged it.
func testCrashMidCommit(c *C) {
	points := driverfault.Points
	fault := func(i, n int) string { return fmt.Sprintf("%s=%s@%d", driverfault.Env, points[i], n) }
	dir := c.newDir()
	// One data directory throughout: each launch arms the next point.
	d := c.startOn(dir, fault(0, 3))
	for n := int64(1); n <= 2; n++ {
		if _, err := d.Commit(c.ctx, nthBatch("crash", n)); err != nil {
			c.Fatalf("crash.commit", "commit %d before the fault point %s: %v", n, points[0], err)
		}
	}
	version := int64(2)
	var reached []string
	for i, point := range points {
		_, err := d.Commit(c.ctx, nthBatch("crash", version+1))
		if err == nil {
			version++ // the driver has no such point
		} else {
			reached = append(reached, point)
		}
		_ = d.Close(c.ctx) // reaps a killed process
		var env []string
		if i+1 < len(points) {
			env = []string{fault(i+1, 1)}
		}
		d = c.startOn(dir, env...)
		if err == nil {
			continue
		}
		v := c.checkStream(d, "crash", version)
		switch {
		case point == driverfault.BeforeCommit && v != version:
			c.Fatalf("crash.all-or-nothing", "killed before commit %d reached the driver, yet the thread is at version %d", version+1, v)
		case point == driverfault.AfterSyncBeforeReply && v != version+1:
			c.Fatalf("crash.acknowledged-survives", "killed after the driver acknowledged commit %d (before the reply), the thread is at version %d after the relaunch", version+1, v)
		}
		version = v
	}
	if len(reached) == 0 {
		c.Skipf("the driver reached none of the fault points (it does not use the Go driver SDK's server)")
	}
	c.Logf("killed at %s", strings.Join(reached, ", "))
}

func testScaleRuns(c *C) {
	d, _ := c.start()
	// The listings are as large in the gate (quick) as in the full profile:
	// a driver whose index or paging breaks only past a few pages, or only
	// over many threads, must not pass the gate.
	threads, per := 1000, 10
	work := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				th := fmt.Sprintf("scale-%04d", i)
				b := driver.Batch{CommitID: th + "-c1", ThreadID: th, Thread: record.Thread{ID: th, Version: 1, LastCommitID: th + "-c1",
					NextRunSeq: int64(per + 1), NextMessageSeq: int64(per + 1)}}
				for j := range per {
					run := fmt.Sprintf("%s-r%02d", th, j)
					b.Thread.OpenRunIDs = append(b.Thread.OpenRunIDs, run)
					b.Runs = append(b.Runs, record.Run{ID: run, ThreadID: th, Seq: int64(j + 1), State: record.StateQueued, Attempt: 1, InputMessageIDs: []string{run + "-in"}})
					b.Messages = append(b.Messages, record.Message{ID: run + "-in", ThreadID: th, RunID: run, Seq: int64(j + 1), Role: record.RoleUser, Content: strings.Repeat("x", 200)})
					b.Idempotency = append(b.Idempotency, record.Idempotency{ThreadID: th, Key: fmt.Sprintf("k%d", j), RunID: run, InputMessageID: run + "-in"})
				}
				if _, err := d.Commit(c.ctx, b); err != nil {
					select {
					case errs <- fmt.Errorf("thread %s: %w", th, err):
					default:
					}
				}
			}
		})
	}
	for i := range threads {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		c.Fatalf("scale.commit", "committing: %v", err)
	}
	queued := c.listAll(d, record.StateQueued, 500)
	if len(queued) != threads*per {
		c.Fatalf("scale.list", "ListRuns(queued) over %d threads lists %d runs, want %d", threads, len(queued), threads*per)
	}
	if !slices.IsSortedFunc(queued, func(a, b record.Run) int { return strings.Compare(a.ID, b.ID) }) {
		c.Fatalf("index.paging", "ListRuns(queued) is not in id order")
	}
	for i := 0; i < threads; i += max(1, threads/20) {
		th := fmt.Sprintf("scale-%04d", i)
		k, err := d.GetIdempotency(c.ctx, th, fmt.Sprintf("k%d", per-1))
		if err != nil || k.RunID != fmt.Sprintf("%s-r%02d", th, per-1) {
			c.Fatalf("reads.idempotency-by-thread", "key k%d of %s among %d threads: %+v, %v", per-1, th, threads, k, err)
		}
		snap, err := d.LoadThread(c.ctx, th)
		if err != nil || len(snap.Runs) != per {
			c.Fatalf("scale.load", "LoadThread(%s) = %d runs, %v; want %d", th, len(snap.Runs), err, per)
		}
	}
}

func testLargeMessages(c *C) {
	d, _ := c.start()
	n := 1
	if c.full {
		n = 6
	}
	th := c.thread(d, "large")
	var want []record.Message
	for i := range n {
		m := th.Msg(fmt.Sprintf("large-%d", i), "run")
		m.Content = strings.Repeat(string(rune('a'+i)), 1<<20)
		th.commit("scale.large-messages", th.Batch(nil, nil, []record.Message{m}, nil))
		want = append(want, m)
	}
	got := c.allHistory("scale.large-messages", d, th.ID, 2)
	if len(got) != n {
		c.Fatalf("scale.large-messages", "read %d messages of 1 MiB, want %d", len(got), n)
	}
	for i := range got {
		if !sameMessage(got[i], want[i]) {
			c.Fatalf("scale.large-messages", "message %d of 1 MiB reads back altered (%d bytes)", i, len(got[i].Content))
		}
	}
}

// testShared: two driver processes on the same data see each other's
// commits and fence each other by version.
func testShared(c *C) {
	d1, dir := c.start()
	in, err := c.s.target.Start(c.ctx, dir, nil)
	if err != nil {
		c.Fatalf("shared.same-data", "a second instance on the same data does not start: %v", err)
	}
	c.closers = append(c.closers, func() { _ = in.Close(context.Background()) })
	var d2 driver.Driver = in
	th := c.thread(d1, "shared")
	th.admit("shared.visible", "sh-1", "k1")
	snap, err := d2.LoadThread(c.ctx, th.ID)
	if err != nil || snap.Thread.Version != 1 {
		c.Fatalf("shared.visible", "the second instance sees version %d, %v; want 1", snap.Thread.Version, err)
	}
	if _, err := d2.GetIdempotency(c.ctx, th.ID, "k1"); err != nil {
		c.Fatalf("shared.visible", "the second instance does not see the key: %v", err)
	}
	// Racing commits on one version from both instances: one wins.
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			d := []driver.Driver{d1, d2}[i%2]
			th2 := *th
			th2.Builder = th.Fork()
			r := th2.Run(fmt.Sprintf("sh-w%d", i))
			b := th2.Batch(append(slices.Clone(th.Open), r.ID), []record.Run{r}, []record.Message{th2.Msg(r.ID+"-in", r.ID)}, nil)
			b.CommitID = fmt.Sprintf("sh-c%d", i)
			b.Thread.LastCommitID = b.CommitID
			_, errs[i] = d.Commit(context.WithoutCancel(c.ctx), b)
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, driver.ErrVersionConflict):
			c.Fatalf("shared.fencing", "a racing commit failed with %v, want ErrVersionConflict", err)
		}
	}
	if won != 1 {
		c.Fatalf("shared.fencing", "%d of %d commits racing on one version from two instances won, want 1", won, n)
	}
}

package conformance

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

// Version checks at the youngest versions of a thread (never written,
// written once), where a driver that creates a thread's row on first write
// or keeps its version elsewhere can go wrong unseen by the checks on an
// older thread; and a read-back after every conflict no rival explains: a
// commit reported as a conflict must have written nothing.

func init() {
	cases = append(cases,
		testCase{"concurrency", "young-versions", TierBasic, false, testYoungVersions},
		testCase{"concurrency", "first-commit-race", TierBasic, false, testFirstCommitRace},
	)
}

// staleCommit sends a commit of a new run to th (forked) expecting version
// expected, which is not the thread's, and checks that it is refused with
// ErrVersionConflict and wrote nothing: the thread still at version v with
// n messages.
func (c *C) staleCommit(d driver.Driver, th *thread, expected, v int64, n int) {
	th2 := *th
	th2.Builder = th.Fork()
	th2.Version = expected
	r := th2.Run(fmt.Sprintf("%s-stale-%d", th.ID, expected))
	key := fmt.Sprintf("stale-%d", expected)
	b := th2.Batch(append(slices.Clone(th.Open), r.ID), []record.Run{r}, []record.Message{th2.Msg(r.ID+"-in", r.ID)}, []record.Idempotency{th2.Key(key, r.ID, r.ID+"-in")})
	b.Thread.Version = expected + 1
	_, err := d.Commit(c.ctx, b)
	what := fmt.Sprintf("a commit expecting version %d of thread %s at version %d", expected, th.ID, v)
	if err == nil {
		c.Fatalf("concurrency.stale-young-version", "%s was accepted", what)
	}
	c.wantErr("concurrency.stale-young-version", what, err, driver.ErrVersionConflict)
	c.expectUntouched("concurrency.conflict-writes-nothing", d, th.ID, v, n, []string{r.ID}, []string{key})
	if snap, err := d.LoadThread(c.ctx, th.ID); err == nil && snap.Thread.LastCommitID == b.CommitID {
		c.Fatalf("concurrency.conflict-writes-nothing", "%s was refused, but the thread's last commit is its %s", what, b.CommitID)
	}
}

func testYoungVersions(c *C) {
	d := c.sharedInstance()
	// Never written: no expected version but 0 is current.
	th := c.thread(d, "young-0")
	for _, expected := range []int64{1, 2, 7} {
		c.staleCommit(d, th, expected, 0, 0)
	}
	th.admit("concurrency.commit", "young-0-r1", "k1")
	// At version 1: 0 (the thread's first read) and 2 are stale.
	th = c.thread(d, "young-1")
	th.admit("concurrency.commit", "young-1-r1", "k1")
	for _, expected := range []int64{0, 2, 3} {
		c.staleCommit(d, th, expected, 1, 1)
	}
	th.admit("concurrency.commit", "young-1-r2", "k2")
}

// testFirstCommitRace: concurrent first commits to a thread never written,
// each expecting version 0: exactly one lands, and every loser, refused
// with ErrVersionConflict, wrote nothing.
func testFirstCommitRace(c *C) {
	d := c.sharedInstance()
	n := 8
	if c.full {
		n = 32
	}
	for round := range 3 {
		th := c.thread(d, fmt.Sprintf("first-race-%d", round))
		errs := make([]error, n)
		runs := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			th2 := *th
			th2.Builder = th.Fork()
			r := th2.Run(fmt.Sprintf("%s-w%d", th.ID, i))
			m := th2.Msg(r.ID+"-in", r.ID)
			b := th2.Batch([]string{r.ID}, []record.Run{r}, []record.Message{m}, []record.Idempotency{th2.Key(fmt.Sprintf("k%d", i), r.ID, m.ID)})
			b.CommitID = fmt.Sprintf("%s-c%d", th.ID, i)
			b.Thread.LastCommitID = b.CommitID
			runs[i] = r.ID
			wg.Go(func() { _, errs[i] = d.Commit(c.ctx, b) })
		}
		wg.Wait()
		var winners []int
		for i, err := range errs {
			switch {
			case err == nil:
				winners = append(winners, i)
			case !errors.Is(err, driver.ErrVersionConflict):
				c.Fatalf("concurrency.one-winner", "a losing first commit failed with %v, want ErrVersionConflict", err)
			}
		}
		if len(winners) != 1 {
			c.Fatalf("concurrency.one-winner", "%d of %d concurrent first commits to a thread never written succeeded, want exactly 1", len(winners), n)
		}
		w := winners[0]
		snap, err := d.LoadThread(c.ctx, th.ID)
		if err != nil || snap.Thread.Version != 1 || snap.Thread.LastCommitID != fmt.Sprintf("%s-c%d", th.ID, w) {
			c.Fatalf("concurrency.one-winner", "after the race the thread is %+v, %v; want version 1 written by the winner", snap.Thread, err)
		}
		if hist := c.allHistory("concurrency.conflict-writes-nothing", d, th.ID, 100); len(hist) != 1 || hist[0].RunID != runs[w] {
			c.Fatalf("concurrency.conflict-writes-nothing", "after the race thread %s holds %d messages, want the winner's one", th.ID, len(hist))
		}
		for i, id := range runs {
			if i == w {
				continue
			}
			c.runAbsent("concurrency.conflict-writes-nothing", d, id)
			if _, err := d.GetIdempotency(c.ctx, th.ID, fmt.Sprintf("k%d", i)); !errors.Is(err, driver.ErrNotFound) {
				c.Fatalf("concurrency.conflict-writes-nothing", "key k%d of a first commit refused as a conflict: %v, want ErrNotFound", i, err)
			}
		}
	}
}

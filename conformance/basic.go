package conformance

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

func init() {
	cases = append(cases,
		testCase{"handshake", "info", TierBasic, false, testInfo},
		testCase{"atomicity", "batch", TierBasic, false, testBatch},
		testCase{"atomicity", "refused-batch", TierBasic, false, testRefusedBatch},
		testCase{"atomicity", "absorbing-pair", TierBasic, false, testAbsorbingPair},
		testCase{"concurrency", "stale-version", TierBasic, false, testStaleVersion},
		testCase{"concurrency", "one-winner", TierBasic, false, testOneWinner},
		testCase{"reads", "read-your-writes", TierBasic, false, testReadYourWrites},
		testCase{"reads", "history", TierBasic, false, testHistory},
		testCase{"reads", "idempotency", TierBasic, false, testIdempotency},
		testCase{"indexes", "by-state", TierBasic, false, testByState},
		testCase{"indexes", "paging", TierBasic, false, testPaging},
		testCase{"badinput", "errors", TierBasic, false, testBadInput},
	)
}

func testInfo(c *C) {
	d := c.sharedInstance()
	info, err := d.Info(c.ctx)
	c.ok("handshake.info", "Info", err)
	if info.ProtocolVersion < driver.OldestProtocolVersion || info.ProtocolVersion > driver.ProtocolVersion {
		c.Errorf("handshake.protocol-version", "Info says protocol version %d, the suite speaks %d to %d", info.ProtocolVersion, driver.OldestProtocolVersion, driver.ProtocolVersion)
	}
	if info.Name == "" || info.Version == "" {
		c.Errorf("handshake.names", "Info must name the driver and its version: %+v", info)
	}
	again, err := d.Info(c.ctx)
	if err != nil || again != info {
		c.Errorf("handshake.info-stable", "a second Info differs: %+v, %v; first %+v", again, err, info)
	}
	if slices.Contains(c.s.opts.Tiers, TierDurable) && !info.Durable {
		c.Errorf("handshake.durability-claim", "the durable tier is claimed but Info says the driver is not durable")
	}
	if slices.Contains(c.s.opts.Tiers, TierLeases) && !info.Leases {
		c.Errorf("handshake.leases-claim", "the leases tier is claimed but Info says the driver has no leases")
	}
}

// bigBatch is a multi-record batch on a new thread: three runs, four
// messages, two keys.
func bigBatch(th *thread) (driver.Batch, []record.Run, []record.Message, []record.Idempotency) {
	r1, r2, r3 := th.Run("r1"), th.Run("r2"), th.Run("r3")
	r3.State, r3.TerminalReason = record.StateCompleted, record.ReasonCompleted
	m := []record.Message{th.Msg("m1", "r1"), th.Msg("m2", "r2"), th.Msg("m3", "r3"), th.Msg("m4", "r3")}
	m[3].Role, m[3].ToolCalls = record.RoleAssistant, []record.ToolCall{{ID: "call", Name: "search", Arguments: `{"q":1}`}}
	for i := range m {
		m[i].ID = th.ID + "-" + m[i].ID
	}
	k := []record.Idempotency{th.Key("k1", r1.ID, m[0].ID), th.Key("k2", r2.ID, m[1].ID)}
	runs := []record.Run{r1, r2, r3}
	for i := range runs {
		runs[i].ID = th.ID + "-" + runs[i].ID
		runs[i].InputMessageIDs = []string{m[i].ID}
	}
	k[0].RunID, k[1].RunID = runs[0].ID, runs[1].ID
	return th.Batch([]string{runs[0].ID, runs[1].ID}, runs, m, k), runs, m, k
}

// checkWhole fails rule unless every record of b is there as committed.
func (c *C) checkWhole(rule string, d driver.Driver, b driver.Batch) {
	for _, r := range b.Runs {
		got, err := d.GetRuns(c.ctx, []string{r.ID})
		if err != nil || len(got) != 1 || !sameRun(got[0], r) {
			c.Fatalf(rule, "run %s of committed batch %s: got %+v, %v; want %+v", r.ID, b.CommitID, got, err, r)
		}
	}
	hist := c.allHistory(rule, d, b.ThreadID, 1000)
	for _, m := range b.Messages {
		i := slices.IndexFunc(hist, func(h record.Message) bool { return h.ID == m.ID })
		if i < 0 || !sameMessage(hist[i], m) {
			c.Fatalf(rule, "message %s of committed batch %s is missing or altered", m.ID, b.CommitID)
		}
	}
	for _, k := range b.Idempotency {
		got, err := d.GetIdempotency(c.ctx, k.ThreadID, k.Key)
		if err != nil || record.NormalizeIdempotency(got) != record.NormalizeIdempotency(k) {
			c.Fatalf(rule, "idempotency key %q of committed batch %s: got %+v, %v", k.Key, b.CommitID, got, err)
		}
	}
	snap, err := d.LoadThread(c.ctx, b.ThreadID)
	if err != nil || snap.Thread.Version < b.Thread.Version {
		c.Fatalf(rule, "thread %s after batch %s: %+v, %v", b.ThreadID, b.CommitID, snap.Thread, err)
	}
}

func testBatch(c *C) {
	d := c.sharedInstance()
	th := c.thread(d, "atom")
	b, _, _, _ := bigBatch(th)
	th.commit("atomicity.batch-whole", b)
	c.checkWhole("atomicity.batch-whole", d, b)
	snap, err := d.LoadThread(c.ctx, th.ID)
	c.ok("reads.read-your-writes", "LoadThread", err)
	if !reflect.DeepEqual(record.NormalizeThread(snap.Thread), record.NormalizeThread(b.Thread)) {
		c.Fatalf("atomicity.batch-whole", "thread header %+v, want %+v", snap.Thread, b.Thread)
	}
	if !slices.Equal(ids(snap.Runs), b.Thread.OpenRunIDs) {
		c.Fatalf("reads.load-thread", "LoadThread runs %v, want the open runs %v in header order", ids(snap.Runs), b.Thread.OpenRunIDs)
	}
}

// expectUntouched fails rule unless the thread is still at version v with
// n messages and none of the runs or keys exist.
func (c *C) expectUntouched(rule string, d driver.Driver, threadID string, v int64, n int, runIDs []string, keys []string) {
	snap, err := d.LoadThread(c.ctx, threadID)
	if err != nil || snap.Thread.Version != v {
		c.Fatalf(rule, "thread %s: version %d, %v; want %d (a refused batch writes nothing)", threadID, snap.Thread.Version, err, v)
	}
	if hist := c.allHistory(rule, d, threadID, 1000); len(hist) != n {
		c.Fatalf(rule, "thread %s has %d messages, want %d (a refused batch writes nothing)", threadID, len(hist), n)
	}
	for _, id := range runIDs {
		c.runAbsent(rule, d, id)
		for _, st := range record.RunStates {
			for _, r := range c.listAll(d, st, 1000) {
				if r.ID == id {
					c.Fatalf(rule, "run %s of a refused batch is listed as %s", id, st)
				}
			}
		}
	}
	for _, k := range keys {
		if _, err := d.GetIdempotency(c.ctx, threadID, k); !errors.Is(err, driver.ErrNotFound) {
			c.Fatalf(rule, "key %q of a refused batch: got %v, want ErrNotFound", k, err)
		}
	}
}

func testRefusedBatch(c *C) {
	d := c.sharedInstance()
	th := c.thread(d, "refused")
	th.admit("atomicity.batch-whole", "first", "k0")
	for _, tc := range []struct {
		what string
		want error
		mut  func(b *driver.Batch)
	}{
		{"a batch reusing an existing idempotency key", driver.ErrVersionConflict, func(b *driver.Batch) {
			b.Idempotency = append(b.Idempotency, th.Key("k0", b.Runs[0].ID, b.Messages[0].ID))
		}},
		{"a batch reusing a message id", driver.ErrInvalidArgument, func(b *driver.Batch) {
			m := b.Messages[3]
			m.ID, m.Seq = "first-in", m.Seq+1
			b.Messages = append(b.Messages, m)
		}},
		{"a batch whose message seq is not after the history", driver.ErrInvalidArgument, func(b *driver.Batch) {
			b.Messages[3].Seq = 1
		}},
	} {
		th2 := *th
		th2.Builder = th.Fork()
		b, runs, _, keys := bigBatch(&th2)
		tc.mut(&b)
		_, err := d.Commit(c.ctx, b)
		c.wantErr("atomicity.refused-batch-writes-nothing", tc.what, err, tc.want)
		c.expectUntouched("atomicity.refused-batch-writes-nothing", d, th.ID, 1, 1, ids(runs), []string{keys[0].Key, keys[1].Key})
	}
}

func testStaleVersion(c *C) {
	d := c.sharedInstance()
	th := c.thread(d, "occ")
	th.admit("concurrency.commit", "occ-r1", "")
	th.admit("concurrency.commit", "occ-r2", "")
	for _, expected := range []int64{0, 1, 3, 9} {
		th2 := *th
		th2.Builder = th.Fork()
		th2.Version = expected
		r := th2.Run(fmt.Sprintf("stale-%d", expected))
		b := th2.Batch(append(slices.Clone(th.Open), r.ID), []record.Run{r}, []record.Message{th2.Msg(r.ID+"-in", r.ID)}, []record.Idempotency{th2.Key("stale", r.ID, r.ID+"-in")})
		b.Thread.Version = expected + 1
		_, err := d.Commit(c.ctx, b)
		if err == nil {
			c.Fatalf("concurrency.stale-version", "a commit expecting version %d of a thread at version 2 was accepted", expected)
		}
		c.wantErr("concurrency.stale-version", fmt.Sprintf("commit expecting version %d of a thread at 2", expected), err, driver.ErrVersionConflict)
		c.expectUntouched("concurrency.stale-version-writes-nothing", d, th.ID, 2, 2, []string{r.ID}, []string{"stale"})
	}
	th.admit("concurrency.commit", "occ-r3", "")
}

func testOneWinner(c *C) {
	d := c.sharedInstance()
	n := 8
	if c.full {
		n = 32
	}
	for round := 0; round < 3; round++ {
		th := c.thread(d, fmt.Sprintf("race-%d", round))
		th.admit("concurrency.commit", th.ID+"-base", "")
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				th2 := *th
				th2.Builder = th.Fork()
				r := th2.Run(fmt.Sprintf("%s-w%d", th.ID, i))
				m := th2.Msg(r.ID+"-in", r.ID)
				b := th2.Batch(append(slices.Clone(th.Open), r.ID), []record.Run{r}, []record.Message{m}, []record.Idempotency{th2.Key(fmt.Sprintf("k%d", i), r.ID, m.ID)})
				b.CommitID = fmt.Sprintf("%s-c%d", th.ID, i)
				b.Thread.LastCommitID = b.CommitID
				_, errs[i] = d.Commit(c.ctx, b)
			})
		}
		wg.Wait()
		var winners []int
		for i, err := range errs {
			switch {
			case err == nil:
				winners = append(winners, i)
			case !errors.Is(err, driver.ErrVersionConflict):
				c.Fatalf("concurrency.one-winner", "a losing concurrent commit failed with %v, want ErrVersionConflict", err)
			}
		}
		if len(winners) != 1 {
			c.Fatalf("concurrency.one-winner", "%d of %d concurrent commits on version 1 succeeded, want exactly 1", len(winners), n)
		}
		snap, err := d.LoadThread(c.ctx, th.ID)
		if err != nil || snap.Thread.Version != 2 || snap.Thread.LastCommitID != fmt.Sprintf("%s-c%d", th.ID, winners[0]) {
			c.Fatalf("concurrency.one-winner", "after the race the thread is %+v, %v; want version 2 written by the winner", snap.Thread, err)
		}
		if hist := c.allHistory("concurrency.one-winner", d, th.ID, 100); len(hist) != 2 {
			c.Fatalf("concurrency.one-winner", "after the race the thread has %d messages, want 2 (the losers write nothing)", len(hist))
		}
		for i := range n {
			id := fmt.Sprintf("%s-w%d", th.ID, i)
			if i == winners[0] {
				c.getRun("concurrency.one-winner", d, id)
			} else {
				c.runAbsent("concurrency.one-winner", d, id)
			}
		}
	}
}

func testReadYourWrites(c *C) {
	d := c.sharedInstance()
	th := c.thread(d, "ryw")
	want := map[string]record.Run{}
	for i := range 6 {
		r := th.admit("reads.read-your-writes", fmt.Sprintf("ryw-%d", i), fmt.Sprintf("key-%d", i))
		want[r.ID] = r
		// Every read sees the commit at once.
		snap, err := d.LoadThread(c.ctx, th.ID)
		if err != nil || snap.Thread.Version != th.Version || !slices.Equal(ids(snap.Runs), th.Open) {
			c.Fatalf("reads.read-your-writes", "LoadThread right after commit %d: version %d, open %v, %v; want %d, %v", i+1, snap.Thread.Version, ids(snap.Runs), err, th.Version, th.Open)
		}
		got := c.getRun("reads.read-your-writes", d, r.ID)
		if !sameRun(got, r) {
			c.Fatalf("reads.fidelity", "run read back differs: got %+v, want %+v", got, r)
		}
		if k, err := d.GetIdempotency(c.ctx, th.ID, fmt.Sprintf("key-%d", i)); err != nil || k.RunID != r.ID {
			c.Fatalf("reads.read-your-writes", "key of commit %d right after it: %+v, %v", i+1, k, err)
		}
		if hist := c.allHistory("reads.read-your-writes", d, th.ID, 100); len(hist) != i+1 {
			c.Fatalf("reads.read-your-writes", "history right after commit %d has %d messages", i+1, len(hist))
		}
	}
	// GetRuns in the order asked, repeats included; an unknown id is NotFound.
	order := []string{"ryw-3", "ryw-0", "ryw-3", "ryw-5"}
	got, err := d.GetRuns(c.ctx, order)
	if err != nil || !slices.Equal(ids(got), order) {
		c.Fatalf("reads.get-runs", "GetRuns(%v) = %v, %v; want the runs in the order asked", order, ids(got), err)
	}
	if _, err := d.GetRuns(c.ctx, []string{"ryw-0", "nope"}); !errors.Is(err, driver.ErrNotFound) {
		c.Fatalf("reads.get-runs", "GetRuns with an unknown id: %v, want ErrNotFound", err)
	}
	// A replaced run reads back replaced.
	r := want["ryw-0"]
	r.State, r.Owner, r.Attempt = record.StateActive, "host-1", 1
	th.commit("reads.read-your-writes", th.Batch(th.Open, []record.Run{r}, nil, nil))
	if got := c.getRun("reads.read-your-writes", d, r.ID); !sameRun(got, r) {
		c.Fatalf("reads.read-your-writes", "replaced run reads back as %+v, want %+v", got, r)
	}
}

func testHistory(c *C) {
	d := c.sharedInstance()
	th := c.thread(d, "hist")
	other := c.thread(d, "hist-other")
	var want []record.Message
	for k := range 6 {
		var msgs []record.Message
		for i := range 5 {
			m := th.Msg(fmt.Sprintf("h-%d-%d", k, i), "run")
			m.Content = strings.Repeat(string(rune('a'+i)), k*10+i)
			th.NextSeq += int64(k) // gaps are allowed
			msgs = append(msgs, m)
		}
		th.commit("reads.history", th.Batch(nil, nil, msgs, nil))
		want = append(want, msgs...)
		other.admit("reads.history", fmt.Sprintf("o-%d", k), "")
	}
	for _, limit := range []int{1, 2, 3, 7, 30, 1000} {
		got := c.allHistory("reads.history-order", d, th.ID, limit)
		if len(got) != len(want) {
			c.Fatalf("reads.history-paging", "paging with limit %d read %d messages, want %d (a page skipped or repeated records)", limit, len(got), len(want))
		}
		for i := range got {
			if !sameMessage(got[i], want[i]) {
				c.Fatalf("reads.history-order", "paging with limit %d: message %d is %s (seq %d), want %s (seq %d)", limit, i, got[i].ID, got[i].Seq, want[i].ID, want[i].Seq)
			}
		}
	}
	// Starting inside a gap, and past the end.
	page, err := d.ReadHistory(c.ctx, th.ID, want[7].Seq+1, 1)
	if err != nil || len(page) != 1 || page[0].ID != want[8].ID {
		c.Fatalf("reads.history-paging", "ReadHistory from inside a gap = %v, %v; want %s", page, err, want[8].ID)
	}
	page, err = d.ReadHistory(c.ctx, th.ID, want[len(want)-1].Seq, 10)
	if err != nil || len(page) != 0 {
		c.Fatalf("reads.history-paging", "ReadHistory past the end = %d messages, %v; want none", len(page), err)
	}
}

func testIdempotency(c *C) {
	d := c.sharedInstance()
	a, b := c.thread(d, "idem-a"), c.thread(d, "idem-b")
	ra := a.admit("reads.idempotency", "ia", "shared-key")
	rb := b.admit("reads.idempotency", "ib", "shared-key")
	a.admit("reads.idempotency", "ia2", "only-a")
	for _, tc := range []struct {
		thread, key, run string
	}{{a.ID, "shared-key", ra.ID}, {b.ID, "shared-key", rb.ID}, {a.ID, "only-a", "ia2"}} {
		k, err := d.GetIdempotency(c.ctx, tc.thread, tc.key)
		if err != nil || k.ThreadID != tc.thread || k.RunID != tc.run {
			c.Fatalf("reads.idempotency-by-thread", "GetIdempotency(%s, %s) = %+v, %v; want the record of run %s (keys are per thread)", tc.thread, tc.key, k, err, tc.run)
		}
	}
	for _, tc := range [][2]string{{b.ID, "only-a"}, {"idem-c", "shared-key"}, {a.ID, "never"}} {
		if k, err := d.GetIdempotency(c.ctx, tc[0], tc[1]); !errors.Is(err, driver.ErrNotFound) {
			c.Fatalf("reads.idempotency-by-thread", "GetIdempotency(%s, %s) = %+v, %v; want ErrNotFound (keys are per thread)", tc[0], tc[1], k, err)
		}
	}
}

// testByState drives runs through every transition and checks, after each
// commit, that ListRuns of every state is exactly the runs in it.
func testByState(c *C) {
	d, _ := c.start()
	model := map[string]record.Run{}
	check := func(after string) {
		for _, st := range record.RunStates {
			var want []string
			for id, r := range model {
				if r.State == st {
					want = append(want, id)
				}
			}
			slices.Sort(want)
			got := c.listAll(d, st, 2)
			if !slices.Equal(ids(got), want) {
				c.Fatalf("index.list-by-state", "after %s, ListRuns(%s) = %v, want %v", after, st, ids(got), want)
			}
			for _, r := range got {
				if !sameRun(r, model[r.ID]) {
					c.Fatalf("index.list-by-state", "after %s, ListRuns(%s) returned %+v, want %+v", after, st, r, model[r.ID])
				}
			}
		}
	}
	ths := []*thread{c.thread(d, "ix-a"), c.thread(d, "ix-b")}
	step := func(th *thread, what string, open []string, runs ...record.Run) {
		th.commit("index.list-by-state", th.Batch(open, runs, nil, nil))
		for _, r := range runs {
			model[r.ID] = r
		}
		check(what)
	}
	for i, th := range ths {
		for j := range 4 {
			r := th.admit("index.list-by-state", fmt.Sprintf("ix%d-%d", j, i), "")
			model[r.ID] = r
			check("admitting " + r.ID)
		}
		id := func(j int) string { return fmt.Sprintf("ix%d-%d", j, i) }
		r0, r1, r2, r3 := model[id(0)], model[id(1)], model[id(2)], model[id(3)]
		r0.State, r0.Owner = record.StateActive, "host-1"
		step(th, "starting "+r0.ID, th.Open, r0)
		r0.State, r0.Owner = record.StateQueued, ""
		r0.Attempt++
		step(th, "recovering "+r0.ID, th.Open, r0)
		r0.State, r0.Owner = record.StateActive, "host-2"
		step(th, "restarting "+r0.ID, th.Open, r0)
		r0.State, r0.TerminalReason = record.StateCompleted, record.ReasonCompleted
		r1.State, r1.TerminalReason, r1.AbsorbedIntoRunID = record.StateSuperseded, record.ReasonAbsorbed, r0.ID
		step(th, "completing "+r0.ID+" absorbing "+r1.ID, []string{id(2), id(3)}, r0, r1)
		r2.State, r2.Owner = record.StateActive, "host-2"
		step(th, "starting "+r2.ID, th.Open, r2)
		r2.State, r2.TerminalReason = record.StateFailed, record.ReasonFailed
		r3.State, r3.TerminalReason = record.StateInterrupted, record.ReasonCanceled
		step(th, "failing "+r2.ID+" and canceling "+r3.ID, nil, r2, r3)
	}
}

// testPaging: listings page stably and completely, also while other runs
// come and go between pages.
func testPaging(c *C) {
	d, _ := c.start()
	n := 23
	th := c.thread(d, "pg")
	var all []string
	for i := range n {
		r := th.admit("index.paging", fmt.Sprintf("pg-%02d", i), "")
		all = append(all, r.ID)
	}
	for _, limit := range []int{1, 2, 5, 22, 23, 100} {
		if got := ids(c.listAll(d, record.StateQueued, limit)); !slices.Equal(got, all) {
			c.Fatalf("index.paging", "ListRuns(queued) with limit %d = %v, want %v", limit, got, all)
		}
	}
	// A cursor that is not a run id starts after it.
	page, err := d.ListRuns(c.ctx, record.StateQueued, "pg-04\x00", 2)
	if err != nil || !slices.Equal(ids(page), []string{"pg-05", "pg-06"}) {
		c.Fatalf("index.paging", "ListRuns after a cursor that is no run id = %v, %v; want [pg-05 pg-06]", ids(page), err)
	}
	// Paging while runs come and go: every run queued throughout is seen
	// exactly once.
	other := c.thread(d, "pg-other")
	seen := map[string]int{}
	after := ""
	for i := 0; ; i++ {
		page, err := d.ListRuns(c.ctx, record.StateQueued, after, 3)
		c.ok("index.paging", "ListRuns", err)
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			seen[r.ID]++
		}
		after = page[len(page)-1].ID
		other.admit("index.paging", fmt.Sprintf("pg-%02d-new", i), "")
	}
	for _, id := range all {
		if seen[id] != 1 {
			c.Fatalf("index.paging", "run %s, queued throughout, was listed %d times while other runs were admitted", id, seen[id])
		}
	}
}

// testBadInput: bad requests get clear errors, and the driver keeps
// serving in the same process.
func testBadInput(c *C) {
	d := c.sharedInstance()
	pid := d.Pid()
	th := c.thread(d, "bad")
	th.admit("badinput.keeps-serving", "bad-1", "k")
	check := func(what string, err, want error) {
		if !errors.Is(err, want) {
			c.Errorf("badinput.clear-errors", "%s: got %v, want %v", what, err, want)
		} else if len(err.Error()) <= len(want.Error()) {
			c.Errorf("badinput.clear-errors", "%s: the error %q says nothing beyond its kind", what, err)
		}
	}
	_, err := d.LoadThread(c.ctx, "")
	check("LoadThread of an empty id", err, driver.ErrInvalidArgument)
	_, err = d.ReadHistory(c.ctx, th.ID, 0, 0)
	check("ReadHistory with limit 0", err, driver.ErrInvalidArgument)
	_, err = d.ListRuns(c.ctx, "sleeping", "", 10)
	check("ListRuns of an unknown state", err, driver.ErrInvalidArgument)
	_, err = d.ListRuns(c.ctx, record.StateQueued, "", -1)
	check("ListRuns with a negative limit", err, driver.ErrInvalidArgument)
	_, err = d.GetIdempotency(c.ctx, th.ID, "")
	check("GetIdempotency without a key", err, driver.ErrInvalidArgument)
	_, err = d.Commit(c.ctx, driver.Batch{})
	check("an empty batch", err, driver.ErrInvalidArgument)
	b := th.Batch(th.Open, []record.Run{{ID: "x", ThreadID: th.ID, State: "sleeping"}}, nil, nil)
	_, err = d.Commit(c.ctx, b)
	check("a run in an unknown state", err, driver.ErrInvalidArgument)
	b = th.Batch(th.Open, []record.Run{{ID: "x", ThreadID: "elsewhere", State: record.StateQueued}}, nil, nil)
	_, err = d.Commit(c.ctx, b)
	check("a run of another thread", err, driver.ErrInvalidArgument)
	b = th.Batch(th.Open, nil, nil, nil)
	b.Thread.Version = 7
	_, err = d.Commit(c.ctx, b)
	check("a header version that is not expected+1", err, driver.ErrInvalidArgument)
	big := th.Msg("huge", "bad-1")
	big.Content = strings.Repeat("x", 9<<20)
	_, err = d.Commit(c.ctx, th.Batch(th.Open, nil, []record.Message{big}, nil))
	check("a batch over the size limit", err, driver.ErrTooLarge)
	th.NextSeq--
	c.expectUntouched("badinput.writes-nothing", d, th.ID, 1, 1, []string{"x"}, nil)
	// Still serving, in the same process.
	th.Commits = 100
	th.admit("badinput.keeps-serving", "bad-2", "")
	if d.Pid() != pid {
		c.Fatalf("badinput.keeps-serving", "the driver process changed (pid %d, was %d): bad input crashed it", d.Pid(), pid)
	}
}

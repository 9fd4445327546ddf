package badgerdriver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

// idBatch is the commit of version v+1 of thread th: a queued run and its
// input message, with the ids given.
func idBatch(th string, v int64, run, msg string) driver.Batch {
	cid := fmt.Sprintf("%s-c%d", th, v+1)
	return driver.Batch{CommitID: cid, ThreadID: th, ExpectedVersion: v,
		Thread: record.Thread{ID: th, Version: v + 1, LastCommitID: cid, OpenRunIDs: []string{run}},
		Runs:   []record.Run{{ID: run, ThreadID: th, Seq: v + 1, State: record.StateQueued}},
		Messages: []record.Message{{ID: msg, ThreadID: th, RunID: run, Seq: v + 1, Role: record.RoleUser,
			Content: "hello"}},
	}
}

func TestIDFloor(t *testing.T) {
	f := newIDFloor("b", 2)
	for _, tc := range []struct {
		id   string
		want bool
	}{{"a", false}, {"b", false}, {"c", true}} {
		if got := f.unused(tc.id); got != tc.want {
			t.Errorf("floor b: unused(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
	f.add("d")
	f.add("c")
	if f.unused("c") || f.unused("d") || !f.unused("e") {
		t.Fatalf("after c, d: %+v", f)
	}
	f.add("e") // full: the floor rises to d, then e is above it
	if f.floor != "d" || f.unused("c") || f.unused("d") || f.unused("e") || !f.unused("f") {
		t.Fatalf("after c, d, e with room for two: %+v", f)
	}
}

// TestNewIDs: ids the committer proves unused without a read are unused,
// and an id in use is refused however it arrives: growing or not, in the
// same group as its first use, after the committer's set was emptied, and
// after a reopen.
func TestNewIDs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d, err := Open(DefaultConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	// Set before the first commit reaches the committer: the floors rise
	// every third id.
	d.msgIDs.max, d.runIDs.max = 3, 3

	var used []int // numbers of the ids in use: run_%04d, msg_%04d
	version := map[string]int64{}
	commit := func(d *Driver, th string, n int) error {
		_, err := d.Commit(ctx, idBatch(th, version[th], fmt.Sprintf("run_%04d", n), fmt.Sprintf("msg_%04d", n)))
		if err == nil {
			version[th]++
			used = append(used, n)
		}
		return err
	}
	// Growing ids, some out of order, on three threads.
	for i, n := range []int{10, 11, 13, 12, 14, 20, 15, 21, 22, 5, 23} {
		if err := commit(d, fmt.Sprintf("t%d", i%3), n); err != nil {
			t.Fatalf("id %d: %v", n, err)
		}
	}
	check := func(d *Driver, when string) {
		t.Helper()
		for _, n := range used {
			th := "other"
			reuse := idBatch(th, version[th], fmt.Sprintf("run_new%04d", n), fmt.Sprintf("msg_%04d", n))
			if _, err := d.Commit(ctx, reuse); !errors.Is(err, driver.ErrInvalidArgument) || !strings.Contains(err.Error(), "exists") {
				t.Fatalf("%s: message id msg_%04d again: %v", when, n, err)
			}
			reuse = idBatch(th, version[th], fmt.Sprintf("run_%04d", n), fmt.Sprintf("msg_new%04d", n))
			if _, err := d.Commit(ctx, reuse); !errors.Is(err, driver.ErrInvalidArgument) || !strings.Contains(err.Error(), "belongs to thread") {
				t.Fatalf("%s: run id run_%04d on another thread: %v", when, n, err)
			}
		}
	}
	check(d, "growing ids")

	// Two batches in one group, the second reusing the first's ids.
	a := idBatch("g1", 0, "run_0100", "msg_0100")
	b := idBatch("g2", 0, "run_0101", "msg_0100")
	c := idBatch("g3", 0, "run_0100", "msg_0102")
	_, errs := d.CommitMany(ctx, []driver.Batch{a, b, c})
	if errs[0] != nil || !errors.Is(errs[1], driver.ErrInvalidArgument) || !errors.Is(errs[2], driver.ErrInvalidArgument) {
		t.Fatalf("one group, ids reused: %v", errs)
	}
	version["g1"] = 1
	used = append(used, 100)

	// A run committed again on its own thread is an update: the state
	// index follows it.
	th := "t0"
	upd := idBatch(th, version[th], "run_0010", fmt.Sprintf("msg_%04d", 200))
	upd.Runs[0].State = record.StateActive
	if _, err := d.Commit(ctx, upd); err != nil {
		t.Fatal(err)
	}
	version[th]++
	queued, err := d.ListRuns(ctx, record.StateQueued, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range queued {
		if r.ID == "run_0010" {
			t.Fatalf("run_0010 is active but still listed as queued")
		}
	}

	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	d, err = Open(DefaultConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	if d.msgIDs.floor != "msg_0200" || d.runIDs.floor != "run_0100" {
		t.Fatalf("after a reopen: floors %q, %q; want the last ids msg_0200, run_0100", d.msgIDs.floor, d.runIDs.floor)
	}
	check(d, "after a reopen")
	if err := commit(d, "t1", 300); err != nil {
		t.Fatalf("a new id after a reopen: %v", err)
	}
	check(d, "after a reopen and a commit")
}

// TestLastID: the last id of a table, with keys of the tables on either
// side of it present or not.
func TestLastID(t *testing.T) {
	cfg := DefaultConfig("")
	cfg.InMemory = true
	d, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())
	last := func(table byte) string {
		t.Helper()
		id, err := lastID(d.db, table)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	if m, r := last(tMsgID), last(tRun); m != "" || r != "" {
		t.Fatalf("empty store: last ids %q, %q", m, r)
	}
	if _, err := d.Commit(context.Background(), idBatch("th", 0, "run_b", "msg_b")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Commit(context.Background(), idBatch("th", 1, "run_a", "msg_a")); err != nil {
		t.Fatal(err)
	}
	if m, r := last(tMsgID), last(tRun); m != "msg_b" || r != "run_b" {
		t.Fatalf("last ids %q, %q; want msg_b, run_b", m, r)
	}
	if id := last(tIdem); id != "" {
		t.Fatalf("no idempotency keys, last %q", id)
	}
}

// TestNewStepIDs: a step id in use is refused however it arrives, through
// a step batch or a commit: growing or not, in the same group as its first
// use, after the committer's set was emptied, and after a reopen.
func TestNewStepIDs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d, err := Open(DefaultConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	d.stepIDs.max = 3 // set before the first commit: the floor rises every third id
	next := map[string]int64{}
	var used []string
	step := func(run, id string) driver.StepBatch {
		b := stepBatch("t"+run, run, "o", 1, next[run]+1)
		b.Steps[0].ID = id
		return b
	}
	for _, run := range []string{"r1", "r2"} {
		if _, err := d.Commit(ctx, runBatch("t"+run, 0, run, record.StateActive, "o", 1)); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range []int{10, 11, 13, 12, 14, 20, 15, 21, 5, 22} {
		run := []string{"r1", "r2"}[i%2]
		id := fmt.Sprintf("step_%04d", n)
		if err := d.CommitSteps(ctx, step(run, id)); err != nil {
			t.Fatalf("step id %s: %v", id, err)
		}
		next[run]++
		used = append(used, id)
	}
	check := func(d *Driver, when string) {
		t.Helper()
		for _, id := range used {
			if err := d.CommitSteps(ctx, step("r1", id)); !errors.Is(err, driver.ErrInvalidArgument) || !strings.Contains(err.Error(), "exists") {
				t.Fatalf("%s: step id %s again: %v", when, id, err)
			}
		}
	}
	check(d, "growing ids")

	// In one group: a step batch, then another run's batch and a commit
	// reusing its id.
	errs := d.CommitStepsMany(ctx, []driver.StepBatch{step("r1", "step_0100"), step("r2", "step_0100")})
	if errs[0] != nil || !errors.Is(errs[1], driver.ErrInvalidArgument) {
		t.Fatalf("one group, a step id reused: %v", errs)
	}
	next["r1"]++
	used = append(used, "step_0100")
	end := runBatch("tr2", 1, "r2", record.StateCompleted, "o", 1)
	end.Steps = step("r2", "step_0100").Steps
	if _, err := d.Commit(ctx, end); !errors.Is(err, driver.ErrInvalidArgument) {
		t.Fatalf("a commit reusing a step id: %v", err)
	}

	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err = Open(DefaultConfig(dir)); err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	if d.stepIDs.floor != "step_0100" {
		t.Fatalf("after a reopen: floor %q, want the last step id step_0100", d.stepIDs.floor)
	}
	check(d, "after a reopen")
	if err := d.CommitSteps(ctx, step("r1", "step_0300")); err != nil {
		t.Fatalf("a new step id after a reopen: %v", err)
	}
}

package badgerdriver

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

// headBatch is the commit of version v+1 of thread th, with one message of
// seq (v+1)*10.
func headBatch(th string, v int64) driver.Batch {
	cid := fmt.Sprintf("%s-c%d", th, v+1)
	return driver.Batch{CommitID: cid, ThreadID: th, ExpectedVersion: v,
		Thread:   record.Thread{ID: th, Version: v + 1, LastCommitID: cid},
		Messages: []record.Message{{ID: fmt.Sprintf("%s-m%d", th, v+1), ThreadID: th, Seq: (v + 1) * 10, Role: record.RoleUser}},
	}
}

// TestThreadHeads: the committer checks batches against the thread heads
// it keeps, and against badger's when it has none (emptied when full, or
// after a reopen): a stale version or a message seq that is not after the
// thread's last is refused either way.
func TestThreadHeads(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d, err := Open(DefaultConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	d.maxHeads = 2 // set before the first commit reaches the committer
	threads := []string{"a", "b", "c", "d", "e"}
	check := func(d *Driver, v int64) {
		t.Helper()
		for _, th := range threads {
			if _, err := d.Commit(ctx, headBatch(th, v-1)); !errors.Is(err, driver.ErrVersionConflict) {
				t.Fatalf("%s: stale batch at version %d: %v", th, v, err)
			}
			old := headBatch(th, v)
			old.Messages[0].Seq = v * 10 // not after the last
			if _, err := d.Commit(ctx, old); !errors.Is(err, driver.ErrInvalidArgument) {
				t.Fatalf("%s: message seq %d after %d: %v", th, v*10, v*10, err)
			}
		}
	}
	for v := range int64(3) {
		for _, th := range threads {
			if _, err := d.Commit(ctx, headBatch(th, v)); err != nil {
				t.Fatalf("%s: version %d: %v", th, v+1, err)
			}
		}
	}
	check(d, 3)
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	d, err = Open(DefaultConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	check(d, 3)
	for _, th := range threads {
		if _, err := d.Commit(ctx, headBatch(th, 3)); err != nil {
			t.Fatalf("%s: version 4 after a reopen: %v", th, err)
		}
		snap, err := d.LoadThread(ctx, th)
		if err != nil || snap.Thread.Version != 4 {
			t.Fatalf("%s: %+v, %v; want version 4", th, snap.Thread, err)
		}
	}
	check(d, 4)
}

// runBatch is the commit of version v+1 of thread th that writes run id
// with state, owner and attempt.
func runBatch(th string, v int64, id string, state record.RunState, owner string, attempt int) driver.Batch {
	cid := fmt.Sprintf("%s-c%d", th, v+1)
	return driver.Batch{CommitID: cid, ThreadID: th, ExpectedVersion: v,
		Thread: record.Thread{ID: th, Version: v + 1, LastCommitID: cid},
		Runs:   []record.Run{{ID: id, ThreadID: th, Seq: 1, State: state, Owner: owner, Attempt: attempt}},
	}
}

// stepBatch is a step batch of run id of thread th, by owner and attempt,
// with one model step of seq.
func stepBatch(th, id, owner string, attempt int, seq int64) driver.StepBatch {
	sid := fmt.Sprintf("%s-a%d-s%d-%s", id, attempt, seq, owner)
	return driver.StepBatch{ThreadID: th, RunID: id, Owner: owner, Attempt: attempt,
		Steps: []record.Step{{ID: sid, RunID: id, ThreadID: th, Seq: seq, Attempt: attempt, Kind: record.StepModel,
			Message: record.Message{ID: sid + "-m", ThreadID: th, Role: record.RoleAssistant}}}}
}

// TestStepHeads: the committer checks step batches against the step heads
// it keeps, and against badger's when it has none: a seq that is not the
// next, another owner or attempt, another thread, and a run that a commit
// ended or started again (earlier in the same group included) are refused
// either way.
func TestStepHeads(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d, err := Open(DefaultConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	d.maxHeads = 2 // set before the first commit reaches the committer
	// group commits reqs in one group, in order, and returns their verdicts.
	group := func(reqs ...*commitReq) []error {
		t.Helper()
		if err := d.submit(ctx, reqs); err != nil {
			t.Fatal(err)
		}
		errs := make([]error, len(reqs))
		for i, r := range reqs {
			errs[i] = <-r.done
		}
		return errs
	}
	commitReqOf := func(b driver.Batch) *commitReq {
		t.Helper()
		r, err := d.prepare(ctx, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	stepReqOf := func(b driver.StepBatch) *commitReq {
		t.Helper()
		r, err := d.prepareSteps(ctx, &b, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	runs := []string{"r1", "r2", "r3"} // more than the cache holds
	for _, id := range runs {
		th := "t" + id
		if _, err := d.Commit(ctx, runBatch(th, 0, id, record.StateActive, "o", 1)); err != nil {
			t.Fatal(err)
		}
		for seq := int64(1); seq <= 2; seq++ {
			if err := d.CommitSteps(ctx, stepBatch(th, id, "o", 1, seq)); err != nil {
				t.Fatalf("%s: step %d: %v", id, seq, err)
			}
		}
	}
	refused := func(d *Driver, id string, seq int64) {
		t.Helper()
		th := "t" + id
		for _, tc := range []struct {
			b    driver.StepBatch
			want error
		}{
			{stepBatch(th, id, "o", 1, seq-1), driver.ErrVersionConflict},
			{stepBatch(th, id, "o", 1, seq+1), driver.ErrVersionConflict},
			{stepBatch(th, id, "p", 1, seq), driver.ErrVersionConflict},
			{stepBatch(th, id, "o", 2, seq), driver.ErrVersionConflict},
			{stepBatch("tx", id, "o", 1, seq), driver.ErrInvalidArgument},
		} {
			if err := d.CommitSteps(ctx, tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("%s: %+v: %v, want %v", id, tc.b, err, tc.want)
			}
		}
	}
	for _, id := range runs {
		refused(d, id, 3)
	}
	// A step id stored before is refused at the next seq too.
	dup := stepBatch("tr1", "r1", "o", 1, 3)
	dup.Steps[0].ID = "r1-a1-s2-o"
	if err := d.CommitSteps(ctx, dup); !errors.Is(err, driver.ErrInvalidArgument) {
		t.Fatalf("a stored step id: %v", err)
	}

	// r1 ends, then its steps come, in one group; r2 takes its step 3,
	// then is started again by another owner, then its old owner's step 4
	// comes, in one group.
	errs := group(commitReqOf(runBatch("tr1", 1, "r1", record.StateCompleted, "o", 1)), stepReqOf(stepBatch("tr1", "r1", "o", 1, 3)))
	if errs[0] != nil || !errors.Is(errs[1], driver.ErrVersionConflict) {
		t.Fatalf("steps after the run ended in the same group: %v", errs)
	}
	errs = group(stepReqOf(stepBatch("tr2", "r2", "o", 1, 3)), commitReqOf(runBatch("tr2", 1, "r2", record.StateActive, "p", 2)),
		stepReqOf(stepBatch("tr2", "r2", "o", 1, 4)), stepReqOf(stepBatch("tr2", "r2", "p", 2, 4)))
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], driver.ErrVersionConflict) || errs[3] != nil {
		t.Fatalf("steps of a run started again in the same group: %v", errs)
	}
	if err := d.CommitSteps(ctx, stepBatch("tr1", "r1", "o", 1, 3)); !errors.Is(err, driver.ErrVersionConflict) {
		t.Fatalf("steps of an ended run: %v", err)
	}
	if err := d.CommitSteps(ctx, stepBatch("tr2", "r2", "o", 1, 5)); !errors.Is(err, driver.ErrVersionConflict) {
		t.Fatalf("steps of a run's earlier attempt: %v", err)
	}
	// CommitStepsMany: each batch its own verdict.
	errs = d.CommitStepsMany(ctx, []driver.StepBatch{stepBatch("tr2", "r2", "p", 2, 5), stepBatch("tr3", "r3", "o", 1, 4),
		stepBatch("tr3", "r3", "o", 1, 3), {}})
	if errs[0] != nil || !errors.Is(errs[1], driver.ErrVersionConflict) || errs[2] != nil || !errors.Is(errs[3], driver.ErrInvalidArgument) {
		t.Fatalf("CommitStepsMany: %v", errs)
	}

	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	d, err = Open(DefaultConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	if err := d.CommitSteps(ctx, stepBatch("tr1", "r1", "o", 1, 3)); !errors.Is(err, driver.ErrVersionConflict) {
		t.Fatalf("steps of an ended run after a reopen: %v", err)
	}
	refused(d, "r3", 4)
	for _, b := range []driver.StepBatch{stepBatch("tr2", "r2", "p", 2, 6), stepBatch("tr3", "r3", "o", 1, 4)} {
		if err := d.CommitSteps(ctx, b); err != nil {
			t.Fatalf("%s after a reopen: %v", b.RunID, err)
		}
	}
	steps, err := d.ReadSteps(ctx, "r2", 0, 10)
	if err != nil || len(steps) != 6 || steps[3].ID != "r2-a2-s4-p" || steps[5].ID != "r2-a2-s6-p" {
		t.Fatalf("r2's steps: %+v, %v", steps, err)
	}
}

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

package badgerdriver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

// rawDB opens dir with badger alone, as no driver would, to shape or read
// its stored form; fn runs in one read-write transaction.
func rawDB(t *testing.T, dir string, fn func(txn *badger.Txn) error) {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// storedFormat returns the format key of dir (0 without one) and how many
// n keys it holds.
func storedFormat(t *testing.T, dir string) (v uint64, lastKeys int) {
	t.Helper()
	rawDB(t, dir, func(txn *badger.Txn) error {
		item, err := txn.Get(formatKey)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			b, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			v = binary.BigEndian.Uint64(b)
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tStepLast}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			lastKeys++
		}
		return nil
	})
	return v, lastKeys
}

// TestFormatNew: a new directory gets the format key at its first open,
// and opens again.
func TestFormatNew(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		d, err := Open(DefaultConfig(dir))
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if v, n := storedFormat(t, dir); v != formatVersion || n != 0 {
			t.Fatalf("format %d, %d last-seq keys; want %d, none", v, n, formatVersion)
		}
	}
}

// TestFormatMigration: a directory of store format 1 (a last-seq key per
// run with steps, no format key) opens as format 2: its last-seq keys are
// gone, the format key is written, and each run's steps go on from the
// seq its log holds. A migration cut short (some keys deleted, no format
// key yet) finishes at the next open.
func TestFormatMigration(t *testing.T) {
	for _, cut := range []bool{false, true} {
		name := "whole"
		if cut {
			name = "cut short"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			d, err := Open(DefaultConfig(dir))
			if err != nil {
				t.Fatal(err)
			}
			for i, id := range []string{"r1", "r2", "r3"} {
				if _, err := d.Commit(ctx, runBatch("t"+id, 0, id, record.StateActive, "o", 1)); err != nil {
					t.Fatal(err)
				}
				for seq := int64(1); seq <= int64(i); seq++ { // r1 none, r2 one, r3 two
					if err := d.CommitSteps(ctx, stepBatch("t"+id, id, "o", 1, seq)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := d.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// Format 1's form: no format key, a last-seq key for r2 and r3
			// (for r3 only, when the migration was cut short after r2's).
			rawDB(t, dir, func(txn *badger.Txn) error {
				if err := txn.Delete(formatKey); err != nil {
					return err
				}
				last := map[string]int64{"r2": 1, "r3": 2}
				if cut {
					delete(last, "r2")
				}
				for id, seq := range last {
					if err := txn.Set(simpleKey(tStepLast, id), binary.BigEndian.AppendUint64(nil, uint64(seq))); err != nil {
						return err
					}
				}
				return nil
			})
			if v, n := storedFormat(t, dir); v != 0 || n == 0 {
				t.Fatalf("format 1 directory: format %d, %d last-seq keys", v, n)
			}

			d, err = Open(DefaultConfig(dir))
			if err != nil {
				t.Fatal(err)
			}
			for i, id := range []string{"r1", "r2", "r3"} {
				next := int64(i) + 1
				for _, seq := range []int64{next - 1, next + 1} {
					if seq < 1 {
						continue
					}
					if err := d.CommitSteps(ctx, stepBatch("t"+id, id, "o", 1, seq)); !errors.Is(err, driver.ErrVersionConflict) {
						t.Fatalf("%s: step %d after the migration: %v, want a conflict", id, seq, err)
					}
				}
				if err := d.CommitSteps(ctx, stepBatch("t"+id, id, "o", 1, next)); err != nil {
					t.Fatalf("%s: step %d after the migration: %v", id, next, err)
				}
			}
			if err := d.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if v, n := storedFormat(t, dir); v != formatVersion || n != 0 {
				t.Fatalf("after the migration: format %d, %d last-seq keys; want %d, none", v, n, formatVersion)
			}
		})
	}
}

// TestFormatNewerRefused: a directory of a format this driver does not
// know, written by a newer one, is refused at open and left as it was.
func TestFormatNewerRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d, err := Open(DefaultConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Commit(ctx, runBatch("t", 0, "r", record.StateActive, "o", 1)); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		value []byte
		want  string
	}{
		{binary.BigEndian.AppendUint64(nil, formatVersion+1), "newer"},
		{[]byte{1, 2}, "not a store format"},
		{binary.BigEndian.AppendUint64(nil, 0), "not a store format"},
	} {
		rawDB(t, dir, func(txn *badger.Txn) error { return txn.Set(formatKey, tc.value) })
		_, err := Open(DefaultConfig(dir))
		if !errors.Is(err, driver.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("format key %x: Open: %v, want ErrInvalidArgument saying %q", tc.value, err, tc.want)
		}
		rawDB(t, dir, func(txn *badger.Txn) error {
			item, err := txn.Get(formatKey)
			if err != nil {
				return err
			}
			b, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if string(b) != string(tc.value) {
				t.Fatalf("format key %x after a refused open, want %x", b, tc.value)
			}
			return nil
		})
	}
	// The directory itself is intact: at its own format it opens.
	rawDB(t, dir, func(txn *badger.Txn) error {
		return txn.Set(formatKey, binary.BigEndian.AppendUint64(nil, formatVersion))
	})
	d, err = Open(DefaultConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	if err := d.CommitSteps(ctx, stepBatch("t", "r", "o", 1, 1)); err != nil {
		t.Fatal(err)
	}
}

// TestCommitStepsAgainstHeads: a commit that holds steps of a run (the
// answer with the run's end) is checked against the run's step head when
// the committer has one, and against its log after a reopen: a seq that is
// not the next is refused either way, the next is committed.
func TestCommitStepsAgainstHeads(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d, err := Open(DefaultConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close(ctx) }()
	for _, id := range []string{"r1", "r2"} {
		if _, err := d.Commit(ctx, runBatch("t"+id, 0, id, record.StateActive, "o", 1)); err != nil {
			t.Fatal(err)
		}
		for seq := int64(1); seq <= 2; seq++ {
			if err := d.CommitSteps(ctx, stepBatch("t"+id, id, "o", 1, seq)); err != nil {
				t.Fatal(err)
			}
		}
	}
	end := func(id string, seq int64) error {
		b := runBatch("t"+id, 1, id, record.StateCompleted, "o", 1)
		b.Steps = stepBatch("t"+id, id, "o", 1, seq).Steps
		_, err := d.Commit(ctx, b)
		return err
	}
	check := func(id string) {
		t.Helper()
		for _, seq := range []int64{2, 4} {
			if err := end(id, seq); !errors.Is(err, driver.ErrVersionConflict) {
				t.Fatalf("%s: the end with step %d: %v, want a conflict", id, seq, err)
			}
		}
		if err := end(id, 3); err != nil {
			t.Fatalf("%s: the end with step 3: %v", id, err)
		}
		steps, err := d.ReadSteps(ctx, id, 0, 10)
		if err != nil || len(steps) != 3 || steps[2].Seq != 3 {
			t.Fatalf("%s's steps: %+v, %v", id, steps, err)
		}
	}
	check("r1") // its head is the committer's
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err = Open(DefaultConfig(dir)); err != nil {
		t.Fatal(err)
	}
	check("r2") // read from its log
}

// TestStepHeadsFromCommits: a run a commit writes active gets its step
// head from the commit, its last seq read from its log at its first step
// batch: a run started with steps already in its log (written before the
// run, or by an earlier attempt) goes on after them, in the commit's group
// or a later one.
func TestStepHeadsFromCommits(t *testing.T) {
	ctx := context.Background()
	d, err := Open(DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	// r1's first two steps come with the thread's first commit, before r1
	// is written; r1 starts in the next.
	first := runBatch("t1", 0, "r0", record.StateCompleted, "o", 1)
	first.Steps = append(stepBatch("t1", "r1", "o", 1, 1).Steps, stepBatch("t1", "r1", "o", 1, 2).Steps...)
	if _, err := d.Commit(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Commit(ctx, runBatch("t1", 1, "r1", record.StateActive, "o", 1)); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []int64{1, 2, 4} {
		if err := d.CommitSteps(ctx, stepBatch("t1", "r1", "o", 1, seq)); !errors.Is(err, driver.ErrVersionConflict) {
			t.Fatalf("r1: step %d: %v, want a conflict", seq, err)
		}
	}
	if err := d.CommitSteps(ctx, stepBatch("t1", "r1", "o", 1, 3)); err != nil {
		t.Fatal(err)
	}
	// Started again by another owner, its step in the same group.
	restart, err := d.prepare(ctx, runBatch("t1", 2, "r1", record.StateActive, "p", 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []*commitReq
	for _, b := range []driver.StepBatch{stepBatch("t1", "r1", "o", 1, 4), stepBatch("t1", "r1", "p", 2, 3), stepBatch("t1", "r1", "p", 2, 4)} {
		r, err := d.prepareSteps(ctx, &b, nil)
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	if err := d.submit(ctx, append([]*commitReq{restart}, reqs...)); err != nil {
		t.Fatal(err)
	}
	want := []error{nil, driver.ErrVersionConflict, driver.ErrVersionConflict, nil}
	for i, r := range append([]*commitReq{restart}, reqs...) {
		if err := <-r.done; !errors.Is(err, want[i]) {
			t.Fatalf("member %d of the restart's group: %v, want %v", i, err, want[i])
		}
	}
	steps, err := d.ReadSteps(ctx, "r1", 0, 10)
	if err != nil || len(steps) != 4 || steps[3].ID != "r1-a2-s4-p" {
		t.Fatalf("r1's steps: %+v, %v", steps, err)
	}
}

// TestDropStepLastKeysInBatches: the migration deletes every last-seq key
// over several batches, each scan starting past the last, and no other key.
func TestDropStepLastKeysInBatches(t *testing.T) {
	defer func(n int) { migrateBatch = n }(migrateBatch)
	migrateBatch = 3
	dir := t.TempDir()
	rawDB(t, dir, func(txn *badger.Txn) error {
		for i := range 10 {
			if err := txn.Set(simpleKey(tStepLast, fmt.Sprintf("r%02d", i)), binary.BigEndian.AppendUint64(nil, 1)); err != nil {
				return err
			}
		}
		// Neighbours on either side of the prefix stay.
		if err := txn.Set([]byte{tStepLast - 1, 'x'}, []byte("keep")); err != nil {
			return err
		}
		return txn.Set([]byte{tStepLast + 1, 'x'}, []byte("keep"))
	})
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	n, err := dropStepLastKeys(db)
	if err != nil {
		t.Fatal(err)
	}
	if n != 10 {
		t.Fatalf("deleted %d last-seq keys, want 10", n)
	}
	left := 0
	if err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if k := it.Item().Key(); k[0] == tStepLast {
				t.Errorf("last-seq key %q left", k)
			}
			left++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if left != 2 {
		t.Fatalf("%d keys left, want the 2 neighbours", left)
	}
}

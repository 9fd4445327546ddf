package badgerdriver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestOpenAfterKillCreatingMemtable: a process killed between creating a
// memtable log and sizing it leaves an empty *.mem file; the store still
// opens, with everything committed before.
func TestOpenAfterKillCreatingMemtable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := open(t, dir)
	if _, err := d.Commit(ctx, batch("T", 0)); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mems, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
	slices.Sort(mems)
	next := 1
	if len(mems) > 0 {
		fmt.Sscanf(filepath.Base(mems[len(mems)-1]), "%05d.mem", &next)
		next++
	}
	empty := filepath.Join(dir, fmt.Sprintf("%05d.mem", next))
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	d = open(t, dir)
	defer d.Close(ctx)
	snap, err := d.LoadThread(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Thread.Version != 1 {
		t.Fatalf("after reopening: thread %+v", snap.Thread)
	}
}

package pgdriver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// TestUpgradeInPlace: a database written by a driver of schema version 2
// (store protocol 1) is upgraded in place when this driver opens it: what
// was stored reads the same, the runs it wrote refuse steps until this
// driver writes them again (their owner and attempt columns start empty),
// and a driver of version 2 still running commits through the replaced
// commit_batch.
func TestUpgradeInPlace(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const schema = "upgrade_v2"
	if err := pgdriver.MigrateTo(ctx, pool, schema, 2); err != nil {
		t.Fatal(err)
	}
	th := storedrivertest.NewBuilder("thread-old")
	r := th.Run("run-old")
	b := th.Batch([]string{r.ID}, []record.Run{r}, []record.Message{th.Msg("run-old-in", r.ID)}, nil)
	if err := pgdriver.CommitV2(ctx, pool, schema, b); err != nil {
		t.Fatal(err)
	}
	th.Committed(b)
	r = storedrivertest.Activate(r, "host-old", 1)
	b = th.Batch(th.Open, []record.Run{r}, nil, nil)
	if err := pgdriver.CommitV2(ctx, pool, schema, b); err != nil {
		t.Fatal(err)
	}
	th.Committed(b)

	d := open(t, url, schema)
	var v int
	if err := pool.QueryRow(ctx, "SELECT max(version) FROM "+schema+".schema_migrations").Scan(&v); err != nil || v != pgdriver.SchemaVersion {
		t.Fatalf("schema version after the upgrade: %d, %v; want %d", v, err, pgdriver.SchemaVersion)
	}
	snap, err := d.LoadThread(ctx, th.ID)
	if err != nil || snap.Thread.Version != 2 || len(snap.Runs) != 1 || snap.Runs[0].Owner != "host-old" {
		t.Fatalf("LoadThread after the upgrade = %+v, %v", snap, err)
	}
	// A run written before the upgrade takes no steps...
	err = d.CommitSteps(ctx, storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 1)))
	if !errors.Is(err, driver.ErrVersionConflict) {
		t.Fatalf("steps of a run written before the upgrade: %v, want ErrVersionConflict", err)
	}
	// ... until it is written again, as a recovery does.
	r = storedrivertest.Activate(r, "host-new", 2)
	b = th.Batch(th.Open, []record.Run{r}, nil, nil)
	if _, err := d.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
	th.Committed(b)
	if err := d.CommitSteps(ctx, storedrivertest.StepBatchOf(r, storedrivertest.Steps(r, 1, 2)...)); err != nil {
		t.Fatalf("steps after the run was written again: %v", err)
	}
	// A driver of schema version 2 still running writes through the new
	// commit_batch, which clears the run's owner for the step check.
	b = th.Batch(th.Open, []record.Run{r}, nil, nil)
	if err := pgdriver.CommitV2(ctx, pool, schema, b); err != nil {
		t.Fatalf("commit_batch after the upgrade: %v", err)
	}
	th.Committed(b)
	err = d.CommitSteps(ctx, storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 3)))
	if !errors.Is(err, driver.ErrVersionConflict) {
		t.Fatalf("steps of a run last written by a version 2 driver: %v, want ErrVersionConflict", err)
	}
	got, err := d.ReadSteps(ctx, r.ID, 0, 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("ReadSteps = %+v, %v; want the 2 committed", got, err)
	}
	if hist, err := d.ReadHistory(ctx, th.ID, 0, 10); err != nil || len(hist) != 1 {
		t.Fatalf("ReadHistory = %+v, %v", hist, err)
	}
}

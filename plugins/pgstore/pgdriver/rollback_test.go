package pgdriver_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// failFirst makes the first n writes to table (of schema) raise SQLSTATE
// state, as a serialization failure or a deadlock would: the counter is a
// sequence, which a rollback does not reset.
func failFirst(t *testing.T, pool *pgxpool.Pool, schema, table, state string, n int) {
	t.Helper()
	name := fmt.Sprintf("fail_%s_%s", table, state)
	for _, q := range []string{
		fmt.Sprintf("DROP TRIGGER IF EXISTS %[2]s ON %[1]s.%[3]s", schema, name, table),
		fmt.Sprintf("DROP SEQUENCE IF EXISTS %s.%s", schema, name),
		fmt.Sprintf("CREATE SEQUENCE %s.%s", schema, name),
		fmt.Sprintf(`CREATE OR REPLACE FUNCTION %[1]s.%[2]s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF nextval('%[1]s.%[2]s') <= %[3]d THEN
		RAISE EXCEPTION USING ERRCODE = '%[4]s', MESSAGE = 'provoked by the test';
	END IF;
	RETURN NEW;
END $$`, schema, name, n, state),
		fmt.Sprintf("CREATE TRIGGER %[2]s BEFORE INSERT OR UPDATE ON %[1]s.%[3]s FOR EACH ROW EXECUTE FUNCTION %[1]s.%[2]s()", schema, name, table),
	} {
		if _, err := pool.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestRolledBackCommitsRetried: a step commit or a commit of a group that
// a serialization failure (40001) or a deadlock (40P01) rolls back is sent
// again and lands; one rolled back on every try is ErrUnavailable (may be
// tried again), never ErrVersionConflict, which tells the host its run
// moved on.
func TestRolledBackCommitsRetried(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const schema = "rolled_back"
	d := open(t, url, schema)
	defer func(b time.Duration) { pgdriver.RetryBudget = b }(pgdriver.RetryBudget)
	pgdriver.RetryBudget = time.Second

	th := storedrivertest.NewBuilder("thread-rb")
	r := th.Run("run-rb")
	b := th.Batch([]string{r.ID}, []record.Run{r}, []record.Message{th.Msg("run-rb-in", r.ID)}, nil)
	if _, err := d.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
	th.Committed(b)
	r = storedrivertest.Activate(r, storedrivertest.StepOwner, storedrivertest.StepAttempt)

	// Commits of a group (CommitMany), each in a subtransaction.
	for _, state := range []string{"40001", "40P01"} {
		failFirst(t, pool, schema, "runs", state, 2)
		b = th.Batch(th.Open, []record.Run{r}, nil, nil)
		_, errs := d.CommitMany(ctx, []driver.Batch{b})
		if errs[0] != nil {
			t.Fatalf("a group commit rolled back twice by SQLSTATE %s: %v; want it sent again and applied", state, errs[0])
		}
		th.Committed(b)
	}
	failFirst(t, pool, schema, "runs", "40P01", 1<<30)
	b = th.Batch(th.Open, []record.Run{r}, nil, nil)
	_, errs := d.CommitMany(ctx, []driver.Batch{b})
	if !errors.Is(errs[0], driver.ErrUnavailable) || errors.Is(errs[0], driver.ErrVersionConflict) {
		t.Fatalf("a group commit rolled back by deadlocks on every try: %v; want ErrUnavailable, not a conflict", errs[0])
	}
	failFirst(t, pool, schema, "runs", "40P01", 0)
	if snap, err := d.LoadThread(ctx, th.ID); err != nil || snap.Thread.Version != th.Version {
		t.Fatalf("thread after a commit never applied: version %d, %v; want %d", snap.Thread.Version, err, th.Version)
	}

	// Step commits (a group of CommitSteps, each in a subtransaction).
	seq := int64(0)
	for _, state := range []string{"40001", "40P01"} {
		failFirst(t, pool, schema, "steps", state, 2)
		seq++
		if err := d.CommitSteps(ctx, storedrivertest.StepBatchOf(r, storedrivertest.Step(r, seq))); err != nil {
			t.Fatalf("steps rolled back twice by SQLSTATE %s: %v; want them sent again and applied", state, err)
		}
	}
	failFirst(t, pool, schema, "steps", "40001", 1<<30)
	err = d.CommitSteps(ctx, storedrivertest.StepBatchOf(r, storedrivertest.Step(r, seq+1)))
	if !errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrVersionConflict) {
		t.Fatalf("steps rolled back by serialization failures on every try: %v; want ErrUnavailable, not a conflict", err)
	}
	got, err := d.ReadSteps(ctx, r.ID, 0, 10)
	if err != nil || len(got) != int(seq) {
		t.Fatalf("ReadSteps = %d steps, %v; want the %d applied", len(got), err, seq)
	}
}

// TestMapErrorTransient: failures that say nothing of what a commit asks
// (it was rolled back, or may pass, or its outcome is unknown) map to
// ErrUnavailable, never to a refusal the host acts on.
func TestMapErrorTransient(t *testing.T) {
	for _, code := range []string{"40001", "40P01", "40003", "55P03", "57014", "53100", "53200", "53300", "08006", "57P01"} {
		err := pgdriver.MapError(&pgconn.PgError{Code: code, Message: "m", Severity: "ERROR"})
		if !errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrVersionConflict) || errors.Is(err, driver.ErrInvalidArgument) {
			t.Errorf("SQLSTATE %s maps to %v, want ErrUnavailable only", code, err)
		}
	}
}

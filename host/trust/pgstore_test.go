package trust_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agenthost/agenthost/conformance"
	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/host/trust"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
)

// TestBuiltinPgstore: the gate certifies the built-in pgstore on scratch
// schemas of the database it is launched with, never the user's schema,
// and drops them after; the driver then runs on the user's data.
func TestBuiltinPgstore(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	user := map[string]string{"url": url, "schema": "userdata"}
	// The user's store holds a thread already.
	cfg, err := pgdriver.ParseConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	pd, err := pgdriver.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	commit(t, pd)
	pd.Close(ctx)

	g, runs := gate(t, trust.Options{})
	d, cert, err := g.Launch(ctx, trust.Source{Builtin: "pgstore"}, driverhost.Config{DriverConfig: user, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	if *runs != 1 {
		t.Fatalf("the suite ran %d times, want 1", *runs)
	}
	if !slices.Contains(cert.Tiers, conformance.TierLeases) || !slices.Contains(cert.Tiers, conformance.TierDurable) {
		t.Errorf("certified tiers %v, want durable and leases among them", cert.Tiers)
	}
	snap, err := d.LoadThread(ctx, "user-thread")
	if err != nil || snap.Thread.Version != 1 {
		t.Fatalf("the user's thread: %+v, %v", snap.Thread, err)
	}
	// The suite wrote nothing in the user's schema, and left no schema.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var threads int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM userdata.threads").Scan(&threads); err != nil || threads != 1 {
		t.Fatalf("the user's schema holds %d threads, %v; want only the user's", threads, err)
	}
	var left []string
	rows, err := conn.Query(ctx, "SELECT nspname FROM pg_namespace WHERE nspname LIKE $1", pgdriver.ScratchPrefix+"%")
	if err == nil {
		left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || len(left) > 0 {
		t.Fatalf("scratch schemas left: %v, %v", left, err)
	}
}

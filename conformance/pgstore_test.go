package conformance_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agenthost/agenthost/conformance"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
)

// pgstoreTarget tests the pgstore binary on the database at url, each
// instance in the scratch schema of its data directory, as the gate does
// (conformance.ScratchOf its factory), dropped when the suite is done with
// it.
func pgstoreTarget(url string) conformance.Target {
	sc := conformance.ScratchOf(pgdriver.Factory{}, map[string]string{"url": url, "max_conns": "8"})
	return conformance.WithCleanup(conformance.Binary(bins["pgstore"], sc.Config), sc.Clean)
}

// scratchSchemas lists the scratch schemas left in the database at url.
func scratchSchemas(t *testing.T, url string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT nspname FROM pg_namespace WHERE nspname LIKE $1 ORDER BY 1", pgdriver.ScratchPrefix+"%")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPgstore: the pgstore binary on PostgreSQL passes the full profile
// with every tier: basic, durable, leases (its Info claims both) and
// shared (claimed here: several driver processes on one database), and
// the scratch schemas are dropped after.
func TestPgstore(t *testing.T) {
	needBins(t)
	url := pgtest.URL(t)
	profile := conformance.Full
	if testing.Short() {
		profile = conformance.Quick
	}
	rep := conformance.Run(t, pgstoreTarget(url), conformance.Options{Profile: profile, Tiers: []conformance.Tier{conformance.TierShared}})
	want := []conformance.Tier{conformance.TierBasic, conformance.TierDurable, conformance.TierLeases, conformance.TierShared}
	if !slices.Equal(rep.Passed, want) {
		var buf strings.Builder
		_ = rep.WriteText(&buf)
		t.Errorf("pgstore passed tiers %v, want %v:\n%s", rep.Passed, want, buf.String())
	}
	// Its data lives in the database: the file in its data directory (its
	// configuration) is no ground for a power cut claim.
	if rep.Durability != conformance.DurableProcessKill {
		t.Errorf("pgstore's durable tier was reported checked against %q, want %q", rep.Durability, conformance.DurableProcessKill)
	}
	if left := scratchSchemas(t, url); len(left) > 0 {
		t.Errorf("the suite left scratch schemas %v", left)
	}
}

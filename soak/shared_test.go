package soak

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestSeveralHosts: three `agenthost serve` processes on one PostgreSQL
// database under the load generator, one killed with SIGKILL; its threads
// must move to the others after its lease expires; started again with a new
// lease, it must get threads back and execute runs (ADR 0143); and at the
// end nothing is lost, no thread ever had two active runs (read from the
// durable records during the load), and every key resolves. Seed:
// AGENTHOST_SOAK_SEED.
func TestSeveralHosts(t *testing.T) {
	url := pgtest.URL(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("AGENTHOST_SOAK_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("AGENTHOST_SOAK_SEED: %v", err)
		}
	}
	ctx := context.Background()
	cfg, err := pgdriver.ParseConfig(map[string]string{"url": url})
	if err != nil {
		t.Fatal(err)
	}
	st, err := pgdriver.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	sum, err := RunShared(ctx, SharedOptions{
		Seed: seed, Hosts: 3, StoreURL: url, Store: st,
		Accepted: 450, Threads: 24, Workers: 12, LeaseTTL: 2 * time.Second, Restart: true,
		MaxDuration: 4 * time.Minute, ResultWait: 2 * time.Minute, Log: testWriter{t},
	})
	if err != nil {
		t.Fatalf("several hosts (seed %d): %v", seed, err)
	}
	t.Log(sum.Line())
	for i, pr := range sum.Problems {
		if i == 50 {
			t.Errorf("… and %d more", len(sum.Problems)-50)
			break
		}
		t.Error(pr)
	}
}

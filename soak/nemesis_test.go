package soak

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/pgtest"
)

// TestNemeses runs the short variant of each nemesis (docs/soak.md): a
// host of three paused past its lease, PostgreSQL crashed and stopped, the
// store's disk full. They are skipped under -short, without PostgreSQL
// binaries (the PostgreSQL ones: they start a cluster of their own to stop
// and restart) and, for the full disk, when not root or not allowed to
// mount (it mounts a tmpfs), unless AGENTHOST_REQUIRE_ALL=1. AGENTHOST_SOAK_SEED sets the seed.
func TestNemeses(t *testing.T) {
	var bin string // built once, by the first nemesis that runs
	binDir := t.TempDir()
	for _, name := range []string{"pause-short", "postgres-short", "diskfull-short"} {
		t.Run(name, func(t *testing.T) {
			requireAll := os.Getenv("AGENTHOST_REQUIRE_ALL") == "1"
			if testing.Short() && !requireAll {
				t.Skip("a nemesis takes about a minute; skipped under -short")
			}
			p := NemesisProfiles[name]
			if p.Kind != NemesisDiskFull {
				if _, err := pgtest.FindBin(); err != nil {
					if requireAll {
						t.Fatal(err)
					}
					t.Skip(err)
				}
			}
			seed := uint64(time.Now().UnixNano())
			if s := os.Getenv("AGENTHOST_SOAK_SEED"); s != "" {
				var err error
				if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
					t.Fatalf("AGENTHOST_SOAK_SEED: %v", err)
				}
			}
			if bin == "" {
				var err error
				if bin, err = Build(context.Background(), binDir); err != nil {
					t.Fatal(err)
				}
			}
			sum, err := RunNemesis(context.Background(), NemesisOptions{Profile: p, Seed: seed, Bin: bin, Log: testWriter{t}})
			if errors.Is(err, ErrNeedsRoot) && !requireAll {
				t.Skip(err)
			}
			if err != nil {
				t.Fatalf("nemesis %s (seed %d): %v", name, seed, err)
			}
			t.Log(sum.Line())
			for i, pr := range sum.Problems {
				if i == 50 {
					t.Errorf("… and %d more", len(sum.Problems)-50)
					break
				}
				t.Error(pr)
			}
			if len(sum.Problems) > 0 {
				t.Fatalf("replay with AGENTHOST_SOAK_SEED=%d go test ./soak -run 'TestNemeses/%s' -v", seed, name)
			}
		})
	}
}

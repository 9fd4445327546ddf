package soak

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestSoak runs the short soak profile (about a minute and a half), or the
// profile named by AGENTHOST_SOAK_PROFILE, with the seed in
// AGENTHOST_SOAK_SEED (default: the time). It is skipped under -short
// unless AGENTHOST_REQUIRE_ALL=1.
func TestSoak(t *testing.T) {
	if testing.Short() && os.Getenv("AGENTHOST_REQUIRE_ALL") != "1" {
		t.Skip("the soak takes a minute and a half; skipped under -short")
	}
	name := os.Getenv("AGENTHOST_SOAK_PROFILE")
	if name == "" {
		name = "short"
	}
	p, ok := Profiles[name]
	if !ok {
		t.Fatalf("no soak profile %q", name)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("AGENTHOST_SOAK_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("AGENTHOST_SOAK_SEED: %v", err)
		}
	}
	sum, err := Run(context.Background(), Options{Profile: p, Seed: seed, Log: testWriter{t}})
	if err != nil {
		t.Fatalf("soak (seed %d): %v", seed, err)
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
		t.Fatalf("soak failed; replay with AGENTHOST_SOAK_SEED=%d AGENTHOST_SOAK_PROFILE=%s go test ./soak -run TestSoak -v", seed, name)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b[:len(b)-1]))
	return len(b), nil
}

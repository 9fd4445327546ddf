// Package peertest runs the tests of bench/dbospeer, a module of its own that
// `go test ./...` does not reach, against the test server of internal/pgtest,
// so that `make test` checks the peer benchmark's code too.
package peertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/agenthost/agenthost/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestDBOSPeer runs bench/dbospeer's tests (not its benchmark) with a
// database of the test server; without PostgreSQL it skips (fails under
// AGENTHOST_REQUIRE_ALL=1).
func TestDBOSPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module of its own")
	}
	url := pgtest.URL(t)
	_, here, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(here), "..", "..", "bench", "dbospeer")
	cmd := exec.Command("go", "test", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), pgtest.EnvURL+"="+url, pgtest.EnvRequireAll+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench/dbospeer tests: %v\n%s", err, out)
	}
	t.Logf("bench/dbospeer: %s", out)
}

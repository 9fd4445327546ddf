package conformance_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// bins holds the driver binaries TestMain builds: name → path; empty when
// there is no go command (see needBins).
var bins = map[string]string{}

var noBins string

func TestMain(m *testing.M) {
	// Re-executed as a driver subprocess: a built-in driver, or a broken one.
	if name := os.Getenv(driverhost.BuiltinEnv); name != "" {
		if err := driverhost.ServeBuiltin(name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if name := os.Getenv(brokenEnv); name != "" {
		f := brokenFactory(name)
		if f == nil {
			fmt.Fprintln(os.Stderr, "no broken driver", name)
			os.Exit(1)
		}
		storedriver.Serve(f)
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "conformance-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	gobin, err := exec.LookPath("go")
	if err != nil {
		noBins = "no go command to build the driver binaries with: " + err.Error()
		if os.Getenv("AGENTHOST_REQUIRE_ALL") == "1" {
			fmt.Fprintln(os.Stderr, "FAIL:", noBins)
			return 1
		}
		return m.Run()
	}
	for _, name := range []string{"memstore", "badgerstore"} {
		out := filepath.Join(dir, "agenthost-"+name)
		cmd := exec.Command(gobin, "build", "-o", out, "github.com/agenthost/agenthost/plugins/"+name)
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building the %s driver: %v\n%s", name, err, b)
			return 1
		}
		bins[name] = out
	}
	return m.Run()
}

func needBins(t testing.TB) {
	t.Helper()
	if len(bins) == 0 {
		t.Skip(noBins)
	}
}

package conformance_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/agenthost/agenthost/internal/builtins"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/internal/testbin"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// bins holds the driver binaries TestMain builds: name → path; empty when
// there is no go command (see needBins).
var bins = map[string]string{}

var noBins string

func TestMain(m *testing.M) {
	// Re-executed as a driver subprocess: a built-in driver, or a broken one.
	if served, err := builtins.ServeIfAsked(); served {
		if err != nil {
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
	return testbin.Run([]string{"memstore", "badgerstore", "pgstore"}, func(b map[string]string, why string) int {
		bins, noBins = b, why
		return pgtest.Run(m.Run)
	})
}

func needBins(t testing.TB) {
	t.Helper()
	if len(bins) == 0 {
		t.Skip(noBins)
	}
}

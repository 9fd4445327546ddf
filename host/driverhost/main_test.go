package driverhost_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/internal/builtins"
	"github.com/agenthost/agenthost/internal/testbin"
)

// bins holds the driver binaries TestMain builds: name → path. It is empty
// when there is no go command to build them with (see needBins).
var bins = map[string]string{}

// noBins says why bins is empty.
var noBins string

func TestMain(m *testing.M) {
	// Re-executed as a driver subprocess (see TestBuiltin).
	if served, err := builtins.ServeIfAsked(); served {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// A parent that launches a driver and waits to be killed (see
	// TestParentDeath).
	if os.Getenv("AGENTHOST_TEST_PARENT") != "" {
		os.Exit(parentMain())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	return testbin.Run([]string{"memstore", "badgerstore"}, func(b map[string]string, why string) int {
		bins, noBins = b, why
		code := m.Run()
		if code != 0 {
			return code
		}
		if kids := children(); len(kids) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: driver processes left behind: %v\n", kids)
			return 1
		}
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: goroutines left behind: %v\n", err)
			return 1
		}
		return 0
	})
}

// children lists the live or zombie child processes of this process, as
// "pid:state".
func children() []string {
	var out []string
	self := strconv.Itoa(os.Getpid())
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) >= 2 && f[1] == self {
			out = append(out, e.Name()+":"+f[0])
		}
	}
	return out
}

// needBins skips t when the driver binaries could not be built for want of
// a go command (AGENTHOST_REQUIRE_ALL=1 makes that a failure in TestMain).
func needBins(t testing.TB) {
	t.Helper()
	if len(bins) == 0 {
		t.Skip(noBins)
	}
}

// noChildren fails t if this process has child processes, zombies included.
func noChildren(t *testing.T) {
	t.Helper()
	if kids := children(); len(kids) > 0 {
		t.Fatalf("driver processes left behind: %v", kids)
	}
}

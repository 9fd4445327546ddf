// Package testbin builds the project's driver binaries for tests that
// launch them as real subprocesses.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Drivers are the built-in driver programs, by name.
var Drivers = map[string]string{
	"memstore":    "github.com/agenthost/agenthost/plugins/memstore",
	"badgerstore": "github.com/agenthost/agenthost/plugins/badgerstore",
	"pgstore":     "github.com/agenthost/agenthost/plugins/pgstore",
}

// Run builds the named driver programs into a temporary directory and calls
// tests with their paths (name → path), removing them afterwards. Without a
// go command to build them with, tests gets no paths and the reason, so
// that the tests that need them can skip; under AGENTHOST_REQUIRE_ALL=1 that
// is a failure instead. It returns tests' exit code, or 1.
func Run(names []string, tests func(bins map[string]string, noBins string) int) int {
	dir, err := os.MkdirTemp("", "agenthost-testbin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	gobin, err := exec.LookPath("go")
	if err != nil {
		why := "no go command to build the driver binaries with: " + err.Error()
		if os.Getenv("AGENTHOST_REQUIRE_ALL") == "1" {
			fmt.Fprintln(os.Stderr, "FAIL:", why)
			return 1
		}
		return tests(map[string]string{}, why)
	}
	bins := map[string]string{}
	for _, name := range names {
		pkg, ok := Drivers[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "testbin: no driver %q\n", name)
			return 1
		}
		out := filepath.Join(dir, "agenthost-"+name)
		if b, err := exec.Command(gobin, "build", "-o", out, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building the %s driver: %v\n%s", name, err, b)
			return 1
		}
		bins[name] = out
	}
	return tests(bins, "")
}

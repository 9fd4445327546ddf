package host_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/internal/builtins"
	"github.com/agenthost/agenthost/internal/mcptest"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// TestMain lets the test binary play two other roles: a store driver
// subprocess (the host re-executes itself for its built-in drivers), and a
// host process that the S3 test kills.
func TestMain(m *testing.M) {
	mcptest.RunStdioIfAsked() // the stdio MCP server of the agent tests is this binary
	if served, err := builtins.ServeIfAsked(); served {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if dir := os.Getenv(childHostEnv); dir != "" {
		os.Exit(childHost(dir))
	}
	os.Exit(pgtest.Run(m.Run))
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// launchBuiltin starts a built-in driver as a subprocess of this binary.
// launchBuiltin launches a built-in driver as the host's serve does, and
// returns the value the runtime uses: with the step interfaces when the
// driver speaks store protocol 2.
func launchBuiltin(tb testing.TB, name string, cfg map[string]string) driver.Driver {
	tb.Helper()
	return launchBuiltinEnv(tb, name, cfg)
}

// launchBuiltinEnv is launchBuiltin with env ("NAME=value") added to the
// driver process's environment.
func launchBuiltinEnv(tb testing.TB, name string, cfg map[string]string, env ...string) driver.Driver {
	tb.Helper()
	lc, err := builtins.Launch(name, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	lc.Env = append(lc.Env, env...)
	lc.Logger = quietLog
	d, err := driverhost.Launch(context.Background(), lc)
	if err != nil {
		tb.Fatalf("launching %s: %v", name, err)
	}
	tb.Cleanup(func() { d.Close(context.Background()) })
	return d.Store()
}

// driverFactories are the drivers every scenario runs over: the in-process
// reference driver, and memstore, badgerstore and pgstore as real
// subprocesses.
var driverFactories = map[string]func(t *testing.T) driver.Driver{
	"memdriver":       func(t *testing.T) driver.Driver { return memdriver.New() },
	"memstore-plugin": func(t *testing.T) driver.Driver { return launchBuiltin(t, "memstore", nil) },
	"badgerstore-plugin": func(t *testing.T) driver.Driver {
		return launchBuiltin(t, "badgerstore", map[string]string{"dir": t.TempDir()})
	},
	// pgstore has leases: over it the runtime runs as one of several hosts.
	"pgstore-plugin": func(t *testing.T) driver.Driver {
		return launchBuiltin(t, "pgstore", map[string]string{"url": pgtest.URL(t)})
	},
}

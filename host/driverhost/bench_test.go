package driverhost_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/internal/proccpu"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// BenchmarkCommit: commits through the plugin subprocess, badgerstore with
// SyncWrites on (its default) and group commit. Beside the rate it reports
// the CPU time each commit cost in the host process (the benchmark's own
// making of batches included) and in the driver process: on a shared
// machine the rate moves with the load, the CPU per commit much less, and
// their sum bounds the rate the machine's cores allow.
func BenchmarkCommit(b *testing.B) {
	for _, name := range drivers {
		for _, threads := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/threads=%d", name, threads), func(b *testing.B) {
				cfg := benchConfig(b, name)
				if p := os.Getenv("BENCH_DRIVER_PROFILE"); p != "" {
					cfg.Env = append(cfg.Env, driverrpc.CPUProfileEnv+"="+p)
				}
				d := launch(b, cfg)
				host0, drv0 := cpuTime(os.Getpid()), cpuTime(d.Pid())
				storedrivertest.BenchCommits(b, d, threads)
				host1, drv1 := cpuTime(os.Getpid()), cpuTime(d.Pid())
				if host0 >= 0 && drv0 >= 0 && host1 >= 0 && drv1 >= 0 {
					b.ReportMetric(float64((host1-host0).Microseconds())/float64(b.N), "host-cpu-µs/commit")
					b.ReportMetric(float64((drv1-drv0).Microseconds())/float64(b.N), "driver-cpu-µs/commit")
				}
				if err := d.Close(context.Background()); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkCommitSteps: step commits through the plugin subprocess, each
// of many active runs appending its steps one at a time; badgerstore with
// SyncWrites on, its step commits in the same groups as its commits.
func BenchmarkCommitSteps(b *testing.B) {
	for _, runs := range []int{1, 64} {
		b.Run(fmt.Sprintf("badgerstore/runs=%d", runs), func(b *testing.B) {
			d := launch(b, config(b, "badgerstore", b.TempDir()))
			storedrivertest.BenchStepCommits(b, d.Store(), runs)
			if err := d.Close(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkRoundTrip: one read through the plugin, from one goroutine.
func BenchmarkRoundTrip(b *testing.B) {
	for _, name := range drivers {
		b.Run(name, func(b *testing.B) {
			d := launch(b, benchConfig(b, name))
			storedrivertest.BenchRoundTrip(b, d)
		})
	}
	// The same transport with next to no work in the driver.
	b.Run("memstore-info", func(b *testing.B) {
		d := launch(b, config(b, "memstore", b.TempDir()))
		storedrivertest.BenchInfoRoundTrip(b, d)
	})
	// memstore on every core instead of the one it asks for (ADR 0121).
	b.Run("memstore-allprocs", func(b *testing.B) {
		cfg := config(b, "memstore", b.TempDir())
		cfg.Env = append(cfg.Env, fmt.Sprintf("GOMAXPROCS=%d", runtime.NumCPU()))
		d := launch(b, cfg)
		storedrivertest.BenchRoundTrip(b, d)
	})
}

// memstoreProcsEnv, set to a number n, launches memstore in BenchmarkCommit
// and BenchmarkRoundTrip/memstore with GOMAXPROCS=n instead of the one
// thread it asks for (ADR 0121), so that two runs of the same benchmarks,
// with and without it, compare the two side by side.
const memstoreProcsEnv = "BENCH_MEMSTORE_GOMAXPROCS"

// benchConfig is config for a benchmark: on a temporary directory, and
// memstore with the GOMAXPROCS memstoreProcsEnv asks for.
func benchConfig(b *testing.B, name string) driverhost.Config {
	cfg := config(b, name, b.TempDir())
	if v := os.Getenv(memstoreProcsEnv); v != "" && name == "memstore" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want a number of threads, 1 or more", memstoreProcsEnv, v)
		}
		cfg.Env = append(cfg.Env, fmt.Sprintf("GOMAXPROCS=%d", n))
	}
	return cfg
}

// cpuTime returns the user and system CPU time process pid has used, or -1
// where it cannot be read.
func cpuTime(pid int) time.Duration {
	d, err := proccpu.Of(pid)
	if err != nil {
		return -1
	}
	return d
}

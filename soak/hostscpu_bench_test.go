package soak_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/internal/proccpu"
	"github.com/agenthost/agenthost/soak"
)

var (
	hostsCPUClients = flag.String("hostscpu.clients", "40,150", "BenchmarkHostsCPU: the client counts measured, comma-separated")
	hostsCPUPairs   = flag.Int("hostscpu.pairs", 3, "BenchmarkHostsCPU: rounds of each deployment per client count (one pair each)")
	hostsCPUDelay   = flag.Duration("hostscpu.delay", 1300*time.Millisecond, "BenchmarkHostsCPU: the scripted model's delay per run")
	hostsCPUProfile = flag.String("hostscpu.profile", "", "BenchmarkHostsCPU: write a CPU profile of one host of the three to this file (AGENTHOST_CPU_PROFILE), from its start to the end")
)

// BenchmarkHostsCPU: CPU seconds per run of three `agenthost serve`
// processes sharing one pgstore database against one serve alone on a
// database of its own, measured from outside: the user and system CPU time
// of the serve processes and their driver subprocesses (from /proc, the
// database's own excluded) over a round of the closed load
// (agenthost-loadgen closed: each client submits with an idempotency key to
// a host, waits for the answer at the next host in turn, then submits the
// next input), divided by the runs the round answered. Runs take
// -hostscpu.delay in the scripted model. The two deployments take turns
// (one, three, three, one, ...), -hostscpu.pairs rounds each per client
// count, b.N runs a round; the ratio is the median of the pairs' ratios.
// Both deployments stay up the whole time (the one not measured idles).
//
// It takes minutes: `make bench-hosts` runs it (HOSTS_RUNS sets b.N).
func BenchmarkHostsCPU(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	bin, err := soak.Build(ctx, dir)
	if err != nil {
		b.Fatal(err)
	}
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, fmt.Appendf(nil, `{"steps":[{"delay":%q}]}`, hostsCPUDelay.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	type deployment struct {
		srvs []*soak.Server
		c    *soak.Client
	}
	start := func(b *testing.B, name string, hosts int) deployment {
		url := pgtest.URL(b)
		var d deployment
		var bases []string
		for i := range hosts {
			addr, err := soak.FreeAddr()
			if err != nil {
				b.Fatal(err)
			}
			hn := fmt.Sprintf("%s-%d", name, i)
			env := []string{"AGENTHOST_SHUTDOWN_TIMEOUT=1s"}
			profiled := hosts > 1 && i == 0 && *hostsCPUProfile != ""
			if profiled {
				p, err := filepath.Abs(*hostsCPUProfile)
				if err != nil {
					b.Fatal(err)
				}
				env = append(env, "AGENTHOST_CPU_PROFILE="+p)
			}
			srv := &soak.Server{Bin: bin, Data: filepath.Join(dir, hn), Addr: addr, Script: script, LogPath: filepath.Join(dir, hn+".log"),
				Env:  env,
				Args: []string{"--store", "pgstore", "--store-url", url, "--host-name", hn}}
			b.Cleanup(func() { srv.Cleanup() })
			if profiled {
				b.Cleanup(func() { stopGently(b, srv) }) // first: it writes the profile
			}
			if err := srv.Start(ctx, soak.NewClient("http://"+addr)); err != nil {
				b.Fatal(err)
			}
			d.srvs = append(d.srvs, srv)
			bases = append(bases, "http://"+addr)
		}
		d.c = soak.NewClient(bases[0])
		d.c.More = bases[1:]
		return d
	}
	// cpu is the CPU time the deployment's serve processes and their
	// drivers used so far.
	cpu := func(b *testing.B, d deployment) (hosts, drivers time.Duration) {
		for _, s := range d.srvs {
			dp, err := s.DriverPid()
			if err != nil {
				b.Fatal(err)
			}
			h, err := proccpu.Of(s.Pid())
			if err != nil {
				b.Fatal(err)
			}
			dr, err := proccpu.Of(dp)
			if err != nil {
				b.Fatal(err)
			}
			hosts, drivers = hosts+h, drivers+dr
		}
		return hosts, drivers
	}
	one, three := start(b, "one", 1), start(b, "three", 3)
	// What each deployment costs with no load at all (lease renewals, the
	// poll), for the log: 10 s of each, in the same seconds.
	ih1, id1 := cpu(b, one)
	ih3, id3 := cpu(b, three)
	time.Sleep(10 * time.Second)
	jh1, jd1 := cpu(b, one)
	jh3, jd3 := cpu(b, three)
	b.Logf("idle, per second: one host %v (driver %v), three hosts %v (drivers %v)", (jh1-ih1)/10, (jd1-id1)/10, (jh3-ih3)/10, (jd3-id3)/10)
	for _, cs := range strings.Split(*hostsCPUClients, ",") {
		clients, err := strconv.Atoi(strings.TrimSpace(cs))
		if err != nil || clients <= 0 {
			b.Fatalf("-hostscpu.clients: %q is not a positive number", cs)
		}
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			if b.N == 1 {
				// The testing package's first call, before the one with
				// the -benchtime given (Nx): a round of one run measures
				// nothing, and rounds of minutes would be spent on it.
				return
			}
			k := 0
			round := func(d deployment, n int) (perRun time.Duration, st soak.LoopStats) {
				k++
				h0, d0 := cpu(b, d)
				st, err := soak.ClosedLoop{Clients: clients, Runs: n, PerThread: 50, Prefix: fmt.Sprintf("c%d-n%d-%d", clients, b.N, k)}.Run(ctx, d.c)
				if err != nil {
					b.Fatal(err)
				}
				h1, d1 := cpu(b, d)
				runs := time.Duration(st.Runs)
				b.Logf("%d host(s): %d runs, CPU per run %v in the hosts, %v in their drivers; %s", len(d.srvs), st.Runs, (h1-h0)/runs, (d1-d0)/runs, st)
				return (h1 - h0 + d1 - d0) / runs, st
			}
			// A round of each first, not counted: connections, caches.
			round(one, clients)
			round(three, clients)
			var ones, threes, ratios []float64
			var oneLat, threeLat []time.Duration
			for p := range *hostsCPUPairs {
				var c1, c3 time.Duration
				var s1, s3 soak.LoopStats
				if p%2 == 0 {
					c1, s1 = round(one, b.N)
					c3, s3 = round(three, b.N)
				} else {
					c3, s3 = round(three, b.N)
					c1, s1 = round(one, b.N)
				}
				ms1, ms3 := float64(c1.Microseconds())/1000, float64(c3.Microseconds())/1000
				b.Logf("pair %d: one host %.2f ms/run, three hosts %.2f ms/run", p, ms1, ms3)
				ones, threes, ratios = append(ones, ms1), append(threes, ms3), append(ratios, ms3/ms1)
				oneLat, threeLat = append(oneLat, s1.Latencies...), append(threeLat, s3.Latencies...)
			}
			slices.Sort(oneLat)
			slices.Sort(threeLat)
			b.ReportMetric(median(ones), "cpu-ms/run-1host")
			b.ReportMetric(median(threes), "cpu-ms/run-3hosts")
			b.ReportMetric(median(ratios), "ratio:3hosts/1host")
			b.ReportMetric(float64(pct(oneLat, 50).Microseconds())/1000, "p50-ms-1host")
			b.ReportMetric(float64(pct(threeLat, 50).Microseconds())/1000, "p50-ms-3hosts")
		})
	}
}

// stopGently stops the server with SIGTERM and waits for it to exit (so
// that it writes its CPU profile).
func stopGently(b *testing.B, srv *soak.Server) {
	if pid := srv.Pid(); pid != 0 {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	for deadline := time.Now().Add(time.Minute); srv.Running() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if srv.Running() {
		b.Error("the profiled host did not stop within a minute of SIGTERM")
	}
}

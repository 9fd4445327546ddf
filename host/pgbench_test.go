package host_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/internal/pgtest"
)

// BenchmarkPgRunsEndToEnd: runs per second with a zero-delay scripted model
// over pgstore (each host with its own driver subprocess, one database), with
// 1 and 3 hosts. 64 clients, each on threads of its own, submit one input at
// a time and wait for the answer; client c submits to host c mod hosts, so
// each host owns the threads of its clients. bench/dbospeer measures DBOS
// Transact doing the equivalent work on the same server (make bench gives
// both the server in AGENTHOST_PG_URL).
//
// Beside runs/s it reports the CPU the timed runs cost, per run, from /proc:
// the host process (host-cpu-µs/run), the driver processes
// (driver-cpu-µs/run) and, when the server runs on this machine and its
// processes can be read, every process of the PostgreSQL server
// (pg-cpu-µs/run; the server serves nothing else while it runs).
// BENCH_DRIVER_PROFILE=file writes a CPU profile of each driver process, to
// file.hostN.
func BenchmarkPgRunsEndToEnd(b *testing.B) {
	for _, hosts := range []int{1, 3} {
		b.Run(fmt.Sprintf("hosts=%d/clients=64", hosts), func(b *testing.B) {
			url := pgtest.URL(b)
			rts := make([]*host.Runtime, hosts)
			drvs := make([]*driverhost.Driver, hosts)
			for i := range rts {
				var env []string
				if p := os.Getenv("BENCH_DRIVER_PROFILE"); p != "" {
					env = append(env, fmt.Sprintf("%s=%s.host%d", driverrpc.CPUProfileEnv, p, i))
				}
				drvs[i] = driverhost.Of(launchBuiltinEnv(b, "pgstore", map[string]string{"url": url}, env...))
				rts[i] = benchRuntime(b, drvs[i].Store(), nil, model.Script{}, 64)
			}
			pm := postmasterPid(b, url)
			const clients = 64
			ctx := context.Background()
			cpu := func() (h, d, pg time.Duration) {
				h = procCPU(os.Getpid())
				for _, dr := range drvs {
					d += procCPU(dr.Pid())
				}
				return h, d, serverCPU(pm)
			}
			b.ResetTimer()
			h0, d0, pg0 := cpu()
			var wg sync.WaitGroup
			for c := range clients {
				n := b.N / clients
				if c < b.N%clients {
					n++
				}
				rt := rts[c%hosts]
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range n {
						tk, err := rt.Submit(ctx, fmt.Sprintf("T%d-%d", c, i/50), fmt.Sprintf("in %d", i), host.SubmitOptions{IdempotencyKey: fmt.Sprintf("k%d-%d", c, i)})
						if err != nil {
							b.Error(err)
							return
						}
						if _, err := tk.Wait(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			h1, d1, pg1 := cpu()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
			perRun := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			if h0 >= 0 && h1 >= 0 && d0 >= 0 && d1 >= 0 {
				b.ReportMetric(perRun(h1-h0), "host-cpu-µs/run")
				b.ReportMetric(perRun(d1-d0), "driver-cpu-µs/run")
			}
			if pg0 >= 0 && pg1 >= 0 {
				b.ReportMetric(perRun(pg1-pg0), "pg-cpu-µs/run")
			}
		})
	}
}

// postmasterPid returns the pid of the PostgreSQL server at url when it runs
// on this machine and /proc shows it, else 0.
func postmasterPid(b *testing.B, url string) int {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		b.Fatal(err)
	}
	st, err := procStat(backend)
	if err != nil || len(st) < 2 || !strings.HasPrefix(st[0], "postgres") {
		return 0 // another machine's, or not ours to read
	}
	ppid, _ := strconv.Atoi(st[1])
	return ppid
}

// procStat returns the fields of /proc/pid/stat that follow the pid: [0]
// the command (without its parentheses), then field k of stat at [k-3]
// for k ≥ 4: [1] the ppid, [11] utime, [12] stime, [13] cutime, [14] cstime.
func procStat(pid int) ([]string, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(raw)
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i {
		return nil, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[j+1:]) // from field 3, the state
	if len(f) < 15 {
		return nil, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f[0] = s[i+1 : j]
	return f, nil
}

// serverCPU returns the CPU time of the PostgreSQL server whose postmaster
// is pm: its own, that of its live children and that of its children that
// ended (the postmaster waited for them). -1 when pm is 0 or unreadable.
func serverCPU(pm int) time.Duration {
	if pm == 0 {
		return -1
	}
	ticks := func(f []string, fields ...int) (n int64) {
		for _, k := range fields {
			if k < len(f) {
				v, _ := strconv.ParseInt(f[k], 10, 64)
				n += v
			}
		}
		return n
	}
	st, err := procStat(pm)
	if err != nil {
		return -1
	}
	total := ticks(st, 11, 12, 13, 14)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		f, err := procStat(pid)
		if err != nil || len(f) < 2 || f[1] != strconv.Itoa(pm) {
			continue
		}
		total += ticks(f, 11, 12)
	}
	return time.Duration(total) * time.Second / 100
}

package host_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/internal/proccpu"
	"github.com/agenthost/agenthost/plugins/badgerstore/badgerdriver"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// benchDrivers are the drivers the end-to-end benchmarks compare.
var benchDrivers = map[string]func(b *testing.B) driver.Driver{
	"memdriver": func(*testing.B) driver.Driver { return memdriver.New() },
	"badgerstore-plugin": func(b *testing.B) driver.Driver {
		return launchBuiltin(b, "badgerstore", map[string]string{"dir": b.TempDir()})
	},
	"badger-inprocess": func(b *testing.B) driver.Driver {
		d, err := badgerdriver.Open(badgerdriver.DefaultConfig(b.TempDir()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { d.Close(context.Background()) })
		return d
	},
}

func benchRuntime(b *testing.B, d driver.Driver, pol policy.Policy, script model.Script, conc int) *host.Runtime {
	b.Helper()
	m, err := model.NewScripted(script)
	if err != nil {
		b.Fatal(err)
	}
	rt, err := host.New(context.Background(), host.Config{
		Driver: d, Policy: pol, Model: m, Tools: []model.Tool{lookupTool{}}, MaxConcurrentRuns: conc,
		Logger: benchLogger(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

// BenchmarkRunsEndToEnd: runs per second with a zero-delay scripted model,
// b.N runs spread over the given number of concurrent clients, each
// submitting one input at a time to its thread and waiting for the answer.
// A client moves to a fresh thread every 50 inputs; BenchmarkThreadLength
// measures long threads.
func BenchmarkRunsEndToEnd(b *testing.B) {
	for _, dname := range sortedKeys(benchDrivers) {
		for _, threads := range []int{1, 64, 1024} {
			b.Run(fmt.Sprintf("driver=%s/threads=%d", dname, threads), func(b *testing.B) {
				rt := benchRuntime(b, benchDrivers[dname](b), nil, model.Script{}, 64)
				ctx := context.Background()
				b.ResetTimer()
				var wg sync.WaitGroup
				for c := range threads {
					n := b.N / threads
					if c < b.N%threads {
						n++
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range n {
							tk, err := rt.Submit(ctx, fmt.Sprintf("T%d-%d", c, i/50), fmt.Sprintf("in %d", i), host.SubmitOptions{})
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
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
			})
		}
	}
}

// BenchmarkStepOverhead: a 16-step run (15 tool calls, then the answer)
// with no policy configured, with a policy that cannot inject, and with one
// that can (the injection hook then runs at every boundary). The three
// runtimes take turns, run by run, in one loop, so that they share the
// machine's conditions; each run is on a fresh thread. The first two must
// cost the same: nothing is installed when inject is impossible.
func BenchmarkStepOverhead(b *testing.B) {
	steps := make([]model.ScriptStep, 15)
	for i := range steps {
		steps[i] = model.ScriptStep{Tool: &model.ScriptTool{Name: "lookup"}}
	}
	script := model.Script{Steps: append(steps, model.ScriptStep{Answer: "done"})}
	cases := []struct {
		name string
		pol  policy.Policy
		rt   *host.Runtime
		took time.Duration
		each []time.Duration // per round, for the median of the pairs' ratios
	}{
		{name: "none"},
		{name: "cannot-inject", pol: policy.Static{Name: "interrupt", Decision: runstate.Decision{Action: runstate.ActionInterrupt}}},
		{name: "can-inject", pol: hintPolicy{}},
	}
	for i := range cases {
		cases[i].rt = benchRuntime(b, memdriver.New(), cases[i].pol, script, 1)
		cases[i].each = make([]time.Duration, b.N)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		for k := range cases {
			c := &cases[(i+k)%len(cases)] // rotate, so no runtime always goes first
			began := time.Now()
			tk, err := c.rt.Submit(ctx, fmt.Sprintf("T%d", i), "go", host.SubmitOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tk.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			took := time.Since(began)
			c.took += took
			c.each[i] = took
		}
	}
	perStep := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(16*b.N) }
	for _, c := range cases {
		b.ReportMetric(perStep(c.took), "ns/step:"+c.name)
	}
	// The ratios are medians over the rounds of the round's two runs, made
	// back to back: a pause or a busy moment of the machine lands on one run
	// of one round and moves the median little, where it would move a ratio
	// of sums by its whole length.
	pairs := func(c int) float64 {
		r := make([]float64, b.N)
		for i := range r {
			r[i] = float64(cases[c].each[i]) / float64(cases[0].each[i])
		}
		slices.Sort(r)
		return r[len(r)/2]
	}
	b.ReportMetric(pairs(1), "ratio:cannot-inject/none")
	b.ReportMetric(pairs(2), "ratio:can-inject/none")
}

// BenchmarkRecovery: the time a new runtime takes to schedule again every
// run a crashed one left: 100,000 runs, one in ten active under the dead
// owner, the rest queued, over 10,000 threads.
func BenchmarkRecovery(b *testing.B) {
	const runs, threads = 100_000, 10_000
	for _, dname := range sortedKeys(benchDrivers) {
		b.Run("driver="+dname, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				d := benchDrivers[dname](b)
				fillRecoverable(b, d, runs, threads)
				m, _ := model.NewScripted(model.Script{Steps: []model.ScriptStep{{Delay: model.Duration(time.Hour)}}})
				b.StartTimer()
				rt, err := host.New(context.Background(), host.Config{Driver: d, Model: m, MaxConcurrentRuns: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if got := rt.Stats().Recovered; got != threads {
					b.Fatalf("recovered %d active runs, want %d", got, threads)
				}
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				rt.Close(ctx)
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e9, "s/recovery")
		})
	}
}

// fillRecoverable writes runs queued runs over threads threads, and makes the
// head of each thread active under a dead owner.
func fillRecoverable(b *testing.B, d driver.Driver, runs, threads int) {
	b.Helper()
	ctx := context.Background()
	st := store.New(d, store.Options{})
	queue := func(context.Context, store.ThreadView) (runstate.Decision, error) {
		return runstate.Decision{Action: runstate.ActionQueue}, nil
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := w; t < threads; t += 8 {
				th := fmt.Sprintf("T%d", t)
				for i := range runs / threads {
					if _, err := st.Admit(ctx, store.Submission{ThreadID: th, Content: fmt.Sprint(i)}, queue); err != nil {
						b.Error(err)
						return
					}
				}
				if _, err := st.Start(ctx, th, "epoch-dead"); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkMemoryPerQueuedRun: host heap per queued run. Runs are queued on
// distinct threads behind one slow run per worker; the driver's own records
// are measured separately and subtracted (they live in the driver process
// when the driver is a plugin).
func BenchmarkMemoryPerQueuedRun(b *testing.B) {
	const n = 20_000
	for range b.N {
		ctx := context.Background()
		heap := func() uint64 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return ms.HeapAlloc
		}
		// Driver records alone.
		base := heap()
		d0 := memdriver.New()
		st := store.New(d0, store.Options{})
		for i := range n {
			if _, err := st.Admit(ctx, store.Submission{ThreadID: fmt.Sprintf("T%d", i), Content: "queued input"}, nil); err != nil {
				b.Fatal(err)
			}
		}
		driverOnly := heap() - base
		runtime.KeepAlive(d0)

		base = heap()
		d := memdriver.New()
		m, _ := model.NewScripted(model.Script{Steps: []model.ScriptStep{{Delay: model.Duration(time.Hour)}}})
		rt, err := host.New(ctx, host.Config{Driver: d, Model: m, MaxConcurrentRuns: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			if _, err := rt.Submit(ctx, fmt.Sprintf("T%d", i), "queued input", host.SubmitOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		total := heap() - base
		b.ReportMetric(float64(int64(total)-int64(driverOnly))/n, "hostB/queued-run")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		rt.Close(cctx)
		runtime.KeepAlive(d)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// benchLogger discards the runtime's log, unless AGENTHOST_BENCH_LOG is set:
// then warnings and errors go to stderr.
func benchLogger() *slog.Logger {
	if os.Getenv("AGENTHOST_BENCH_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// BenchmarkThreadLength: runs/s of clients each submitting to a thread that
// already holds 10,000 messages, against the same clients on threads of at
// most 10 messages (a client moves to a fresh thread every 5 runs), over
// the badgerstore plugin. The two take turns, b.N runs each in rounds
// (long, short, short, long, ...); ratio:long/short is the median of the
// rounds' pairs. cpu-ms/run is the CPU time of the host and driver
// processes together per run of each side: on a shared machine the rates
// move with the load, the CPU a run costs much less. host-heap-MiB is the
// host's heap after the long rounds, the driver's records being in its own
// process: it stays bounded however long the threads grow.
func BenchmarkThreadLength(b *testing.B) {
	const clients, longMsgs, round = 4, 10_000, 200
	d := launchBuiltin(b, "badgerstore", map[string]string{"dir": b.TempDir()})
	dh := driverhost.Of(d)
	rt := benchRuntime(b, d, nil, model.Script{}, 64)
	ctx := context.Background()
	var cpuLong, cpuShort time.Duration
	cpu := func() time.Duration { return procCPU(os.Getpid()) + procCPU(dh.Pid()) }
	// drive runs n runs a client, adding the CPU they took to used.
	drive := func(n int, thread func(c, i int) string, used *time.Duration) time.Duration {
		defer func(c0 time.Duration) { *used += cpu() - c0 }(cpu())
		began := time.Now()
		var wg sync.WaitGroup
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n {
					tk, err := rt.Submit(ctx, thread(c, i), fmt.Sprintf("in %d", i), host.SubmitOptions{})
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
		return time.Since(began)
	}
	long := func(c, _ int) string { return fmt.Sprintf("long-%d", c) }
	for c := range clients {
		fillThread(b, d, long(c, 0), longMsgs/2)
	}
	var warm time.Duration
	drive(5, long, &warm) // the host reads the threads' ends once
	short := 0
	shortThread := func(c, i int) string { return fmt.Sprintf("short-%d-%d-%d", short, c, i/5) }
	b.ResetTimer()
	var ratios []float64
	var tookLong, tookShort time.Duration
	done := 0
	for k := 0; done < b.N; k++ {
		n := min(round, b.N-done)
		per := max(n/clients, 1)
		var tl, ts time.Duration
		if k%2 == 0 {
			tl = drive(per, long, &cpuLong)
			ts = drive(per, shortThread, &cpuShort)
		} else {
			ts = drive(per, shortThread, &cpuShort)
			tl = drive(per, long, &cpuLong)
		}
		short++
		ratios = append(ratios, float64(ts)/float64(tl))
		tookLong += tl
		tookShort += ts
		done += per * clients
	}
	b.StopTimer()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	sort.Float64s(ratios)
	b.ReportMetric(float64(done)/tookLong.Seconds(), "runs/s:long")
	b.ReportMetric(float64(done)/tookShort.Seconds(), "runs/s:short")
	b.ReportMetric(ratios[len(ratios)/2], "ratio:long/short")
	if cpuLong > 0 && cpuShort > 0 {
		b.ReportMetric(float64(cpuLong.Microseconds())/1e3/float64(done), "cpu-ms/run:long")
		b.ReportMetric(float64(cpuShort.Microseconds())/1e3/float64(done), "cpu-ms/run:short")
	}
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "host-heap-MiB")
}

// fillThread writes, in one commit, a thread of n completed runs, each an
// input and its answer, as the reducer would have left them had they all
// ended in that commit.
func fillThread(b *testing.B, d driver.Driver, thread string, n int) {
	b.Helper()
	now := time.Now()
	batch := driver.Batch{CommitID: "fill-" + thread, ThreadID: thread, ExpectedVersion: 0,
		Thread: record.Thread{ID: thread, Version: 1, NextRunSeq: int64(n) + 1, NextMessageSeq: 2*int64(n) + 1, LastCommitID: "fill-" + thread, UpdatedAt: now}}
	for i := range n {
		run := record.Run{ID: fmt.Sprintf("run_fill_%s_%06d", thread, i), ThreadID: thread, Seq: int64(i) + 1, State: record.StateCompleted,
			TerminalReason: record.ReasonCompleted, InputMessageIDs: []string{fmt.Sprintf("msg_fill_%s_%06d_in", thread, i)},
			AssistantMessageID: fmt.Sprintf("msg_fill_%s_%06d_out", thread, i), AnswerSeq: 2*int64(i) + 2, Attempt: 1, Owner: "fill",
			EndSeq: 1, CreatedAt: now, StartedAt: now, EndedAt: now}
		batch.Runs = append(batch.Runs, run)
		batch.Messages = append(batch.Messages,
			record.Message{ID: run.InputMessageIDs[0], ThreadID: thread, RunID: run.ID, Seq: 2*int64(i) + 1, Role: record.RoleUser, Content: fmt.Sprintf("input %d", i), CreatedAt: now},
			record.Message{ID: run.AssistantMessageID, ThreadID: thread, RunID: run.ID, Seq: 2*int64(i) + 2, Role: record.RoleAssistant, Content: fmt.Sprintf("answer %d", i), CreatedAt: now})
	}
	if _, err := d.Commit(context.Background(), batch); err != nil {
		b.Fatalf("filling thread %s: %v", thread, err)
	}
}

// BenchmarkDurableSteps: a five-step run with tools (four model steps that
// each call a tool, then the answer) at 64 runs at once, each client
// submitting to its own thread and waiting for the answer, over badgerstore
// through the plugin: with durable steps (nine step records and the
// terminal commit per run) and without (the same driver process seen as
// store protocol 1: only the terminal commit is written). The two runtimes,
// each over a driver process of its own, take turns round by round (A B, B
// A, ...), so that both meet the same machine; the ratio is the median of
// the rounds' ratios of time per run. b.N runs go to each side. Beside the
// times it reports the CPU each side's runs cost the host process and the
// side's driver process (from /proc, while the side runs), which moves
// less with the machine's load. BENCH_DRIVER_PROFILE=file writes a CPU
// profile of each driver process, to file.on and file.off.
func BenchmarkDurableSteps(b *testing.B) {
	const clients, round = 64, 256
	steps := make([]model.ScriptStep, 4)
	for i := range steps {
		steps[i] = model.ScriptStep{Tool: &model.ScriptTool{Name: "lookup"}}
	}
	script := model.Script{Steps: append(steps, model.ScriptStep{Answer: "done"})}
	profile := func(side string) []string {
		if p := os.Getenv("BENCH_DRIVER_PROFILE"); p != "" {
			return []string{driverrpc.CPUProfileEnv + "=" + p + "." + side}
		}
		return nil
	}
	on := driverhost.Of(launchBuiltinEnv(b, "badgerstore", map[string]string{"dir": b.TempDir()}, profile("on")...))
	off := driverhost.Of(launchBuiltinEnv(b, "badgerstore", map[string]string{"dir": b.TempDir()}, profile("off")...))
	sides := []struct {
		name      string
		d         *driverhost.Driver
		rt        *host.Runtime
		took      time.Duration
		runs      int
		host, drv time.Duration // CPU
		cpuKnown  bool
	}{
		{name: "on", d: on, rt: benchRuntime(b, on.Store(), nil, script, clients), cpuKnown: true},
		// The same driver process seen as store protocol 1.
		{name: "off", d: off, rt: benchRuntime(b, off, nil, script, clients), cpuKnown: true},
	}
	if !sides[0].rt.Stats().DurableSteps || sides[1].rt.Stats().DurableSteps {
		b.Fatal("the runtimes do not differ in durable steps")
	}
	ctx := context.Background()
	thread := 0
	drive := func(rt *host.Runtime, n int) time.Duration {
		// Each client submits to a thread of its own, a fresh one each
		// round: runs of one thread run one at a time, and a thread with
		// many queued runs would measure the queue, not the steps.
		base := thread
		thread += clients
		began := time.Now()
		var wg sync.WaitGroup
		for c := range min(clients, n) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := c; i < n; i += clients {
					tk, err := rt.Submit(ctx, fmt.Sprintf("T%d", base+c), "go", host.SubmitOptions{})
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
		return time.Since(began)
	}
	stepsBefore := sides[0].rt.Stats().StepCommits
	b.ResetTimer()
	var ratios []float64
	for k, done := 0, 0; done < b.N; k++ {
		n := min(round, b.N-done)
		var per [2]float64
		for j := range 2 {
			s := &sides[(k+j)%2] // alternate which goes first
			host0, drv0 := procCPU(os.Getpid()), procCPU(s.d.Pid())
			d := drive(s.rt, n)
			host1, drv1 := procCPU(os.Getpid()), procCPU(s.d.Pid())
			if host0 < 0 || drv0 < 0 || host1 < 0 || drv1 < 0 {
				s.cpuKnown = false
			}
			s.host += host1 - host0
			s.drv += drv1 - drv0
			s.took += d
			s.runs += n
			per[(k+j)%2] = float64(d) / float64(n)
		}
		ratios = append(ratios, per[0]/per[1])
		done += n
	}
	b.StopTimer()
	sort.Float64s(ratios)
	for _, s := range sides {
		b.ReportMetric(float64(s.took)/1e6/float64(s.runs), "ms/run:"+s.name)
		b.ReportMetric(float64(s.runs)/s.took.Seconds(), "runs/s:"+s.name)
		if s.cpuKnown {
			b.ReportMetric(float64(s.host.Microseconds())/float64(s.runs), "host-cpu-µs/run:"+s.name)
			b.ReportMetric(float64(s.drv.Microseconds())/float64(s.runs), "driver-cpu-µs/run:"+s.name)
		}
	}
	b.ReportMetric(ratios[len(ratios)/2], "ratio:on/off")
	b.ReportMetric(float64(sides[0].rt.Stats().StepCommits-stepsBefore)/sides[0].took.Seconds(), "steps/s:on")
	b.ReportMetric(float64(sides[0].rt.Stats().StepCommits-stepsBefore)/float64(sides[0].runs), "steps/run:on")
}

// procCPU returns the CPU time (user and system) the process pid has used,
// or -1 where that cannot be read.
func procCPU(pid int) time.Duration {
	d, err := proccpu.Of(pid)
	if err != nil {
		return -1
	}
	return d
}

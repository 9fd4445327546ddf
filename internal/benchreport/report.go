package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// row is one figure of the report, with its peer from the same run.
type row struct {
	label string
	key   string // "pkg Benchmark/sub"
	unit  string
	// peer, when set, is the figure it is compared with.
	peerLabel, peerKey, peerUnit string
	// ratioUnit, when set, is the unit under which the benchmark reports
	// the ratio itself: the median of the ratios of pairs measured in turn
	// (A B A B ...), which the report gives instead of value / peer value.
	ratioUnit string
	// target describes the goal; met judges value (and ratio).
	target string
	met    func(value, ratio float64) bool
}

type section struct {
	title string
	about string
	jobs  []int // indexes into the job list: the commands of this section
	rows  []row
}

func atMost(x float64) func(v, r float64) bool { return func(v, _ float64) bool { return v <= x } }
func ratioAtMost(x float64) func(v, r float64) bool {
	return func(_, r float64) bool { return r <= x }
}

func sections() []section {
	const bd, dh, wasm, host = "./plugins/badgerstore/badgerdriver", "./host/driverhost", "./host/wasm", "./host"
	var drivers []row
	for _, n := range []int{1, 16, 64} {
		r := row{
			label: fmt.Sprintf("badgerstore through the plugin, %d threads", n), key: fmt.Sprintf("%s BenchmarkCommit/badgerstore/threads=%d", dh, n), unit: "commits/s",
			peerLabel: "badger in process (same durability, group commit), interleaved (ratio: median of pairs)", peerKey: fmt.Sprintf("%s BenchmarkCommit/threads=%d", bd, n), peerUnit: "commits/s",
			ratioUnit: "ratio:inproc",
		}
		if n == 64 {
			r.target = "≥ 20,000 commits/s and ≥ 0.5× in process"
			r.met = func(v, ratio float64) bool { return ratio >= 0.5 && v >= 20000 }
		}
		drivers = append(drivers, r)
	}
	drivers = append(drivers,
		row{label: "badgerstore through the plugin, 64 threads, CPU per commit in the driver process (µs)", key: dh + " BenchmarkCommit/badgerstore/threads=64", unit: "driver-cpu-µs/commit",
			peerLabel: "in the host process", peerKey: dh + " BenchmarkCommit/badgerstore/threads=64", peerUnit: "host-cpu-µs/commit"},
		row{label: "memstore through the plugin, 64 threads, CPU per commit in the driver process (µs)", key: dh + " BenchmarkCommit/memstore/threads=64", unit: "driver-cpu-µs/commit",
			peerLabel: "badgerstore, the same", peerKey: dh + " BenchmarkCommit/badgerstore/threads=64", peerUnit: "driver-cpu-µs/commit"})
	drivers = append(drivers,
		row{label: "badgerstore step commits through the plugin, 64 runs", key: dh + " BenchmarkCommitSteps/badgerstore/runs=64", unit: "steps/s",
			peerLabel: "commits through the plugin, 64 threads (the row above)", peerKey: dh + " BenchmarkCommit/badgerstore/threads=64", peerUnit: "commits/s"},
		row{label: "badgerstore step commits through the plugin, 64 runs", key: dh + " BenchmarkCommitSteps/badgerstore/runs=64", unit: "steps/s",
			peerLabel: "badger in process, the same", peerKey: bd + " BenchmarkCommitSteps/runs=64", peerUnit: "steps/s"},
		row{label: "badgerstore step commit through the plugin, 64 runs, p50", key: dh + " BenchmarkCommitSteps/badgerstore/runs=64", unit: "p50-µs",
			peerLabel: "p99", peerKey: dh + " BenchmarkCommitSteps/badgerstore/runs=64", peerUnit: "p99-µs"},
	)
	for _, n := range []int{1, 16, 64} {
		for _, d := range []string{"badgerstore", "memstore"} {
			drivers = append(drivers, row{label: fmt.Sprintf("%s through the plugin, %d threads, commit p50", d, n), key: fmt.Sprintf("%s BenchmarkCommit/%s/threads=%d", dh, d, n), unit: "p50-µs",
				peerLabel: "p99", peerKey: fmt.Sprintf("%s BenchmarkCommit/%s/threads=%d", dh, d, n), peerUnit: "p99-µs"})
		}
	}
	drivers = append(drivers, row{label: "memstore through the plugin, one read round trip, p50", key: dh + " BenchmarkRoundTrip/memstore", unit: "p50-µs",
		peerLabel: "badgerstore, the same", peerKey: dh + " BenchmarkRoundTrip/badgerstore", peerUnit: "p50-µs", target: "memstore ≤ 150 µs", met: atMost(150)},
		row{label: "memstore round trip p50, served on one thread (its default)", key: dh + " BenchmarkRoundTrip/memstore", unit: "p50-µs",
			peerLabel: "served on every core", peerKey: dh + " BenchmarkRoundTrip/memstore-allprocs", peerUnit: "p50-µs"},
		row{label: "memstore Info round trip p50 (the transport alone)", key: dh + " BenchmarkRoundTrip/memstore-info", unit: "p50-µs",
			peerLabel: "LoadThread, calls alternating with it", peerKey: dh + " BenchmarkRoundTrip/memstore-info", peerUnit: "load-p50-µs"})

	wasmRows := []row{
		{label: "C guest decision p50", key: wasm + " BenchmarkDecide/guest=c", unit: "p50-ns", peerLabel: "native Go, the same policy", peerKey: wasm + " BenchmarkDecide/native", peerUnit: "p50-ns", target: "≤ 2,000 ns", met: atMost(2000)},
		{label: "Go guest decision p50", key: wasm + " BenchmarkDecide/guest=go", unit: "p50-ns", peerLabel: "native Go, the same policy", peerKey: wasm + " BenchmarkDecide/native", peerUnit: "p50-ns", target: "≤ 5,000 ns", met: atMost(5000)},
		{label: "Go guest decision p50", key: wasm + " BenchmarkDecide/guest=go", unit: "p50-ns", peerLabel: "C guest", peerKey: wasm + " BenchmarkDecide/guest=c", peerUnit: "p50-ns"},
		{label: "C guest decision p99", key: wasm + " BenchmarkDecide/guest=c", unit: "p99-ns", peerLabel: "native Go p99", peerKey: wasm + " BenchmarkDecide/native", peerUnit: "p99-ns"},
		{label: "Go guest load from the compilation cache (ns)", key: wasm + " BenchmarkLoad/go/cached", unit: "ns/op", peerLabel: "cold", peerKey: wasm + " BenchmarkLoad/go/cold", peerUnit: "ns/op", target: "≤ 100 ms", met: atMost(100e6)},
		{label: "C guest load from the compilation cache (ns)", key: wasm + " BenchmarkLoad/c/cached", unit: "ns/op", peerLabel: "cold", peerKey: wasm + " BenchmarkLoad/c/cold", peerUnit: "ns/op", target: "≤ 100 ms", met: atMost(100e6)},
		{label: "C guest memory per pooled instance (linear, bytes)", key: wasm + " BenchmarkInstance/c", unit: "linear-bytes/instance", peerLabel: "Go guest", peerKey: wasm + " BenchmarkInstance/go", peerUnit: "linear-bytes/instance", target: "≤ 256 KiB", met: atMost(256 << 10)},
		{label: "C guest host heap per instance (bytes)", key: wasm + " BenchmarkInstance/c", unit: "heap-bytes/instance", peerLabel: "Go guest", peerKey: wasm + " BenchmarkInstance/go", peerUnit: "heap-bytes/instance"},
	}

	var rt []row
	for _, n := range []int{1, 64, 1024} {
		rt = append(rt, row{label: fmt.Sprintf("runs/s over badgerstore through the plugin, %d clients", n), key: fmt.Sprintf("%s BenchmarkRunsEndToEnd/driver=badgerstore-plugin/threads=%d", host, n), unit: "runs/s",
			peerLabel: "badger in process", peerKey: fmt.Sprintf("%s BenchmarkRunsEndToEnd/driver=badger-inprocess/threads=%d", host, n), peerUnit: "runs/s"})
		rt = append(rt, row{label: fmt.Sprintf("runs/s over memdriver (in process, not durable), %d clients", n), key: fmt.Sprintf("%s BenchmarkRunsEndToEnd/driver=memdriver/threads=%d", host, n), unit: "runs/s",
			peerLabel: "badger in process", peerKey: fmt.Sprintf("%s BenchmarkRunsEndToEnd/driver=badger-inprocess/threads=%d", host, n), peerUnit: "runs/s"})
	}
	rt = append(rt,
		row{label: "step cost, policy that cannot inject (ns/step)", key: host + " BenchmarkStepOverhead", unit: "ns/step:cannot-inject", peerLabel: "no policy, interleaved run by run (ratio: median of pairs)", peerKey: host + " BenchmarkStepOverhead", peerUnit: "ns/step:none", ratioUnit: "ratio:cannot-inject/none", target: "ratio ≤ 1.02", met: ratioAtMost(1.02)},
		row{label: "step cost, policy that can inject (ns/step)", key: host + " BenchmarkStepOverhead", unit: "ns/step:can-inject", peerLabel: "no policy, interleaved run by run (ratio: median of pairs)", peerKey: host + " BenchmarkStepOverhead", peerUnit: "ns/step:none", ratioUnit: "ratio:can-inject/none"},
		row{label: "recovery of 100,000 runs over badgerstore through the plugin (s)", key: host + " BenchmarkRecovery/driver=badgerstore-plugin", unit: "s/recovery", peerLabel: "memdriver", peerKey: host + " BenchmarkRecovery/driver=memdriver", peerUnit: "s/recovery", target: "≤ 5 s", met: atMost(5)},
		row{label: "five-step run with tools, 64 runs at once, badgerstore plugin, durable steps (ms/run)", key: host + " BenchmarkDurableSteps", unit: "ms/run:on",
			peerLabel: "the same with only the terminal commit written (steps off), interleaved (ratio: median of pairs)", peerKey: host + " BenchmarkDurableSteps", peerUnit: "ms/run:off", ratioUnit: "ratio:on/off",
			target: "ratio ≤ 1.3", met: ratioAtMost(1.3)},
		row{label: "step commits/s in those runs (9 per run)", key: host + " BenchmarkDurableSteps", unit: "steps/s:on",
			peerLabel: "step commits through the plugin alone, 64 runs (Store drivers)", peerKey: dh + " BenchmarkCommitSteps/badgerstore/runs=64", peerUnit: "steps/s"},
		row{label: "host memory per queued run (bytes)", key: host + " BenchmarkMemoryPerQueuedRun", unit: "hostB/queued-run", target: "≤ 2 KiB", met: atMost(2048)},
		row{label: "runs/s on threads of 10,000 messages, 4 clients, badgerstore plugin", key: host + " BenchmarkThreadLength", unit: "runs/s:long",
			peerLabel: "threads of at most 10 messages, interleaved (ratio: median of pairs)", peerKey: host + " BenchmarkThreadLength", peerUnit: "runs/s:short", ratioUnit: "ratio:long/short",
			target: "ratio ≥ 0.9", met: func(_, r float64) bool { return r >= 0.9 }},
		row{label: "CPU per run on those long threads, host and driver processes (ms)", key: host + " BenchmarkThreadLength", unit: "cpu-ms/run:long",
			peerLabel: "threads of at most 10 messages", peerKey: host + " BenchmarkThreadLength", peerUnit: "cpu-ms/run:short"},
		row{label: "host heap after the runs on long threads (MiB)", key: host + " BenchmarkThreadLength", unit: "host-heap-MiB", target: "bounded (history cache, whole runs in a window)"},
	)
	const dbos = "./bench/dbospeer"
	peerKey := dbos + " BenchmarkDBOSOneStepWorkflow/concurrency=64"
	ahead := func(_, r float64) bool { return r > 1 }
	pg := []row{
		{label: "runs/s over pgstore, 1 host, 64 clients", key: host + " BenchmarkPgRunsEndToEnd/hosts=1/clients=64", unit: "runs/s",
			peerLabel: "DBOS Transact, one-step workflow, 64 clients (ratio: median of rounds in turn)", peerKey: peerKey, peerUnit: "runs/s", ratioUnit: "ratio:peer",
			target: "≥ 3× the peer", met: func(_, r float64) bool { return r >= 3 }},
		{label: "runs/s over pgstore, 3 hosts, 64 clients", key: host + " BenchmarkPgRunsEndToEnd/hosts=3/clients=64", unit: "runs/s",
			peerLabel: "DBOS Transact, one-step workflow, 64 clients (ratio: median of rounds in turn)", peerKey: peerKey, peerUnit: "runs/s", ratioUnit: "ratio:peer", target: "ahead of the peer (ratio > 1)", met: ahead},
		{label: "runs/s over pgstore, 3 hosts, 64 clients", key: host + " BenchmarkPgRunsEndToEnd/hosts=3/clients=64", unit: "runs/s",
			peerLabel: "1 host", peerKey: host + " BenchmarkPgRunsEndToEnd/hosts=1/clients=64", peerUnit: "runs/s"},
		{label: "DBOS Transact, one-step workflow, 1 client (runs/s)", key: dbos + " BenchmarkDBOSOneStepWorkflow/concurrency=1", unit: "runs/s"},
	}
	const ex = "./guests/examples"
	examples := []row{}
	for _, l := range []struct{ key, label string }{{"c", "C"}, {"rust", "Rust"}, {"assemblyscript", "AssemblyScript"}, {"wat", "WAT"}} {
		examples = append(examples, row{label: l.label + " example decision p50", key: ex + " BenchmarkExampleDecide/lang=" + l.key, unit: "p50-ns",
			peerLabel: "native Go, the same policy", peerKey: ex + " BenchmarkExampleDecide/lang=native", peerUnit: "p50-ns", target: "≤ 2,000 ns", met: atMost(2000)})
	}
	examples = append(examples, row{label: "Go example decision p50", key: ex + " BenchmarkExampleDecide/lang=go", unit: "p50-ns",
		peerLabel: "native Go, the same policy", peerKey: ex + " BenchmarkExampleDecide/lang=native", peerUnit: "p50-ns", target: "≤ 5,000 ns", met: atMost(5000)})
	const mcpPkg = "./host/mcp"
	tools := []row{
		{label: "MCP tool call over stdio (a subprocess), p50 (µs)", key: mcpPkg + " BenchmarkToolCall", unit: "mcp-stdio-p50-µs",
			peerLabel: "Go tool doing the same work", peerKey: mcpPkg + " BenchmarkToolCall", peerUnit: "go-p50-µs"},
		{label: "MCP tool call over streamable HTTP (loopback), p50 (µs)", key: mcpPkg + " BenchmarkToolCall", unit: "mcp-http-p50-µs",
			peerLabel: "Go tool doing the same work", peerKey: mcpPkg + " BenchmarkToolCall", peerUnit: "go-p50-µs"},
		{label: "MCP tool call over stdio, p99 (µs)", key: mcpPkg + " BenchmarkToolCall", unit: "mcp-stdio-p99-µs",
			peerLabel: "over streamable HTTP", peerKey: mcpPkg + " BenchmarkToolCall", peerUnit: "mcp-http-p99-µs"},
	}
	const soakPkg = "./soak"
	httpRows := []row{
		{label: "one client over HTTP, `serve` on badgerstore, submit-to-answer p50 (ms)", key: soakPkg + " BenchmarkHTTPClosedLoop/clients=1", unit: "http-p50-ms",
			peerLabel: "Go API, badger in process, interleaved (ratio: median of pairs)", peerKey: soakPkg + " BenchmarkHTTPClosedLoop/clients=1", peerUnit: "go-p50-ms", ratioUnit: "ratio:http/go-p50",
			target: "≤ 1.0 ms", met: atMost(1.0)},
		{label: "64 clients over HTTP, `serve` on badgerstore (runs/s)", key: soakPkg + " BenchmarkHTTPClosedLoop/clients=64", unit: "http-runs/s",
			peerLabel: "Go API, badger in process, interleaved (ratio: median of pairs)", peerKey: soakPkg + " BenchmarkHTTPClosedLoop/clients=64", peerUnit: "go-runs/s", ratioUnit: "ratio:http/go-runs/s",
			target: "≥ 6,000 runs/s", met: func(v, _ float64) bool { return v >= 6000 }},
		{label: "64 clients over HTTP, p50 (ms)", key: soakPkg + " BenchmarkHTTPClosedLoop/clients=64", unit: "http-p50-ms",
			peerLabel: "p99", peerKey: soakPkg + " BenchmarkHTTPClosedLoop/clients=64", peerUnit: "http-p99-ms"},
		// Extra figures, no target: one request per run (POST .../inputs?wait=, ADR 0160).
		{label: "one client over HTTP, one request per run (`POST .../inputs?wait=`), p50 (ms)", key: soakPkg + " BenchmarkHTTPClosedLoop/clients=1", unit: "http-1req-p50-ms",
			peerLabel: "submit then `GET result?wait=`, interleaved", peerKey: soakPkg + " BenchmarkHTTPClosedLoop/clients=1", peerUnit: "http-p50-ms"},
		{label: "64 clients over HTTP, one request per run (runs/s)", key: soakPkg + " BenchmarkHTTPClosedLoop/clients=64", unit: "http-1req-runs/s",
			peerLabel: "submit then `GET result?wait=`, interleaved", peerKey: soakPkg + " BenchmarkHTTPClosedLoop/clients=64", peerUnit: "http-runs/s"},
	}
	var hostsRows []row
	for _, n := range []int{40, 150} {
		key := fmt.Sprintf("%s BenchmarkHostsCPU/clients=%d", soakPkg, n)
		hostsRows = append(hostsRows,
			row{label: fmt.Sprintf("CPU per run, 3 hosts on pgstore, %d clients (ms)", n), key: key, unit: "cpu-ms/run-3hosts",
				peerLabel: "1 host, interleaved (ratio: median of pairs)", peerKey: key, peerUnit: "cpu-ms/run-1host", ratioUnit: "ratio:3hosts/1host",
				target: "ratio ≤ 1.3", met: ratioAtMost(1.3)},
			row{label: fmt.Sprintf("submit-to-answer p50, 3 hosts, %d clients (ms; runs take 1,300)", n), key: key, unit: "p50-ms-3hosts",
				peerLabel: "1 host", peerKey: key, peerUnit: "p50-ms-1host"})
	}
	return []section{
		{title: "Store drivers", about: "Commits per second and commit latency with 1, 16 and 64 goroutines each committing to a thread of its own, and step commits (CommitSteps) per second with 64 active runs each appending its steps one at a time; badger with SyncWrites on (durable) and group commit; the plugin figures through the real subprocess (go-plugin, gRPC, AutoMTLS), concurrent commits grouped by the host into CommitMany calls and by the driver into one synced write. The plugin's and in process's commit benchmarks take turns in four rounds (plugin, in process, in process, plugin, ...), each for a third of the benchtime: each figure is the median of its rounds, each plugin / in-process ratio the median of the rounds' ratios. The CPU time a commit costs each process (from /proc, the benchmark's own making of batches in the host's) bounds the rate the machine's cores allow: at two cores, 2,000,000 / (driver + host µs) commits/s.", jobs: []int{12, 0, 1}, rows: drivers},
		{title: "Wasm policies", about: "One refine decision through the wazero host (request encoding, pooled instance, per-call deadline, decoding and manifest check included), module loads, and pooled instances.", jobs: []int{2, 3}, rows: wasmRows},
		{title: "Example policies in five languages", about: "The example policy of guests/examples, one decision through the wazero host (as above) for each language's committed module (Go: built for the run), beside the same policy as native Go, on one request (busy thread, one queued run, refine hint).", jobs: []int{8}, rows: examples},
		{title: "Runtime", about: "The coordinator, executor and store layer end to end with the scripted model answering at once; each client submits one input and waits for the answer before the next.", jobs: []int{4, 5}, rows: rt},
		{title: "Several hosts on PostgreSQL, and a peer", about: "agenthost over pgstore (each host a runtime with its own driver subprocess, one database) against DBOS Transact for Go running a durable workflow with one step (bench/dbospeer, a module of its own), on the same PostgreSQL server (fsync on) in the same run, the two taking turns in six rounds (agenthost, DBOS, DBOS, agenthost, ...): each figure is the median of its rounds, each ratio the median of the rounds' ratios. Each client submits with an idempotency key (DBOS: the workflow id) and waits for the answer before the next.", jobs: []int{6, 7}, rows: pg},
		{title: "Over HTTP", about: "`agenthost serve` on badgerstore (the driver a subprocess, durable), a zero-delay scripted model, measured from outside as `agenthost-loadgen closed` measures a deployment: each client submits with an idempotency key, then `GET result?wait=`, then its next input (a fresh thread every 50). Beside it the same clients through the Go API on badger in process, the two taking turns round by round. The targets are on submit then `GET`; the one-request rows (each input submitted with `?wait=`, in the same rounds) are extra figures.", jobs: []int{10}, rows: httpRows},
		{title: "Several hosts: CPU per run", about: "Three `agenthost serve` processes sharing one pgstore database against one alone on a database of its own (same PostgreSQL server), under the same closed load as `agenthost-loadgen closed` puts on a deployment: each client submits with an idempotency key to one host and waits for the answer (`GET result?wait=`) at the next in turn, then its next input (a fresh thread every 50); the scripted model takes 1.3 s per run. Measured from outside: the CPU time of the serve processes and their driver subprocesses (from /proc; the database's own is not counted) over a round, divided by the runs it answered. The two deployments take turns (one, three, three, one, ...), each figure is the median of its rounds and the ratio the median of the pairs' ratios. With one host, 150 clients exceed its 64 concurrent runs, hence its latency. It takes minutes, so `make bench` runs it with rounds of `HOSTS_RUNS` runs (200) in `HOSTS_PAIRS` pairs (3); `make bench-hosts HOSTS_RUNS=N HOSTS_PAIRS=P` runs it alone, larger, and prints the figures with each round's split between hosts and drivers.", jobs: []int{11}, rows: hostsRows},
		{title: "Tools", about: "One tool call through the MCP client (the official Go SDK) to the test server's add tool, beside a Go tool doing the same work (decode two numbers, add, format), the three calls alternating in one benchmark so they meet the same load; the difference is what the MCP client and its transport add to a call.", jobs: []int{9}, rows: tools},
	}
}

func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v >= 100:
		return addCommas(fmt.Sprintf("%.0f", v))
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func addCommas(s string) string {
	n := len(s)
	if n <= 3 {
		return s
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (n-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func get(res results, key, unit string) float64 {
	if m, ok := res[key]; ok {
		if v, ok := m[unit]; ok {
			return v
		}
	}
	return math.NaN()
}

// writeReport writes the report of res: every section, or only the one
// titled only when it is not "".
func writeReport(b *strings.Builder, res results, jobs []job, machine string, start time.Time, took time.Duration, load0, load1, only string) {
	fmt.Fprintf(b, "# Benchmarks\n\nGenerated by `make bench` (`go run ./internal/benchreport`) on %s UTC, in %s.\n\n", start.UTC().Format("2006-01-02 15:04"), took.Round(time.Second))
	fmt.Fprintf(b, "Machine: %s; load average %s at the start, %s at the end. The machine is shared: absolute figures move between runs, so each figure stands beside its peer from the same run, and the ratio is the point. What dominates each cost is discussed in [benchmark-notes.md](benchmark-notes.md).\n\n", machine, load0, load1)
	for _, s := range sections() {
		if only != "" && s.title != only {
			continue
		}
		fmt.Fprintf(b, "## %s\n\n%s\n\n```sh\n", s.title, s.about)
		for _, j := range s.jobs {
			fmt.Fprintln(b, jobs[j])
		}
		fmt.Fprintf(b, "```\n\n| figure | value | peer | peer value | ratio | target | met |\n|---|---:|---|---:|---:|---|---|\n")
		for _, r := range s.rows {
			v := get(res, r.key, r.unit)
			peer, ratio := math.NaN(), math.NaN()
			if r.peerKey != "" {
				peer = get(res, r.peerKey, r.peerUnit)
				ratio = v / peer
			}
			if r.ratioUnit != "" {
				ratio = get(res, r.key, r.ratioUnit)
			}
			met := ""
			if r.met != nil {
				switch {
				case math.IsNaN(v):
					met = "not measured"
				case r.met(v, ratio):
					met = "met"
				default:
					met = "**not met**"
				}
			}
			peerLabel := r.peerLabel
			if peerLabel == "" {
				peerLabel = "(single figure)"
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.label, fmtNum(v), peerLabel, fmtNum(peer), fmtRatio(ratio), r.target, met)
		}
		fmt.Fprintln(b)
	}
}

func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "–"
	}
	return fmt.Sprintf("%.3g×", r)
}

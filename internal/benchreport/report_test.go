package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseAndReport(t *testing.T) {
	res := results{}
	parse(strings.NewReader(`goos: linux
BenchmarkCommit/threads=64-2         	   51000	     58000 ns/op	     17020 commits/s	      3109 p50-µs	      9057 p99-µs
PASS
`), "./plugins/badgerstore/badgerdriver", res, io.Discard)
	parse(strings.NewReader(`BenchmarkCommit/badgerstore/threads=64-2   	    9000	    300000 ns/op	      3260 commits/s	        95.00 driver-cpu-µs/commit	        38.50 host-cpu-µs/commit	     15935 p50-µs	     91526 p99-µs	         0.2 ratio:inproc
BenchmarkRoundTrip/memstore-2   	   20000	    200000 ns/op	       152 p50-µs	       400 p99-µs
`), "./host/driverhost", res, io.Discard)
	parse(strings.NewReader(`BenchmarkThreadLength-2   	     800	   6596120 ns/op	        10.57 host-heap-MiB	         0.9106 ratio:long/short	       269.0 runs/s:long	       347.4 runs/s:short
`), "./host", res, io.Discard)
	parse(strings.NewReader(`BenchmarkStepOverhead-2   	    3256	   1263857 ns/op	     27297 ns/step:can-inject	     25635 ns/step:cannot-inject	     26044 ns/step:none	         1.012 ratio:can-inject/none	         0.9911 ratio:cannot-inject/none
`), "./host", res, io.Discard)
	if got := res["./host/driverhost BenchmarkCommit/badgerstore/threads=64"]["commits/s"]; got != 3260 {
		t.Fatalf("parsed %v", res)
	}
	var b strings.Builder
	parse(strings.NewReader(`BenchmarkPgRunsEndToEnd/hosts=1/clients=64-2   	    9000	    300000 ns/op	      900 runs/s	1.45 ratio:peer
`), "./host", res, io.Discard)
	parse(strings.NewReader(`BenchmarkDBOSOneStepWorkflow/concurrency=64-2   	    9000	    300000 ns/op	      600 runs/s
`), "./bench/dbospeer", res, io.Discard)
	parse(strings.NewReader(`BenchmarkExampleDecide/lang=rust-2   	  100000	      1500 ns/op	      1100 p50-ns	      3000 p99-ns
BenchmarkExampleDecide/lang=native-2   	  100000	        40 ns/op	        20 p50-ns	        50 p99-ns
`), "./guests/examples", res, io.Discard)
	parse(strings.NewReader(`BenchmarkToolCall-2   	    2000	   3683535 ns/op	        11.46 go-p50-µs	        74.20 go-p99-µs	      1048 mcp-http-p50-µs	     11558 mcp-http-p99-µs	      1026 mcp-stdio-p50-µs	     11601 mcp-stdio-p99-µs
`), "./host/mcp", res, io.Discard)
	parse(strings.NewReader(`BenchmarkHostsCPU/clients=40-2   	     200	 265729363 ns/op	         3.733 cpu-ms/run-1host	        4.50 cpu-ms/run-3hosts	      1346 p50-ms-1host	      1360 p50-ms-3hosts	         1.21 ratio:3hosts/1host
`), "./soak", res, io.Discard)
	jobs := []job{{pkg: "a"}, {pkg: "c"}, {pkg: "e"}, {pkg: "g"}, {pkg: "i"}, {pkg: "k"}, {pkg: "m", pg: true}, {pkg: ".", dir: "bench/dbospeer", bench: "D", benchtime: "3s", pg: true}, {pkg: "./guests/examples"}, {pkg: "./host/mcp"}, {pkg: "./soak"},
		{pkg: "./soak", bench: "HostsCPU", benchtime: "200x", pg: true, flags: []string{"-hostscpu.pairs=3"}}, {pkg: "./host/driverhost"}}
	writeReport(&b, res, jobs, "test machine", time.Unix(0, 0), time.Second, "1", "2", "")
	out := b.String()
	for _, want := range []string{
		"| badgerstore through the plugin, 64 threads | 3,260 | badger in process (same durability, group commit), interleaved (ratio: median of pairs) | 17,020 | 0.2× | ≥ 20,000 commits/s and ≥ 0.5× in process | **not met** |",
		"| badgerstore through the plugin, 64 threads, CPU per commit in the driver process (µs) | 95.0 | in the host process | 38.5 | 2.47× |  |  |",
		"| memstore through the plugin, one read round trip, p50 | 152 |",
		"| runs/s on threads of 10,000 messages, 4 clients, badgerstore plugin | 269 | threads of at most 10 messages, interleaved (ratio: median of pairs) | 347 | 0.911× | ratio ≥ 0.9 | met |",
		"| step cost, policy that cannot inject (ns/step) | 25,635 | no policy, interleaved run by run (ratio: median of pairs) | 26,044 | 0.991× | ratio ≤ 1.02 | met |",
		"| recovery of 100,000 runs over badgerstore through the plugin (s) | – |",
		"not measured",
		"Machine: test machine",
		"| Rust example decision p50 | 1,100 | native Go, the same policy | 20.0 | 55× | ≤ 2,000 ns | met |",
		"| runs/s over pgstore, 1 host, 64 clients | 900 | DBOS Transact, one-step workflow, 64 clients (ratio: median of rounds in turn) | 600 | 1.45× | ≥ 3× the peer | **not met** |",
		"| MCP tool call over stdio (a subprocess), p50 (µs) | 1,026 | Go tool doing the same work | 11.5 |",
		"| CPU per run, 3 hosts on pgstore, 40 clients (ms) | 4.5 | 1 host, interleaved (ratio: median of pairs) | 3.73 | 1.21× | ratio ≤ 1.3 | met |",
		"AGENTHOST_PG_URL=... go test -run '^$' -bench 'HostsCPU' -benchtime 200x ./soak -hostscpu.pairs=3",
		"AGENTHOST_PG_URL=... (cd bench/dbospeer && go test -run '^$' -bench 'D' -benchtime 3s .)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q\n%s", want, out)
		}
	}
}

// A pair's figures are the medians of their rounds, its ratios the
// medians of the rounds' ratios, not the ratio of the medians.
func TestPairMedians(t *testing.T) {
	rounds := []results{
		{"a X": {"runs/s": 100}, "b Y": {"runs/s": 50}},
		{"a X": {"runs/s": 300}, "b Y": {"runs/s": 100}},
		{"a X": {"runs/s": 200}, "b Y": {"runs/s": 200}},
	}
	res := results{}
	medianOf(rounds, res)
	if res["a X"]["runs/s"] != 200 || res["b Y"]["runs/s"] != 100 {
		t.Fatalf("medians %v", res)
	}
	p := pair{a: 0, b: 1, rounds: 3, cmp: []comparison{{keyA: "a X", unitA: "runs/s", keyB: "b Y", unitB: "runs/s", ratioUnit: "ratio:peer"}}}
	i := 0
	var order []string
	exec1 := func(j job, into results) error {
		order = append(order, j.pkg)
		for k, v := range rounds[i/2] {
			if strings.HasPrefix(k, j.pkg+" ") {
				into[k] = v
			}
		}
		i++
		return nil
	}
	res = results{}
	if err := p.run([]job{{pkg: "a"}, {pkg: "b"}}, res, exec1); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ""); got != "abbaab" {
		t.Errorf("order %s, want turns abbaab", got)
	}
	// Ratios 2, 3, 1: the median is 2 (the medians' ratio would be 2 too;
	// the rounds' spread is what the median hides).
	if got := res["a X"]["ratio:peer"]; got != 2 {
		t.Errorf("ratio %v, want 2", got)
	}
}

// A report of one section holds that section only.
func TestReportOneSection(t *testing.T) {
	var b strings.Builder
	writeReport(&b, results{}, make([]job, 13), "test machine", time.Unix(0, 0), time.Second, "1", "2", "Store drivers")
	out := b.String()
	if !strings.Contains(out, "## Store drivers") || strings.Contains(out, "## Wasm policies") {
		t.Fatalf("report of one section:\n%s", out)
	}
}

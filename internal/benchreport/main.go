// Command benchreport runs every benchmark of the project and writes
// docs/benchmarks.md as one report: each figure beside its peer from the
// same run, the ratio, the target, whether it is met, and the command that
// produced it. `make bench` runs it.
//
// The analysis behind the figures (what dominates each cost, what was tried)
// lives in docs/benchmark-notes.md, written by hand.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agenthost/agenthost/internal/pgtest"
)

// job is one `go test -bench` command.
type job struct {
	pkg, bench, benchtime string
	// dir is the module the job runs in (a module of its own under bench/),
	// "" for the project's.
	dir string
	// pg: the job needs the PostgreSQL server in AGENTHOST_PG_URL.
	pg bool
	// flags are the benchmark's own flags, after the package.
	flags []string
}

func (j job) args() []string {
	return append([]string{"test", "-run", "^$", "-bench", j.bench, "-benchtime", j.benchtime, "-count", "1", "-timeout", "60m", j.pkg}, j.flags...)
}

// key is the prefix of the job's results.
func (j job) key() string {
	if j.dir != "" {
		return "./" + j.dir
	}
	return j.pkg
}

func (j job) String() string {
	s := fmt.Sprintf("go test -run '^$' -bench '%s' -benchtime %s %s", j.bench, j.benchtime, j.pkg)
	if len(j.flags) > 0 {
		s += " " + strings.Join(j.flags, " ")
	}
	if j.dir != "" {
		s = "(cd " + j.dir + " && " + s + ")"
	}
	if j.pg {
		s = "AGENTHOST_PG_URL=... " + s
	}
	return s
}

// results maps "pkg BenchmarkName/sub" → unit → value.
type results map[string]map[string]float64

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$`)

// parse reads go test output for the package.
func parse(r io.Reader, pkg string, into results, echo io.Writer) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(echo, line)
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		vals := map[string]float64{}
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				vals[f[i+1]] = v
			}
		}
		into[pkg+" "+m[1]] = vals
	}
}

func main() {
	out := flag.String("out", "docs/benchmarks.md", "report to write")
	scale := flag.String("benchtime", "3s", "benchtime of the throughput benchmarks")
	hostsRuns := flag.Int("hosts-runs", 200, "runs per round of the several-hosts CPU benchmark (BenchmarkHostsCPU)")
	hostsPairs := flag.Int("hosts-pairs", 3, "pairs of rounds of the several-hosts CPU benchmark")
	only := flag.String("section", "", "run only the benchmarks of the section with this title, and write the report with only it")
	flag.Parse()
	if *hostsRuns < 2 || *hostsPairs < 1 {
		fmt.Fprintln(os.Stderr, "benchreport: -hosts-runs must be at least 2 and -hosts-pairs at least 1")
		os.Exit(2)
	}
	if err := run(*out, *scale, *hostsRuns, *hostsPairs, *only); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func run(out, scale string, hostsRuns, hostsPairs int, only string) error {
	jobs := []job{
		// Measured in turn with job 12, round by round (pairs).
		{pkg: "./plugins/badgerstore/badgerdriver", bench: "BenchmarkCommit", benchtime: third(scale)},
		{pkg: "./host/driverhost", bench: "BenchmarkCommitSteps|BenchmarkRoundTrip", benchtime: scale},
		{pkg: "./host/wasm", bench: "Decide", benchtime: "100000x"},
		{pkg: "./host/wasm", bench: "Load|Instance", benchtime: "10x"},
		{pkg: "./host", bench: "^BenchmarkRunsEndToEnd$|StepOverhead|MemoryPerQueued|ThreadLength|DurableSteps", benchtime: scale},
		{pkg: "./host", bench: "Recovery", benchtime: "1x"},
		// Measured in turn, round by round (pairs): each run for a third
		// of the benchtime.
		{pkg: "./host", bench: "PgRunsEndToEnd", benchtime: third(scale), pg: true},
		{pkg: ".", bench: "DBOSOneStepWorkflow", benchtime: third(scale), dir: "bench/dbospeer", pg: true},
		{pkg: "./guests/examples", bench: "ExampleDecide", benchtime: "100000x"},
		{pkg: "./host/mcp", bench: "ToolCall", benchtime: "5000x"},
		{pkg: "./soak", bench: "HTTPClosedLoop", benchtime: "4000x"},
		// Three serve processes against one, in turn within the job.
		{pkg: "./soak", bench: "HostsCPU", benchtime: fmt.Sprintf("%dx", hostsRuns), pg: true, flags: []string{fmt.Sprintf("-hostscpu.pairs=%d", hostsPairs)}},
		{pkg: "./host/driverhost", bench: "BenchmarkCommit$", benchtime: third(scale)},
	}
	// With -section, the jobs of the other sections are skipped.
	skip := map[int]bool{}
	if only != "" {
		found := false
		for _, sec := range sections() {
			if sec.title == only {
				found = true
				continue
			}
			for _, j := range sec.jobs {
				skip[j] = true
			}
		}
		if !found {
			return fmt.Errorf("no section titled %q", only)
		}
		for _, sec := range sections() {
			if sec.title == only {
				for _, j := range sec.jobs {
					skip[j] = false
				}
			}
		}
	}
	needPG := false
	for i, j := range jobs {
		needPG = needPG || (j.pg && !skip[i])
	}
	// One PostgreSQL server, with fsync on, for every job that needs one:
	// agenthost and its peer measured on the same server in the same run.
	pgURL := os.Getenv(pgtest.EnvURL)
	if pgURL == "" && needPG {
		c, err := pgtest.Start("")
		if err != nil {
			return fmt.Errorf("starting PostgreSQL: %w", err)
		}
		defer c.Stop()
		pgURL = c.URL("postgres")
	}
	res := results{}
	start := time.Now()
	load0 := loadavg()
	exec1 := func(j job, into results) error {
		fmt.Fprintln(os.Stderr, "==>", j)
		cmd := exec.Command("go", j.args()...)
		cmd.Dir = j.dir
		if j.pg {
			cmd.Env = append(os.Environ(), pgtest.EnvURL+"="+pgURL)
		}
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		err := cmd.Run()
		parse(&buf, j.key(), into, os.Stderr)
		if err != nil {
			return fmt.Errorf("%s: %w", j, err)
		}
		return nil
	}
	paired := map[int]bool{}
	for _, p := range pairs() {
		paired[p.a], paired[p.b] = true, true
	}
	for i, j := range jobs {
		if paired[i] || skip[i] {
			continue
		}
		if err := exec1(j, res); err != nil {
			return err
		}
	}
	for _, p := range pairs() {
		if skip[p.a] || skip[p.b] {
			continue
		}
		if err := p.run(jobs, res, exec1); err != nil {
			return err
		}
	}
	var b strings.Builder
	writeReport(&b, res, jobs, machine(), start, time.Since(start), load0, loadavg(), only)
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "wrote", out)
	return nil
}

// third is a third of a benchtime given as a duration, or the benchtime
// itself otherwise.
func third(benchtime string) string {
	if d, err := time.ParseDuration(benchtime); err == nil {
		return (d / 3).String()
	}
	return benchtime
}

// pair is two jobs measured in turn — A B, B A, A B, ... — for rounds
// rounds, so that both meet the same machine: each figure of either is the
// median over the rounds, and each comparison's ratio the median of the
// rounds' ratios, reported under ratioUnit of its first key.
type pair struct {
	a, b   int // job indexes
	rounds int
	cmp    []comparison
}

type comparison struct {
	keyA, unitA, keyB, unitB, ratioUnit string
}

func pairs() []pair {
	const host, dbos = "./host", "./bench/dbospeer"
	const bd, dh = "./plugins/badgerstore/badgerdriver", "./host/driverhost"
	var commits []comparison
	for _, n := range []int{1, 16, 64} {
		commits = append(commits, comparison{keyA: fmt.Sprintf("%s BenchmarkCommit/badgerstore/threads=%d", dh, n), unitA: "commits/s",
			keyB: fmt.Sprintf("%s BenchmarkCommit/threads=%d", bd, n), unitB: "commits/s", ratioUnit: "ratio:inproc"})
	}
	return []pair{{a: 12, b: 0, rounds: 4, cmp: commits}, {a: 6, b: 7, rounds: 6, cmp: []comparison{
		{keyA: host + " BenchmarkPgRunsEndToEnd/hosts=1/clients=64", unitA: "runs/s", keyB: dbos + " BenchmarkDBOSOneStepWorkflow/concurrency=64", unitB: "runs/s", ratioUnit: "ratio:peer"},
		{keyA: host + " BenchmarkPgRunsEndToEnd/hosts=3/clients=64", unitA: "runs/s", keyB: dbos + " BenchmarkDBOSOneStepWorkflow/concurrency=64", unitB: "runs/s", ratioUnit: "ratio:peer"},
	}}}
}

func (p pair) run(jobs []job, res results, exec1 func(job, results) error) error {
	var rounds []results
	for i := range p.rounds {
		r := results{}
		order := []int{p.a, p.b}
		if i%2 == 1 {
			order = []int{p.b, p.a}
		}
		for _, j := range order {
			if err := exec1(jobs[j], r); err != nil {
				return err
			}
		}
		rounds = append(rounds, r)
	}
	medianOf(rounds, res)
	for _, c := range p.cmp {
		var ratios []float64
		for _, r := range rounds {
			ratios = append(ratios, get(r, c.keyA, c.unitA)/get(r, c.keyB, c.unitB))
		}
		if res[c.keyA] == nil {
			res[c.keyA] = map[string]float64{}
		}
		res[c.keyA][c.ratioUnit] = median(ratios)
	}
	return nil
}

// medianOf sets in res every figure of the rounds to its median.
func medianOf(rounds []results, res results) {
	all := map[string]map[string][]float64{}
	for _, r := range rounds {
		for k, units := range r {
			if all[k] == nil {
				all[k] = map[string][]float64{}
			}
			for u, v := range units {
				all[k][u] = append(all[k][u], v)
			}
		}
	}
	for k, units := range all {
		res[k] = map[string]float64{}
		for u, vs := range units {
			res[k][u] = median(vs)
		}
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	return s[len(s)/2]
}

func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	goVersion := runtime.Version()
	if b, err := exec.Command("go", "env", "GOVERSION").Output(); err == nil {
		goVersion = strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d CPUs (%s), %s/%s, %s", runtime.NumCPU(), cpu, runtime.GOOS, runtime.GOARCH, goVersion)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

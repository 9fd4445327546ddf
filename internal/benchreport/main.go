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
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// job is one `go test -bench` command.
type job struct {
	pkg, bench, benchtime string
}

func (j job) args() []string {
	return []string{"test", "-run", "^$", "-bench", j.bench, "-benchtime", j.benchtime, "-count", "1", "-timeout", "60m", j.pkg}
}

func (j job) String() string {
	return fmt.Sprintf("go test -run '^$' -bench '%s' -benchtime %s %s", j.bench, j.benchtime, j.pkg)
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
	flag.Parse()
	jobs := []job{
		{"./plugins/badgerstore/badgerdriver", "BenchmarkCommit", *scale},
		{"./host/driverhost", ".", *scale},
		{"./host/wasm", "Decide", "100000x"},
		{"./host/wasm", "Load|Instance", "10x"},
		{"./host", "RunsEndToEnd|StepOverhead|MemoryPerQueued", *scale},
		{"./host", "Recovery", "1x"},
	}
	res := results{}
	start := time.Now()
	load0 := loadavg()
	for _, j := range jobs {
		fmt.Fprintln(os.Stderr, "==>", j)
		cmd := exec.Command("go", j.args()...)
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		err := cmd.Run()
		parse(&buf, j.pkg, res, os.Stderr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchreport: %s: %v\n", j, err)
			os.Exit(1)
		}
	}
	var b strings.Builder
	writeReport(&b, res, jobs, machine(), start, time.Since(start), load0, loadavg())
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "wrote", *out)
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

// Command agenthost-loadgen puts load on an agenthost server and soaks it.
//
//	agenthost-loadgen load --addr http://127.0.0.1:7070 [--seed N] [--threads T] [--workers W] [--n N] [--out FILE]
//	agenthost-loadgen soak [--profile short|steps-short|full|NEMESIS] [--seed N] [--dir DIR] [--strict-steps]
//	agenthost-loadgen closed --addr URL [--clients N] [--runs N] [--duration D] [--per-thread N] [--client wire|net/http] [--one-request] [--cpuprofile FILE]
//
// load submits inputs over HTTP across many threads with a mix of hints and
// idempotency keys, retrying with the same key after errors and timeouts,
// and writes every accepted submission (key, thread, run id, input id) as
// one JSON line to --out. soak builds agenthost, serves it on badgerstore
// under that load, kills the server and its driver with SIGKILL at random
// moments, and checks the outcome over HTTP (docs/soak.md). Both print the
// seed, which replays the choices. closed measures a deployment: N
// clients, each submitting one input with an idempotency key and waiting
// for its answer (GET result?wait=) before the next; it reports runs/s and
// the p50, p90 and p99 of submit-to-answer latency. Each of its clients
// keeps its own HTTP/1.1 connection alive and reads and writes it itself
// (--client net/http: Go's http.Client instead), so that the generator's
// CPU, which a shared machine takes from the server, stays small.
// --one-request submits with ?wait= instead, one request per run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/agenthost/agenthost/soak"
)

func main() { os.Exit(main1(os.Args[1:], os.Stdout, os.Stderr)) }

func main1(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: agenthost-loadgen load|soak|closed [flags]")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "load":
		return runLoad(ctx, args[1:], stdout, stderr)
	case "soak":
		return runSoak(ctx, args[1:], stdout, stderr)
	case "closed":
		return runClosed(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "agenthost-loadgen: unknown command %q (load, soak, closed)\n", args[0])
	return 2
}

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "http://127.0.0.1:7070", "server base URL; several hosts of one store comma-separated (requests take turns, and skip a host that cannot be reached)")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of every choice")
	threads := fs.Int("threads", 16, "threads")
	workers := fs.Int("workers", 8, "concurrent clients")
	n := fs.Int("n", 1000, "accepted submissions to make, at least")
	pause := fs.Duration("pause", 20*time.Millisecond, "longest pause of a client between submissions")
	out := fs.String("out", "", "file for the accepted submissions, one JSON line each (default: none)")
	if fs.Parse(args) != nil {
		return 2
	}
	fmt.Fprintf(stdout, "seed %d\n", *seed)
	bases := strings.Split(*addr, ",")
	c := soak.NewClient(bases[0])
	c.More = bases[1:]
	l := soak.NewLoad(c, soak.LoadConfig{Seed: *seed, Threads: *threads, Workers: *workers, Target: *n, Pause: *pause, DupRate: 0.05})
	start := time.Now()
	l.Run(ctx)
	el := time.Since(start)
	subs := l.Submissions()
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		enc := json.NewEncoder(f)
		for _, s := range subs {
			enc.Encode(s)
		}
		if err := f.Close(); err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
	}
	ab, re, dups := l.Stats()
	fmt.Fprintf(stdout, "load seed=%d accepted=%d in %s (%.1f/s) retries=%d abandoned=%d duplicates=%d\n",
		*seed, len(subs), el.Round(time.Millisecond), float64(len(subs))/el.Seconds(), re, ab, dups)
	if errs := l.Errors(); len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintln(stderr, e)
		}
		fmt.Fprintf(stderr, "load FAILED: %d unexpected answers (seed %d)\n", len(errs), *seed)
		return 1
	}
	return 0
}

func runClosed(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("closed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "http://127.0.0.1:7070", "server base URL; several hosts of one store comma-separated (requests take turns)")
	clients := fs.Int("clients", 64, "concurrent clients, each waiting for its answer before its next input")
	runs := fs.Int("runs", 0, "stop after this many runs (0: --duration only)")
	duration := fs.Duration("duration", 10*time.Second, "stop after this long (0: --runs only)")
	perThread := fs.Int("per-thread", 50, "inputs a client sends to a thread before moving to a fresh one (0: one thread per client)")
	prefix := fs.String("prefix", fmt.Sprintf("closed-%d", time.Now().Unix()), "prefix of the threads and idempotency keys")
	token := fs.String("token", os.Getenv("AGENTHOST_TOKEN"), "bearer token (default: $AGENTHOST_TOKEN)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the load generator to this file (its own cost counts against a shared machine)")
	client := fs.String("client", "wire", "HTTP client: wire (each client's own kept-alive HTTP/1.1 connection, read and written by the client itself; http:// only) or net/http (Go's http.Client)")
	oneRequest := fs.Bool("one-request", false, "submit with ?wait= (POST .../inputs?wait=), one request per run answered in time, rather than a submission then GET result?wait=")
	if fs.Parse(args) != nil {
		return 2
	}
	if *client != "wire" && *client != "net/http" {
		fmt.Fprintf(stderr, "closed: --client %q: wire or net/http\n", *client)
		return 2
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(stderr, "closed: --cpuprofile:", err)
			return 2
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	bases := strings.Split(*addr, ",")
	c := soak.NewClient(bases[0])
	c.More = bases[1:]
	c.Token = *token
	st, err := soak.ClosedLoop{Clients: *clients, Runs: *runs, Duration: *duration, PerThread: *perThread, Prefix: *prefix, NetHTTP: *client == "net/http", OneRequest: *oneRequest}.Run(ctx, c)
	form := ""
	if *oneRequest {
		form = " one-request"
	}
	fmt.Fprintf(stdout, "closed clients=%d%s %s\n", *clients, form, st)
	if err != nil {
		fmt.Fprintln(stderr, "closed:", err)
		return 1
	}
	return 0
}

func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	profile := fs.String("profile", "short", "profile: short, steps-short, full, or a nemesis (pause, postgres, diskfull, each also -short)")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of every choice")
	dir := fs.String("dir", "", "folder for the data and the server's log (default: a temporary one, removed when the soak passes)")
	bin := fs.String("bin", "", "agenthost binary (default: build one)")
	strict := fs.Bool("strict-steps", false, "fail on any tool call made again after its result was committed, and when the server keeps no durable steps to tell (default: only where it keeps them)")
	if fs.Parse(args) != nil {
		return 2
	}
	if np, ok := soak.NemesisProfiles[*profile]; ok {
		return runNemesis(ctx, np, *seed, *dir, *bin, stdout, stderr)
	}
	p, ok := soak.Profiles[*profile]
	if !ok {
		fmt.Fprintf(stderr, "agenthost-loadgen: no profile %q (short, steps-short, full, or a nemesis: %s)\n", *profile, strings.Join(nemesisNames(), ", "))
		return 2
	}
	fmt.Fprintf(stdout, "seed %d\n", *seed)
	sum, err := soak.Run(ctx, soak.Options{Profile: p, Seed: *seed, Dir: *dir, Bin: *bin, Log: stderr, StrictSteps: *strict})
	if err != nil {
		fmt.Fprintf(stderr, "soak FAILED (seed %d): %v\n", *seed, err)
		return 1
	}
	for i, pr := range sum.Problems {
		if i == 50 {
			fmt.Fprintf(stderr, "… and %d more\n", len(sum.Problems)-50)
			break
		}
		fmt.Fprintln(stderr, "soak:", pr)
	}
	fmt.Fprintln(stdout, sum.Line())
	if len(sum.Problems) > 0 {
		fmt.Fprintf(stderr, "soak FAILED: replay with: go run ./cmd/agenthost-loadgen soak -profile %s -seed %d\n", *profile, *seed)
		return 1
	}
	return 0
}

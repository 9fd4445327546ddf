package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// Profile sizes a soak.
type Profile struct {
	Name         string
	ServerKills  int           // SIGKILLs of the server, at least
	DriverKills  int           // SIGKILLs of the driver subprocess alone, at least
	Accepted     int           // accepted submissions, at least
	Threads      int           // threads submitted to
	Workers      int           // concurrent clients
	Pause        time.Duration // longest pause of a client between submissions
	KillEvery    [2]time.Duration
	BadEvery     time.Duration // one bad request (or slow client) per interval
	MaxDuration  time.Duration // the load phase fails if the targets are not met by then
	ResultWait   time.Duration // bound on the final wait for results
	MaxBodyBytes int
	// ToolSteps > 0 makes every run call a tool of the test MCP server in
	// that many steps before it answers; the tool logs the idempotency key
	// of every execution, and the soak counts the calls made again.
	ToolSteps int
}

// Profiles are the named profiles: "short" for `make test`, "full" for
// `make soak` (runs of three tool-calling steps), "steps-short" the short
// one with those runs.
var Profiles = map[string]Profile{
	"short": {Name: "short", ServerKills: 5, DriverKills: 3, Accepted: 600, Threads: 24, Workers: 12,
		Pause: 30 * time.Millisecond, KillEvery: [2]time.Duration{3 * time.Second, 7 * time.Second},
		BadEvery: 100 * time.Millisecond, MaxDuration: 4 * time.Minute, ResultWait: 2 * time.Minute, MaxBodyBytes: 64 << 10},
	"steps-short": {Name: "steps-short", ServerKills: 5, DriverKills: 3, Accepted: 600, Threads: 24, Workers: 12,
		Pause: 30 * time.Millisecond, KillEvery: [2]time.Duration{3 * time.Second, 7 * time.Second},
		BadEvery: 100 * time.Millisecond, MaxDuration: 4 * time.Minute, ResultWait: 2 * time.Minute, MaxBodyBytes: 64 << 10,
		ToolSteps: 3},
	"full": {Name: "full", ServerKills: 20, DriverKills: 10, Accepted: 5000, Threads: 64, Workers: 16,
		Pause: 30 * time.Millisecond, KillEvery: [2]time.Duration{2 * time.Second, 8 * time.Second},
		BadEvery: 50 * time.Millisecond, MaxDuration: 30 * time.Minute, ResultWait: 5 * time.Minute, MaxBodyBytes: 64 << 10,
		ToolSteps: 3},
}

// Options configure Run.
type Options struct {
	Profile Profile
	Seed    uint64
	// Bin is an agenthost binary; empty builds one into a temporary folder.
	Bin string
	// Dir holds the data and the server's log; empty makes a temporary one,
	// removed after a soak that passed.
	Dir string
	Log io.Writer
	// StrictSteps fails the soak on any tool call made again after its
	// result was committed, and when the server keeps no durable steps to
	// tell. Without it, redone calls fail the soak only where the server
	// serves committed steps (GET /v1/runs/{id}/steps) and a run has one.
	StrictSteps bool
}

// Summary is the outcome of a soak.
type Summary struct {
	Seed                     uint64
	Profile                  string
	Accepted                 int
	ServerKills, DriverKills int
	Lost                     int
	Elapsed                  time.Duration // the load phase
	Throughput               float64       // accepted submissions per second of the load phase
	P50, P99                 time.Duration // submit to answer
	Report                   *Report
	BadSent, BadSkipped      int
	SlowClients              int
	Failed, Unasked          int // failed inputs; those that did not ask the model to fail
	Abandoned, Retries, Dups int
	Tools                    *ToolReport // profiles with ToolSteps
	Problems                 []string
}

// Line is the one-line summary.
func (s *Summary) Line() string {
	verdict := "PASS"
	if len(s.Problems) > 0 {
		verdict = "FAIL"
	}
	return fmt.Sprintf("soak %s profile=%s seed=%d accepted=%d kills_survived=server:%d,driver:%d inputs_lost=%d %s%s failed=%d(unasked:%d) throughput=%.1f/s p50=%s p99=%s bad_inputs=%d slow_clients=%d retries=%d abandoned=%d",
		verdict, s.Profile, s.Seed, s.Accepted, s.ServerKills, s.DriverKills, s.Lost, s.Report.twice(), s.Tools.field(), s.Failed, s.Unasked, s.Throughput,
		s.P50.Round(time.Millisecond), s.P99.Round(time.Millisecond), s.BadSent, s.SlowClients, s.Retries, s.Abandoned)
}

// Run runs one soak: builds agenthost, serves it on badgerstore under load,
// kills the server and the driver at random moments, restarts the server,
// and checks the outcome over HTTP. It leaves no process behind.
func Run(ctx context.Context, o Options) (sum *Summary, err error) {
	p := o.Profile
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(logw, "soak: "+format+"\n", args...)
	}
	sum = &Summary{Seed: o.Seed, Profile: p.Name}
	logf("seed %d, profile %s (replay: go run ./cmd/agenthost-loadgen soak -profile %s -seed %d)", o.Seed, p.Name, p.Name, o.Seed)
	Subreaper()

	rg, err := newRig(ctx, rigOptions{Dir: o.Dir, Bin: o.Bin, Prefix: "agenthost-soak-", ToolSteps: p.ToolSteps, Logf: logf})
	if err != nil {
		return sum, err
	}
	defer func() { rg.finish(err == nil && len(sum.Problems) == 0) }()
	defer func() { sum.Problems = append(sum.Problems, rg.stop()...) }()
	addr, err := FreeAddr()
	if err != nil {
		return sum, err
	}
	srv := rg.server("server", "data", []string{fmt.Sprintf("AGENTHOST_MAX_BODY_BYTES=%d", p.MaxBodyBytes)}, nil)
	srv.Addr = addr
	c := NewClient("http://" + addr)
	if err := srv.Start(ctx, c); err != nil {
		return sum, err
	}
	logf("serving on %s, data %s", addr, srv.Data)

	load := NewLoad(c, LoadConfig{Seed: o.Seed, Threads: p.Threads, Workers: p.Workers, Pause: p.Pause, DupRate: 0.05})
	bad := &BadInputs{C: c, Addr: addr, MaxBody: p.MaxBodyBytes, Load: load}
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	var wg sync.WaitGroup
	wg.Add(3)
	start := time.Now()
	go func() { defer wg.Done(); load.Run(lctx) }()
	badStop := make(chan struct{})
	go func() { defer wg.Done(); bad.Run(lctx, o.Seed, p.BadEvery, badStop) }()
	var sampled int
	var sampleErrs []string
	go func() {
		defer wg.Done()
		sampled, sampleErrs = sampleActive(lctx, c, load, o.Seed, badStop)
	}()

	// Chaos: kills at random moments until the targets are met.
	rng := rand.New(rand.NewPCG(o.Seed, 0xc4a05))
	var chaosErr error
	var faults []Fault
	var marks []logMark // of the tool-call logs, at each fault
	deadline := start.Add(p.MaxDuration)
	for chaosErr == nil {
		if sum.ServerKills >= p.ServerKills && sum.DriverKills >= p.DriverKills && load.Accepted() >= p.Accepted {
			break
		}
		if time.Now().After(deadline) {
			chaosErr = fmt.Errorf("targets not met in %s: %d/%d server kills, %d/%d driver kills, %d/%d accepted",
				p.MaxDuration, sum.ServerKills, p.ServerKills, sum.DriverKills, p.DriverKills, load.Accepted(), p.Accepted)
			break
		}
		sleep(ctx, p.KillEvery[0]+time.Duration(rng.Int64N(int64(p.KillEvery[1]-p.KillEvery[0]))))
		if ctx.Err() != nil {
			chaosErr = ctx.Err()
			break
		}
		needS, needD := p.ServerKills-sum.ServerKills, p.DriverKills-sum.DriverKills
		killDriver := needD > 0 && (needS <= 0 || rng.IntN(needS+needD) < needD)
		if needS <= 0 && needD <= 0 {
			killDriver = rng.IntN(3) == 0
		}
		t0 := time.Now()
		if killDriver {
			pid, err := srv.KillDriver()
			if err != nil {
				chaosErr = fmt.Errorf("driver kill: %w", err)
				break
			}
			sum.DriverKills++
			if rg.Tools != "" {
				n := srv.Starts()
				marks = append(marks, markLog(t0, rg.CallsLog("server", n), n-1))
			}
			logf("kill -9 driver %d (%d/%d), accepted %d", pid, sum.DriverKills, p.DriverKills, load.Accepted())
			// The server must stay up and restart its driver.
			if err := waitDriver(ctx, srv, pid); err != nil {
				chaosErr = err
			}
			faults = append(faults, Fault{Kind: "driver kill", Start: t0, End: time.Now()})
			continue
		}
		pid := srv.Pid()
		if err := srv.Kill(); err != nil {
			chaosErr = fmt.Errorf("server kill: %w", err)
			break
		}
		sum.ServerKills++
		logf("kill -9 server %d (%d/%d), accepted %d", pid, sum.ServerKills, p.ServerKills, load.Accepted())
		// Down for a random moment, as a supervisor would leave it.
		sleep(ctx, time.Duration(rng.Int64N(int64(500*time.Millisecond))))
		t1 := time.Now()
		if err := srv.Start(ctx, c); err != nil {
			chaosErr = fmt.Errorf("restart after kill %d: %w", sum.ServerKills, err)
			break
		}
		faults = append(faults, Fault{Kind: "server kill", Start: t0, End: time.Now()})
		marks = append(marks, logMark{At: t0, File: srv.Starts() - 1})
		logf("restarted in %s", time.Since(t1).Round(time.Millisecond))
	}
	load.Stop()
	close(badStop)
	wg.Wait()
	sum.Elapsed = time.Since(start)
	sum.Accepted = load.Accepted()
	sum.Throughput = float64(sum.Accepted) / sum.Elapsed.Seconds()
	sum.Abandoned, sum.Retries, sum.Dups = load.Stats()
	if chaosErr != nil {
		sum.Problems = append(sum.Problems, chaosErr.Error())
	}
	sum.Problems = append(sum.Problems, sampleErrs...)
	logf("sampled the runs of a thread %d times during the load", sampled)
	if ctx.Err() != nil {
		return sum, fmt.Errorf("interrupted after %s of load: %w", sum.Elapsed.Round(time.Second), ctx.Err())
	}
	if !srv.Running() {
		if err := srv.Start(ctx, c); err != nil {
			sum.Problems = append(sum.Problems, "final start: "+err.Error())
			return sum, nil
		}
	}
	logf("load stopped after %s: %d accepted; checking", sum.Elapsed.Round(time.Second), sum.Accepted)

	bad.All(ctx, o.Seed)
	rep := Check(ctx, c, load.Submissions(), load.Threads(), faults, p.ResultWait)
	sum.Report = rep
	sum.Lost = rep.Lost
	sum.Failed, sum.Unasked = rep.Failed, rep.Unasked
	sum.P50, sum.P99 = Percentile(rep.Latencies, 50), Percentile(rep.Latencies, 99)
	sum.BadSent, sum.BadSkipped, sum.SlowClients = bad.Counts()
	for _, e := range load.Errors() {
		sum.Problems = append(sum.Problems, e.Error())
	}
	for _, e := range bad.Errors() {
		sum.Problems = append(sum.Problems, e.Error())
	}
	sum.Problems = append(sum.Problems, rep.Problems...)
	if !srv.Running() {
		sum.Problems = append(sum.Problems, "the server died during the checks")
	}
	logf("results: %d answered, %d absorbed, %d failed, %d interrupted (%d of those answered by a later run); %d runs; %d keys re-posted; bad inputs %d answered as documented, %d while the server was away",
		rep.Answered, rep.Absorbed, rep.Failed, rep.Stopped, rep.Carried, rep.Runs, rep.Keys, sum.BadSent, sum.BadSkipped)
	errs := make([]string, 0, len(rep.Errors))
	for e := range rep.Errors {
		errs = append(errs, e)
	}
	sort.Strings(errs)
	for _, e := range errs {
		logf("failed inputs: %d with error %q", rep.Errors[e], e)
	}
	if d := logTail(srv.LogPath, "panic"); d != "" {
		sum.Problems = append(sum.Problems, "server log: "+d)
	}
	if rg.Tools != "" {
		var logs []string
		for n := 1; n <= srv.Starts(); n++ {
			logs = append(logs, rg.CallsLog("server", n))
		}
		sum.Tools = checkTools(ctx, c, logs, marks, p.ToolSteps, rep.Completed)
		t := sum.Tools
		sum.Problems = append(sum.Problems, t.Problems...)
		logf("tools: %d calls made, %d keys, %d made again (%d across a fault, %d with none between); steps served: %v, durable: %v; redone %d, in flight at a fault %d",
			t.Executions, t.Keys, t.Reexecuted, t.Across, t.Within, t.Steps, t.Durable, t.Redone, t.InFlight)
		switch {
		case t.Durable || o.StrictSteps:
			sum.Problems = append(sum.Problems, t.RedoneCalls...)
			if !t.Durable {
				sum.Problems = append(sum.Problems, "strict steps: the server keeps no durable steps (GET /v1/runs/{id}/steps), so redone calls cannot be told")
			}
		}
	}
	return sum, nil
}

// sampleActive reads the runs of a random thread every 100ms until stop
// and reports every moment a thread had more than one active run.
func sampleActive(ctx context.Context, c *Client, load *Load, seed uint64, stop <-chan struct{}) (n int, problems []string) {
	rng := rand.New(rand.NewPCG(seed, 0x5a))
	for {
		select {
		case <-stop:
			return n, problems
		case <-ctx.Done():
			return n, problems
		case <-time.After(100 * time.Millisecond):
		}
		t := load.ThreadID(rng.IntN(load.cfg.Threads))
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rs, err := c.ThreadRuns(rctx, t)
		cancel()
		if err != nil {
			continue // not there yet, or the server is away
		}
		n++
		var active []string
		for _, r := range rs {
			if r.State == "active" {
				active = append(active, r.ID)
			}
		}
		if len(active) > 1 {
			problems = append(problems, fmt.Sprintf("thread %s had %d active runs at once: %v", t, len(active), active))
		}
	}
}

// waitDriver waits until the server runs a new driver instead of pid; the
// host restarts it on its next store call.
func waitDriver(ctx context.Context, srv *Server, old int) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if !srv.Running() {
			return errors.New("the server died when its driver was killed")
		}
		if pid, err := srv.DriverPid(); err == nil && pid != old {
			srv.NoteDriver()
			return nil
		}
		sleep(ctx, 50*time.Millisecond)
	}
	return fmt.Errorf("no new driver 30s after killing driver %d", old)
}

// logTail returns the first line of the log at path holding word.
func logTail(path, word string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, word) {
			return l
		}
	}
	return ""
}

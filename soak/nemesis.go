package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
)

// The nemeses: faults other than a kill, each run under load by RunNemesis.
const (
	// NemesisPause stops one host of three on pgstore with SIGSTOP (its
	// whole process group, driver included, as a paused machine) for longer
	// than its lease, then resumes it: its threads move to the others, and
	// its writes must be fenced.
	NemesisPause = "pause"
	// NemesisPostgres crashes PostgreSQL and restarts it at once, or stops
	// it for seconds, under three hosts.
	NemesisPostgres = "postgres"
	// NemesisDiskFull fills the filesystem of a badgerstore host's store (a
	// tmpfs mounted for the purpose) and frees it again.
	NemesisDiskFull = "diskfull"
)

// ErrNeedsRoot: the disk-full nemesis mounts a tmpfs, which needs root
// with the right to mount (not granted in an unprivileged container).
var ErrNeedsRoot = errors.New("the disk-full nemesis mounts a tmpfs: it needs root")

// NemesisProfile sizes a nemesis run.
type NemesisProfile struct {
	Name   string
	Kind   string
	Rounds int // faults, at least
	// Accepted submissions to make in all, at least.
	Accepted, Threads, Workers int
	// Hold is how long one fault lasts (pause, stop, disk full).
	Hold     time.Duration
	LeaseTTL time.Duration // of the hosts on pgstore
	// Every is the range of the time between the end of a fault and the
	// next one.
	Every       [2]time.Duration
	MaxDuration time.Duration // of the load phase
	ResultWait  time.Duration
}

// NemesisProfiles are the nemeses as `make soak PROFILE=NAME` profiles;
// the -short ones are what `go test ./soak` runs.
var NemesisProfiles = map[string]NemesisProfile{
	"pause": {Name: "pause", Kind: NemesisPause, Rounds: 6, Accepted: 3000, Threads: 48, Workers: 12,
		Hold: 5 * time.Second, LeaseTTL: 2 * time.Second, Every: [2]time.Duration{3 * time.Second, 8 * time.Second},
		MaxDuration: 15 * time.Minute, ResultWait: 3 * time.Minute},
	"pause-short": {Name: "pause-short", Kind: NemesisPause, Rounds: 1, Accepted: 300, Threads: 16, Workers: 8,
		Hold: 5 * time.Second, LeaseTTL: 2 * time.Second, Every: [2]time.Duration{2 * time.Second, 3 * time.Second},
		MaxDuration: 4 * time.Minute, ResultWait: 2 * time.Minute},
	"postgres": {Name: "postgres", Kind: NemesisPostgres, Rounds: 8, Accepted: 3000, Threads: 48, Workers: 12,
		Hold: 5 * time.Second, LeaseTTL: 2 * time.Second, Every: [2]time.Duration{3 * time.Second, 8 * time.Second},
		MaxDuration: 15 * time.Minute, ResultWait: 3 * time.Minute},
	"postgres-short": {Name: "postgres-short", Kind: NemesisPostgres, Rounds: 2, Accepted: 300, Threads: 16, Workers: 8,
		Hold: 3 * time.Second, LeaseTTL: 2 * time.Second, Every: [2]time.Duration{2 * time.Second, 3 * time.Second},
		MaxDuration: 4 * time.Minute, ResultWait: 2 * time.Minute},
	"diskfull": {Name: "diskfull", Kind: NemesisDiskFull, Rounds: 6, Accepted: 3000, Threads: 48, Workers: 12,
		Hold: 5 * time.Second, Every: [2]time.Duration{3 * time.Second, 8 * time.Second},
		MaxDuration: 15 * time.Minute, ResultWait: 3 * time.Minute},
	"diskfull-short": {Name: "diskfull-short", Kind: NemesisDiskFull, Rounds: 1, Accepted: 300, Threads: 16, Workers: 8,
		Hold: 3 * time.Second, Every: [2]time.Duration{2 * time.Second, 3 * time.Second},
		MaxDuration: 4 * time.Minute, ResultWait: 2 * time.Minute},
}

// NemesisOptions configure RunNemesis.
type NemesisOptions struct {
	Profile NemesisProfile
	Seed    uint64
	// Bin is an agenthost binary; empty builds one.
	Bin string
	// Dir holds the data and the logs; empty makes a temporary one,
	// removed after a run that passed.
	Dir string
	Log io.Writer
}

// NemesisSummary is the outcome of RunNemesis.
type NemesisSummary struct {
	Seed                   uint64
	Profile                string
	Accepted, Rounds, Lost int
	Elapsed                time.Duration
	Throughput             float64
	P50, P99               time.Duration
	Failed, Unasked        int
	Abandoned, Retries     int
	Samples                int // readings of the active runs during the load
	LeasesLost             int // pause: leases the paused host found lost on waking
	Downtime               time.Duration
	AcceptedAfter          int // accepted after the last fault ended
	StoreErrors            int // diskfull: lines of the host's log naming the full disk
	Report                 *Report
	Problems               []string
}

// Line is the one-line summary, with the figures of the soak's.
func (s *NemesisSummary) Line() string {
	verdict := "PASS"
	if len(s.Problems) > 0 {
		verdict = "FAIL"
	}
	return fmt.Sprintf("nemesis %s profile=%s seed=%d accepted=%d faults=%d fault_time=%s inputs_lost=%d %s failed=%d(unasked:%d) throughput=%.1f/s p50=%s p99=%s retries=%d abandoned=%d accepted_after_last_fault=%d active_samples=%d leases_lost=%d store_errors_logged=%d",
		verdict, s.Profile, s.Seed, s.Accepted, s.Rounds, s.Downtime.Round(100*time.Millisecond), s.Lost, s.Report.twice(), s.Failed, s.Unasked, s.Throughput,
		s.P50.Round(time.Millisecond), s.P99.Round(time.Millisecond), s.Retries, s.Abandoned, s.AcceptedAfter, s.Samples, s.LeasesLost, s.StoreErrors)
}

// RunNemesis runs one nemesis profile under load and checks, as the soak
// does, that nothing accepted was lost, every key resolves, no thread ever
// had two active runs, and the service resumed after the last fault. It
// leaves no process (or mount) behind.
func RunNemesis(ctx context.Context, o NemesisOptions) (sum *NemesisSummary, err error) {
	p := o.Profile
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}
	logf := func(format string, args ...any) { fmt.Fprintf(logw, "nemesis: "+format+"\n", args...) }
	sum = &NemesisSummary{Seed: o.Seed, Profile: p.Name}
	if p.Kind == NemesisDiskFull && os.Geteuid() != 0 {
		return sum, ErrNeedsRoot
	}
	logf("seed %d, profile %s (replay: go run ./cmd/agenthost-loadgen soak -profile %s -seed %d)", o.Seed, p.Name, p.Name, o.Seed)
	Subreaper()
	rg, err := newRig(ctx, rigOptions{Dir: o.Dir, Bin: o.Bin, Prefix: "agenthost-nemesis-", Logf: logf})
	if err != nil {
		return sum, err
	}
	dir := rg.Dir
	defer func() { rg.finish(err == nil && len(sum.Problems) == 0) }()

	var (
		srvs    []*Server
		st      sharedStore
		cluster *pgtest.Cluster
		mnt     string
	)
	// Deferred in this order: servers first, then the database and the
	// mount they used.
	defer func() {
		if mnt != "" {
			if err := unmount(mnt); err != nil {
				sum.Problems = append(sum.Problems, err.Error())
			}
		}
	}()
	defer func() {
		if cluster != nil {
			cluster.Stop()
		}
	}()
	defer func() {
		if st != nil {
			st.Close(context.Background())
		}
	}()
	defer func() { sum.Problems = append(sum.Problems, rg.stop()...) }()

	switch p.Kind {
	case NemesisPause, NemesisPostgres:
		if cluster, err = pgtest.StartWith("", pgtest.Options{}); err != nil {
			return sum, err
		}
		if err := cluster.CreateDatabase(ctx, "agenthost_nemesis"); err != nil {
			return sum, err
		}
		url := cluster.URL("agenthost_nemesis")
		cfg, err := pgdriver.ParseConfig(map[string]string{"url": url})
		if err != nil {
			return sum, err
		}
		if st, err = pgdriver.Open(ctx, cfg); err != nil {
			return sum, err
		}
		for i := range 3 {
			name := fmt.Sprintf("host%d", i)
			srvs = append(srvs, rg.server(name, name, nil,
				[]string{"--store", "pgstore", "--store-url", url, "--lease-ttl", p.LeaseTTL.String(), "--poll-interval", (p.LeaseTTL / 4).String(), "--host-name", name}))
		}
	case NemesisDiskFull:
		mnt = filepath.Join(dir, "store")
		if err := os.MkdirAll(mnt, 0o700); err != nil {
			return sum, err
		}
		if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=512m,mode=0700"); err != nil {
			mnt = ""
			if errors.Is(err, syscall.EPERM) {
				// root without the right to mount, as in an unprivileged
				// container: the same as not being root.
				return sum, fmt.Errorf("%w: mounting a tmpfs for the store: %v", ErrNeedsRoot, err)
			}
			return sum, fmt.Errorf("mounting a tmpfs for the store: %w", err)
		}
		config := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(config, []byte("store: badgerstore\nstore_config:\n  dir: "+filepath.Join(mnt, "badger")+"\n"), 0o644); err != nil {
			return sum, err
		}
		srvs = append(srvs, rg.server("server", "data", nil, []string{"--config", config}))
	default:
		return sum, fmt.Errorf("no nemesis %q (%s, %s, %s)", p.Kind, NemesisPause, NemesisPostgres, NemesisDiskFull)
	}
	bases := make([]string, len(srvs))
	for i, s := range srvs {
		if s.Addr, err = FreeAddr(); err != nil {
			return sum, err
		}
		bases[i] = "http://" + s.Addr
		if err := s.Start(ctx, NewClient(bases[i])); err != nil {
			return sum, fmt.Errorf("host %d: %w", i, err)
		}
		logf("host%d serving on %s", i, s.Addr)
	}
	c := NewClient(bases[0])
	c.More = bases[1:]

	load := NewLoad(c, LoadConfig{Seed: o.Seed, Threads: p.Threads, Workers: p.Workers, Pause: 30 * time.Millisecond, DupRate: 0.05})
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	var wg, swg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	go func() { defer wg.Done(); load.Run(lctx) }()
	var sampleProblems []string
	swg.Add(1)
	stopSampling := make(chan struct{})
	go func() {
		defer swg.Done()
		if st != nil {
			sum.Samples, sampleProblems = sampleStore(sctx, st)
		} else {
			sum.Samples, sampleProblems = sampleActive(sctx, c, load, o.Seed, stopSampling)
		}
	}()

	rng := rand.New(rand.NewPCG(o.Seed, 0x6e656d))
	deadline := start.Add(p.MaxDuration)
	var phaseErr error
	lastEnd := 0
	var faults []Fault
	for round := 0; round < p.Rounds && phaseErr == nil; round++ {
		sleep(ctx, p.Every[0]+time.Duration(rng.Int64N(int64(p.Every[1]-p.Every[0]))))
		if ctx.Err() != nil {
			phaseErr = ctx.Err()
			break
		}
		t0 := time.Now()
		switch p.Kind {
		case NemesisPause:
			phaseErr = pauseHost(ctx, srvs[0], bases[0], p.Hold, sum, logf)
		case NemesisPostgres:
			phaseErr = haltPostgres(ctx, cluster, round, p.Hold, logf)
		case NemesisDiskFull:
			phaseErr = fillDisk(ctx, mnt, p.Hold, logf)
		}
		sum.Downtime += time.Since(t0)
		faults = append(faults, Fault{Kind: p.Kind, Start: t0, End: time.Now()})
		sum.Rounds++
		lastEnd = load.Accepted()
		logf("fault %d/%d over after %s, accepted %d", sum.Rounds, p.Rounds, time.Since(t0).Round(100*time.Millisecond), lastEnd)
		if time.Now().After(deadline) && phaseErr == nil {
			phaseErr = fmt.Errorf("only %d faults in %s", sum.Rounds, p.MaxDuration)
		}
	}
	// The service resumes: the load goes on past its target and well past
	// the last fault.
	want := max(p.Accepted, lastEnd+2*p.Threads)
	for phaseErr == nil && load.Accepted() < want {
		if time.Now().After(deadline) {
			phaseErr = fmt.Errorf("targets not met in %s: %d/%d accepted, %d of them after the last fault", p.MaxDuration, load.Accepted(), want, load.Accepted()-lastEnd)
			break
		}
		sleep(ctx, 50*time.Millisecond)
	}
	load.Stop()
	wg.Wait()
	sum.Elapsed = time.Since(start)
	sum.Accepted = load.Accepted()
	sum.AcceptedAfter = sum.Accepted - lastEnd
	sum.Throughput = float64(sum.Accepted) / sum.Elapsed.Seconds()
	sum.Abandoned, sum.Retries, _ = load.Stats()
	scancel()
	close(stopSampling)
	swg.Wait()
	if phaseErr != nil {
		sum.Problems = append(sum.Problems, phaseErr.Error())
	}
	sum.Problems = append(sum.Problems, sampleProblems...)
	for _, e := range load.Errors() {
		sum.Problems = append(sum.Problems, e.Error())
	}
	if ctx.Err() != nil {
		return sum, fmt.Errorf("interrupted after %s of load: %w", sum.Elapsed.Round(time.Second), ctx.Err())
	}
	logf("load stopped after %s: %d accepted; checking", sum.Elapsed.Round(time.Second), sum.Accepted)

	rep := Check(ctx, c, load.Submissions(), load.Threads(), faults, p.ResultWait)
	sum.Report, sum.Lost = rep, rep.Lost
	sum.Failed, sum.Unasked = rep.Failed, rep.Unasked
	sum.P50, sum.P99 = Percentile(rep.Latencies, 50), Percentile(rep.Latencies, 99)
	sum.Problems = append(sum.Problems, rep.Problems...)
	logf("results: %d answered, %d absorbed, %d failed, %d interrupted (%d of those answered by a later run); %d runs; %d keys re-posted",
		rep.Answered, rep.Absorbed, rep.Failed, rep.Stopped, rep.Carried, rep.Runs, rep.Keys)
	for e, n := range rep.Errors {
		logf("failed inputs: %d with error %q", n, e)
	}
	if st != nil {
		for r, err := range listAll(ctx, st, record.StateActive) {
			if err != nil {
				sum.Problems = append(sum.Problems, err.Error())
				break
			}
			sum.Problems = append(sum.Problems, fmt.Sprintf("run %s of thread %s still active under %s after the checks", r.ID, r.ThreadID, r.Owner))
		}
	}
	switch p.Kind {
	case NemesisPause:
		if sum.LeasesLost < sum.Rounds {
			sum.Problems = append(sum.Problems, fmt.Sprintf("the paused host reported %d lost leases for %d pauses past its lease", sum.LeasesLost, sum.Rounds))
		}
	case NemesisDiskFull:
		sum.StoreErrors = countLines(srvs[0].LogPath, "no space left on device")
		if sum.StoreErrors == 0 {
			sum.Problems = append(sum.Problems, "the host's log never said the disk was full")
		}
		if n := countLines(srvs[0].LogPath, "fatal error"); n > 0 {
			sum.Problems = append(sum.Problems, fmt.Sprintf("the store driver crashed %d times on the full disk (%s) instead of refusing writes with an error", n, logTail(srvs[0].LogPath, "[signal")))
		}
	}
	for i, s := range srvs {
		if !s.Running() {
			sum.Problems = append(sum.Problems, fmt.Sprintf("host%d died", i))
		}
		if d := logTail(s.LogPath, "panic"); d != "" {
			sum.Problems = append(sum.Problems, fmt.Sprintf("host%d log: %s", i, d))
		}
	}
	return sum, nil
}

// sharedStore is the store the checks read directly (pgstore).
type sharedStore interface {
	driver.Driver
	driver.Leaser
}

// pauseHost stops srv's process group (the host and its driver) for hold,
// then resumes it, and waits until the host reports the lease it lost while
// stopped (it must not write under it: its commits are fenced).
func pauseHost(ctx context.Context, srv *Server, base string, hold time.Duration, sum *NemesisSummary, logf func(string, ...any)) error {
	before, err := metric(ctx, base, "agenthost_leases_lost_total")
	if err != nil {
		return fmt.Errorf("reading host0's metrics before the pause: %w", err)
	}
	pgid := srv.Pid()
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP host0: %w", err)
	}
	logf("SIGSTOP host0 (process group %d) for %s", pgid, hold)
	sleep(ctx, hold)
	if err := syscall.Kill(-pgid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT host0: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := metric(ctx, base, "agenthost_leases_lost_total")
		if err == nil && n > before {
			sum.LeasesLost += int(n - before)
			logf("host0 resumed and replaced its lost lease (%d lost in all)", int(n))
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("host0 did not report a lost lease within 1m of resuming after %s stopped (lease ttl shorter): %v", hold, err)
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// haltPostgres crashes the database and starts it again at once (even
// rounds), or stops it for hold (odd rounds).
func haltPostgres(ctx context.Context, c *pgtest.Cluster, round int, hold time.Duration, logf func(string, ...any)) error {
	if round%2 == 0 {
		if err := c.Halt("immediate"); err != nil {
			return err
		}
		logf("PostgreSQL crashed (pg_ctl stop -m immediate); restarting it")
	} else {
		if err := c.Halt("fast"); err != nil {
			return err
		}
		logf("PostgreSQL stopped for %s", hold)
		sleep(ctx, hold)
	}
	return c.Resume()
}

// fillDisk fills the filesystem at mnt, holds it full for hold, and frees
// it.
func fillDisk(ctx context.Context, mnt string, hold time.Duration, logf func(string, ...any)) error {
	path := filepath.Join(mnt, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			f.Close()
			return fmt.Errorf("filling %s: %w", mnt, err)
		}
	}
	f.Close()
	logf("filled %s (%d MiB written until ENOSPC) for %s", mnt, n>>20, hold)
	sleep(ctx, hold)
	return os.Remove(path)
}

// metric reads one counter from a host's /metrics.
func metric(ctx context.Context, base, name string) (float64, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, "GET", base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20) // a histogram's labels can make long lines
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no metric %s at %s", name, base)
}

// countLines counts the lines of the file at path holding word.
func countLines(path, word string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, word) {
			n++
		}
	}
	return n
}

// unmount unmounts mnt, waiting up to 30s for the killed processes that
// used it to let go of it.
func unmount(mnt string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command("umount", mnt).CombinedOutput()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("umount %s: %v %s", mnt, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

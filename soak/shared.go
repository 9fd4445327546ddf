package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

// SharedOptions configure RunShared.
type SharedOptions struct {
	Seed uint64
	// Hosts is how many `agenthost serve` processes share the store (3).
	Hosts int
	// StoreURL is the database all hosts use (pgstore).
	StoreURL string
	// Store reads the same data directly, for the checks made from the
	// durable records (a driver with leases, e.g. pgdriver opened on
	// StoreURL).
	Store interface {
		driver.Driver
		driver.Leaser
	}
	// Accepted submissions to make in all, at least; the victim is killed
	// once a third of them are in.
	Accepted, Threads, Workers int
	LeaseTTL                   time.Duration
	// Restart starts the victim again once its lease has expired (a new
	// lease): it must then get threads of its own and execute runs.
	Restart     bool
	MaxDuration time.Duration // of the load phase
	ResultWait  time.Duration
	Bin, Dir    string
	Log         io.Writer
}

// SharedSummary is the outcome of RunShared.
type SharedSummary struct {
	Accepted int
	Lost     int
	// Moved counts the victim's threads that another host owns at the end;
	// Owned is how many it owned when it was killed.
	Moved, Owned int
	// Recovered counts runs that ended at attempt 2 or later.
	Recovered int
	// Restarted counts the runs the restarted victim completed under its
	// new lease (or a later one, had it lost that), and RestartedThreads
	// the threads those leases own at the end (SharedOptions.Restart).
	Restarted, RestartedThreads int
	// Samples counts the readings of the active runs during the load.
	Samples  int
	Report   *Report
	Problems []string
}

// Line is the one-line summary.
func (s *SharedSummary) Line() string {
	verdict := "PASS"
	if len(s.Problems) > 0 {
		verdict = "FAIL"
	}
	return fmt.Sprintf("several-hosts %s accepted=%d lost=%d %s victim_threads=%d moved=%d recovered_runs=%d restarted_runs=%d restarted_threads=%d active_samples=%d",
		verdict, s.Accepted, s.Lost, s.Report.twice(), s.Owned, s.Moved, s.Recovered, s.Restarted, s.RestartedThreads, s.Samples)
}

// RunShared runs Hosts servers on one shared store under load through a
// client that spreads requests over them, kills one with SIGKILL (started
// again after its lease expired when Restart is set), and checks: nothing accepted is lost (over HTTP, through the
// survivors), never two active runs on a thread (read from the durable
// records all along), every key resolves, and the victim's threads moved to
// the survivors after its lease expired; restarted, it got threads back and
// executed runs under its new lease.
func RunShared(ctx context.Context, o SharedOptions) (sum *SharedSummary, err error) {
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}
	logf := func(format string, args ...any) { fmt.Fprintf(logw, "several-hosts: "+format+"\n", args...) }
	sum = &SharedSummary{}
	Subreaper()
	rg, err := newRig(ctx, rigOptions{Dir: o.Dir, Bin: o.Bin, Prefix: "agenthost-shared-", Logf: logf})
	if err != nil {
		return sum, err
	}
	defer func() { rg.finish(err == nil && len(sum.Problems) == 0) }()
	defer func() { sum.Problems = append(sum.Problems, rg.stop()...) }()
	srvs := make([]*Server, o.Hosts)
	bases := make([]string, o.Hosts)
	for i := range srvs {
		addr, err := FreeAddr()
		if err != nil {
			return sum, err
		}
		name := fmt.Sprintf("host%d", i)
		srvs[i] = rg.server(name, name, nil,
			[]string{"--store", "pgstore", "--store-url", o.StoreURL, "--lease-ttl", o.LeaseTTL.String(), "--poll-interval", (o.LeaseTTL / 4).String(), "--host-name", name})
		srvs[i].Addr = addr
		bases[i] = "http://" + addr
		if err := srvs[i].Start(ctx, NewClient(bases[i])); err != nil {
			return sum, fmt.Errorf("%s: %w", name, err)
		}
		logf("%s serving on %s", name, addr)
	}
	c := NewClient(bases[0])
	c.More = bases[1:]

	load := NewLoad(c, LoadConfig{Seed: o.Seed, Threads: o.Threads, Workers: o.Workers, Pause: 30 * time.Millisecond, DupRate: 0.05})
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	var wg, swg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); load.Run(lctx) }()
	var sampleProblems []string
	swg.Add(1)
	go func() {
		defer swg.Done()
		sum.Samples, sampleProblems = sampleStore(sctx, o.Store)
	}()

	// Kill the victim once a third of the load is in.
	victim := srvs[0]
	var victimEpoch int64
	var owned []string
	deadline := time.Now().Add(o.MaxDuration)
	var phaseErr error
	var faults []Fault
	for load.Accepted() < o.Accepted/3 && phaseErr == nil {
		if time.Now().After(deadline) {
			phaseErr = fmt.Errorf("only %d accepted in %s before the kill", load.Accepted(), o.MaxDuration)
		}
		sleep(ctx, 50*time.Millisecond)
	}
	if phaseErr == nil {
		victimEpoch, err = leaseOf(ctx, o.Store, "host0")
		if err != nil {
			phaseErr = err
		} else {
			owned = ownedBy(ctx, o.Store, load.Threads(), victimEpoch)
			pid := victim.Pid()
			// Its runs move once its lease lapses: the fault lasts until
			// the end of the load.
			faults = append(faults, Fault{Kind: "host kill", Start: time.Now(), End: time.Now().Add(o.MaxDuration)})
			if err := victim.Kill(); err != nil {
				phaseErr = fmt.Errorf("killing host0: %w", err)
			} else {
				logf("kill -9 host0 (pid %d, lease %d, owning %d threads) at %d accepted", pid, victimEpoch, len(owned), load.Accepted())
			}
		}
	}
	var restartEpoch int64
	var restartLoad time.Time // the load goes on at least until then
	if phaseErr == nil && o.Restart {
		// Once the victim's lease has expired and its threads moved, it
		// comes back with a new lease, and must get a share of the threads.
		for phaseErr == nil {
			if _, err := leaseOf(ctx, o.Store, "host0"); err != nil {
				break
			}
			if time.Now().After(deadline) {
				phaseErr = fmt.Errorf("host0's lease still live %s after the kill", o.MaxDuration)
			}
			sleep(ctx, 50*time.Millisecond)
		}
		if phaseErr == nil {
			if err := victim.Start(ctx, NewClient(bases[0])); err != nil {
				phaseErr = fmt.Errorf("restarting host0: %w", err)
			} else if restartEpoch, err = leaseOf(ctx, o.Store, "host0"); err != nil {
				phaseErr = err
			} else {
				logf("host0 restarted (lease %d) at %d accepted", restartEpoch, load.Accepted())
			}
		}
		// The rest of the load comes after the restart: a third of it, and
		// for long enough that the others have seen the new lease (they
		// read the leases every poll interval) and handed back the threads
		// that belong with it as those went idle. A count alone could pass
		// in a second or two on a fast machine, before any hand-back.
		o.Accepted = max(o.Accepted, load.Accepted()+o.Accepted/3)
		restartLoad = time.Now().Add(max(5*time.Second, 2*o.LeaseTTL))
	}
	// The leases host0 holds from its restart on: under load a restarted
	// host may lose its lease (a renewal late past the TTL) and take a new
	// one, and what it runs under that one counts as much.
	host0Epochs := map[int64]bool{}
	noteHost0 := func() {
		if restartEpoch == 0 {
			return
		}
		host0Epochs[restartEpoch] = true
		if e, err := leaseOf(ctx, o.Store, "host0"); err == nil {
			host0Epochs[e] = true
		}
	}
	for phaseErr == nil && (load.Accepted() < o.Accepted || time.Now().Before(restartLoad)) {
		noteHost0()
		if time.Now().After(deadline) {
			phaseErr = fmt.Errorf("targets not met in %s: %d/%d accepted", o.MaxDuration, load.Accepted(), o.Accepted)
		}
		sleep(ctx, 50*time.Millisecond)
	}
	noteHost0()
	load.Stop()
	wg.Wait()
	scancel()
	swg.Wait()
	sum.Accepted = load.Accepted()
	if phaseErr != nil {
		sum.Problems = append(sum.Problems, phaseErr.Error())
	}
	sum.Problems = append(sum.Problems, sampleProblems...)
	for _, e := range load.Errors() {
		sum.Problems = append(sum.Problems, e.Error())
	}
	logf("load stopped: %d accepted; checking through the survivors", sum.Accepted)

	survivors := NewClient(bases[1])
	survivors.More = bases[2:]
	rep := Check(ctx, survivors, load.Submissions(), load.Threads(), faults, o.ResultWait)
	sum.Report, sum.Lost = rep, rep.Lost
	sum.Problems = append(sum.Problems, rep.Problems...)

	// From the durable records: the victim's threads moved, and no run is
	// left active.
	sum.Owned = len(owned)
	for _, th := range owned {
		snap, err := o.Store.LoadThread(ctx, th)
		if err != nil {
			sum.Problems = append(sum.Problems, fmt.Sprintf("reading thread %s: %v", th, err))
			continue
		}
		if snap.Thread.Owner != victimEpoch {
			sum.Moved++
		}
	}
	if len(owned) == 0 {
		sum.Problems = append(sum.Problems, "the victim owned no thread when it was killed: the test proves nothing")
	} else if sum.Moved == 0 {
		sum.Problems = append(sum.Problems, fmt.Sprintf("none of the victim's %d threads moved to another host", len(owned)))
	}
	if restartEpoch != 0 {
		owners := map[string]bool{}
		for e := range host0Epochs {
			sum.RestartedThreads += len(ownedBy(ctx, o.Store, load.Threads(), e))
			owners[fmt.Sprintf("lease-%d", e)] = true
		}
		for r, err := range listAll(ctx, o.Store, record.StateCompleted) {
			if err != nil {
				sum.Problems = append(sum.Problems, err.Error())
				break
			}
			if owners[r.Owner] {
				sum.Restarted++
			}
		}
		if sum.Restarted == 0 {
			sum.Problems = append(sum.Problems, fmt.Sprintf("host0, restarted with lease %d (leases %v after it), completed no run: it got no thread", restartEpoch, slices.Sorted(maps.Keys(host0Epochs))))
		}
	}
	for r, err := range listAll(ctx, o.Store, record.StateActive) {
		if err != nil {
			sum.Problems = append(sum.Problems, err.Error())
			break
		}
		sum.Problems = append(sum.Problems, fmt.Sprintf("run %s of thread %s still active under %s after the checks", r.ID, r.ThreadID, r.Owner))
	}
	for _, st := range []record.RunState{record.StateCompleted, record.StateFailed, record.StateInterrupted, record.StateSuperseded} {
		for r, err := range listAll(ctx, o.Store, st) {
			if err != nil {
				sum.Problems = append(sum.Problems, err.Error())
				break
			}
			if r.Attempt >= 2 {
				sum.Recovered++
			}
		}
	}
	for i, s := range srvs[1:] {
		if !s.Running() {
			sum.Problems = append(sum.Problems, fmt.Sprintf("host%d died", i+1))
		}
		if d := logTail(s.LogPath, "panic"); d != "" {
			sum.Problems = append(sum.Problems, "host log: "+d)
		}
	}
	return sum, nil
}

// sampleStore reads the active runs from the store every 20ms and reports
// every thread seen with two at once.
func sampleStore(ctx context.Context, d driver.Driver) (n int, problems []string) {
	for ctx.Err() == nil {
		sleep(ctx, 20*time.Millisecond)
		per := map[string][]string{}
		ok := true
		for r, err := range listAll(ctx, d, record.StateActive) {
			if err != nil {
				ok = false
				break
			}
			per[r.ThreadID] = append(per[r.ThreadID], r.ID+"@"+r.Owner)
		}
		if !ok {
			continue
		}
		n++
		for th, rs := range per {
			if len(rs) > 1 {
				problems = append(problems, fmt.Sprintf("thread %s had %d active runs at once: %v", th, len(rs), rs))
			}
		}
	}
	return n, problems
}

// listAll lists every run in state st, page by page. One listing is not a
// snapshot across pages, so a run that moves between states may be missed
// or seen twice; a thread's runs are on one page or near, which is enough
// for sampling.
func listAll(ctx context.Context, d driver.Driver, st record.RunState) func(func(record.Run, error) bool) {
	return func(yield func(record.Run, error) bool) {
		after := ""
		for {
			rs, err := d.ListRuns(ctx, st, after, 512)
			if err != nil {
				yield(record.Run{}, err)
				return
			}
			for _, r := range rs {
				if !yield(r, nil) {
					return
				}
			}
			if len(rs) < 512 {
				return
			}
			after = rs[len(rs)-1].ID
		}
	}
}

// leaseOf returns the live lease of the host named holder.
func leaseOf(ctx context.Context, l driver.Leaser, holder string) (int64, error) {
	ls, err := l.Leases(ctx)
	if err != nil {
		return 0, err
	}
	for _, x := range ls {
		if x.Holder == holder {
			return x.Epoch, nil
		}
	}
	return 0, errors.New("no live lease held by " + holder)
}

// ownedBy lists the threads that epoch owns.
func ownedBy(ctx context.Context, d driver.Driver, threads []string, epoch int64) []string {
	var out []string
	for _, th := range threads {
		if snap, err := d.LoadThread(ctx, th); err == nil && snap.Thread.Owner == epoch {
			out = append(out, th)
		}
	}
	return out
}

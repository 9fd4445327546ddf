package host_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/invariant"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// TestSharedHammer: three hosts on one shared store take inputs for a
// handful of threads in turn while, again and again, one of them is cut off
// from the store for longer than its lease lives, then let back. Checked:
// never two active runs on a thread (sampled from the store all along),
// every input answered or ended with a reason, and the record invariants.
func TestSharedHammer(t *testing.T) {
	if testing.Short() {
		t.Skip("several seconds")
	}
	d := memdriver.NewShared(nil)
	const nHosts, nThreads, nInputs = 3, 8, 240
	parts := make([]*partitioned, nHosts)
	rts := make([]*host.Runtime, nHosts)
	for i := range nHosts {
		parts[i] = &partitioned{d: d}
		m, err := model.NewScripted(model.Script{Steps: []model.ScriptStep{
			{Delay: model.Duration(20 * time.Millisecond), Tool: &model.ScriptTool{Name: "lookup"}},
			{Delay: model.Duration(20 * time.Millisecond)},
		}})
		if err != nil {
			t.Fatal(err)
		}
		rts[i], err = host.New(context.Background(), host.Config{
			Driver: parts[i], Model: m, Tools: []model.Tool{lookupTool{}}, Logger: quietLog,
			HostName: fmt.Sprintf("h%d", i), LeaseTTL: 150 * time.Millisecond, PollInterval: 20 * time.Millisecond,
			MaxAttempts: 1000, // recoveries are the point here; no input may fail for them
		})
		if err != nil {
			t.Fatal(err)
		}
		rt := rts[i]
		t.Cleanup(func() { rt.Close(context.Background()) })
	}

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var problems []string
	wg.Add(2)
	go func() { // the sampler
		defer wg.Done()
		for ctx.Err() == nil {
			time.Sleep(2 * time.Millisecond)
			per := map[string]int{}
			rs, _ := d.ListRuns(context.Background(), record.StateActive, "", 10000)
			for _, r := range rs {
				if per[r.ThreadID]++; per[r.ThreadID] == 2 {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("thread %s had two active runs at once", r.ThreadID))
					mu.Unlock()
				}
			}
		}
	}()
	go func() { // the partitions
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for ctx.Err() == nil {
			p := parts[rng.IntN(nHosts)]
			p.down.Store(true)
			time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
			p.down.Store(false)
			time.Sleep(time.Duration(50+rng.IntN(150)) * time.Millisecond)
		}
	}()

	type sub struct {
		thread, key string
		runID       string
	}
	var subs []sub
	threads := make([]string, nThreads)
	for i := range threads {
		threads[i] = fmt.Sprintf("T%d", i)
	}
	for i := range nInputs {
		s := sub{thread: threads[i%nThreads], key: fmt.Sprintf("k%d", i)}
		// Submit as a client would: to the next host, and on an error with
		// the same key to the next one, until one accepts.
		for try := 0; ; try++ {
			tk, err := rts[(i+try)%nHosts].Submit(context.Background(), s.thread, "input "+s.key, host.SubmitOptions{IdempotencyKey: s.key})
			if err == nil {
				s.runID = tk.RunID
				break
			}
			if try > 200 {
				t.Fatalf("submission %s refused 200 times: %v", s.key, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		subs = append(subs, s)
		time.Sleep(4 * time.Millisecond)
	}
	// Let the partitions go on a while, then heal everything.
	time.Sleep(500 * time.Millisecond)
	stop()
	wg.Wait()
	for _, p := range parts {
		p.down.Store(false)
	}
	wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recovered := 0
	for i, s := range subs {
		res, err := rts[i%nHosts].Wait(wctx, s.runID)
		if err != nil {
			t.Fatalf("input %s (run %s) not settled: %v", s.key, s.runID, err)
		}
		if res.State != record.StateCompleted && res.State != record.StateSuperseded {
			t.Errorf("input %s: run %s ended %s (%s)", s.key, s.runID, res.State, res.TerminalReason)
		}
		if r, _ := rts[0].Run(wctx, s.runID); r.Attempt > 1 {
			recovered++
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
	st, err := invariant.Load(wctx, store.New(d, store.Options{}), threads)
	if err != nil {
		t.Fatal(err)
	}
	if err := invariant.Check(st); err != nil {
		t.Fatal(err)
	}
	var lost int64
	for _, rt := range rts {
		lost += rt.Stats().LeasesLost
	}
	t.Logf("%d inputs, %d runs recovered from a dead lease, %d leases lost", nInputs, recovered, lost)
	if lost == 0 {
		t.Fatal("no host ever lost its lease: the partitions tested nothing")
	}
}

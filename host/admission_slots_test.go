package host_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// TestFirstInputsRespectMaxConcurrentRuns: many first inputs to idle
// threads at once, with a model that does not answer, never leave more
// runs active in the store than MaxConcurrentRuns: an admission starts its
// run in its own commit only with a worker's slot reserved for it.
func TestFirstInputsRespectMaxConcurrentRuns(t *testing.T) {
	const maxRuns, threads = 3, 60
	gate := make(chan struct{})
	m, err := model.NewScripted(model.Script{})
	if err != nil {
		t.Fatal(err)
	}
	m.Sleep = func(ctx context.Context, _ time.Duration) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	rt, err := host.New(context.Background(), host.Config{Driver: slowDriver{memdriver.New()}, Model: m, MaxConcurrentRuns: maxRuns, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rt.Close(ctx)
	}()
	defer close(gate)
	active := func() int {
		n := 0
		for _, err := range rt.Store().ListActive(context.Background()) {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		return n
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range threads {
		wg.Go(func() {
			<-start
			if _, err := rt.Submit(context.Background(), fmt.Sprintf("T%d", i), "hello", host.SubmitOptions{}); err != nil {
				t.Error(err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	close(start)
	peak := 0
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		peak = max(peak, active())
	}
	queued := 0
	for _, err := range rt.Store().Runs(context.Background(), record.StateQueued) {
		if err != nil {
			t.Fatal(err)
		}
		queued++
	}
	if n := active(); n+queued != threads {
		t.Errorf("%d active and %d queued runs, want %d in all", n, queued, threads)
	}
	if peak > maxRuns {
		t.Fatalf("%d runs active at once, MaxConcurrentRuns is %d", peak, maxRuns)
	}
}

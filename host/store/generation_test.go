package store_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// relaunching is a driver whose process can be replaced by another that
// holds other data (as a relaunch does): a generational driver.
type relaunching struct {
	mu  sync.Mutex
	cur driver.Driver
	gen atomic.Uint64
}

func (r *relaunching) d() driver.Driver {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// relaunch replaces the driver with d.
func (r *relaunching) relaunch(d driver.Driver) {
	r.mu.Lock()
	r.cur = d
	r.mu.Unlock()
	r.gen.Add(1)
}

func (r *relaunching) Generation() uint64 { return r.gen.Load() }
func (r *relaunching) Info(ctx context.Context) (driver.Info, error) {
	return r.d().Info(ctx)
}
func (r *relaunching) LoadThread(ctx context.Context, id string) (driver.ThreadSnapshot, error) {
	return r.d().LoadThread(ctx, id)
}
func (r *relaunching) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	return r.d().Commit(ctx, b)
}
func (r *relaunching) GetRuns(ctx context.Context, ids []string) ([]record.Run, error) {
	return r.d().GetRuns(ctx, ids)
}
func (r *relaunching) GetIdempotency(ctx context.Context, th, key string) (record.Idempotency, error) {
	return r.d().GetIdempotency(ctx, th, key)
}
func (r *relaunching) ReadHistory(ctx context.Context, th string, after int64, limit int) ([]record.Message, error) {
	return r.d().ReadHistory(ctx, th, after, limit)
}
func (r *relaunching) ListRuns(ctx context.Context, st record.RunState, after string, limit int) ([]record.Run, error) {
	return r.d().ListRuns(ctx, st, after, limit)
}
func (r *relaunching) Close(ctx context.Context) error { return r.d().Close(ctx) }

// After a relaunch, nothing is answered from what the previous process
// said: a run completed before it is read again (here, from a store that
// does not hold it), the thread's runs and messages too, and an admission
// starts from a fresh read.
func TestRelaunchDropsCaches(t *testing.T) {
	ctx := context.Background()
	r := &relaunching{cur: memdriver.New()}
	s := store.New(r, store.Options{})
	adm := mustAdmit(t, s, store.Submission{ThreadID: "T", Key: "k", Content: "hello", StartAs: "h1"}, nil)
	if adm.Started == nil {
		t.Fatal("the run did not start in its admission")
	}
	if _, _, err := s.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: "T", RunID: adm.RunID, Owner: "h1", Reason: record.ReasonCompleted, Answer: "ok"}); err != nil {
		t.Fatal(err)
	}
	if runs, err := s.ThreadRuns(ctx, "T"); err != nil || len(runs) != 1 {
		t.Fatalf("thread runs before the relaunch: %v, %v", runs, err)
	}
	if !s.KnownSettled(adm.RunID) {
		t.Fatal("the completed run is not known settled")
	}

	r.relaunch(memdriver.New()) // a process that holds nothing
	if _, err := s.Result(ctx, adm.RunID); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("result after the relaunch: %v, want not found (not the cached answer)", err)
	}
	if s.KnownSettled(adm.RunID) {
		t.Fatal("a run is known settled from before the relaunch")
	}
	if runs, err := s.ThreadRuns(ctx, "T"); err != nil || len(runs) != 0 {
		t.Fatalf("thread runs after the relaunch: %v, %v, want none", runs, err)
	}
	if msgs, err := s.Messages(ctx, "T"); err != nil || len(msgs) != 0 {
		t.Fatalf("messages after the relaunch: %d, %v, want none", len(msgs), err)
	}
	// The thread is read again: the same key is new to this store, and
	// its run the thread's first.
	again := mustAdmit(t, s, store.Submission{ThreadID: "T", Key: "k", Content: "hello"}, nil)
	if again.Duplicate {
		t.Fatal("the key was taken as a duplicate of a run the store does not hold")
	}
	run, err := s.GetRun(ctx, again.RunID)
	if err != nil || run.Seq != 1 {
		t.Fatalf("the new run: %+v, %v, want seq 1", run, err)
	}
}

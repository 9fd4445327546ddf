package host_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// TestHammerSequentialClients: many clients, one per thread, each
// submitting its next input as soon as the previous one is answered, with a
// model that answers at once. Every input must be answered: a thread whose
// new input arrives while a worker is letting go of it must not be
// forgotten.
func TestHammerSequentialClients(t *testing.T) {
	const threads, perThread = 32, 25
	m, _ := model.NewScripted(model.Script{})
	rt, err := host.New(context.Background(), host.Config{Driver: slowDriver{memdriver.New()}, Model: m, MaxConcurrentRuns: 8, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	var wg sync.WaitGroup
	for c := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perThread {
				tk, err := rt.Submit(context.Background(), fmt.Sprintf("T%d", c), fmt.Sprint(i), host.SubmitOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				res, err := tk.Wait(ctx)
				cancel()
				if err != nil || res.Answer == nil {
					t.Errorf("thread T%d input %d never answered: %+v %v", c, i, res, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// slowDriver takes a little time over every load and commit, as a durable
// driver does, which widens the windows between a worker's look at a queue
// and a concurrent admission.
type slowDriver struct{ driver.Driver }

func (d slowDriver) LoadThread(ctx context.Context, id string) (driver.ThreadSnapshot, error) {
	s, err := d.Driver.LoadThread(ctx, id)
	time.Sleep(300 * time.Microsecond) // the answer takes a while to come back
	return s, err
}

func (d slowDriver) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	time.Sleep(300 * time.Microsecond)
	return d.Driver.Commit(ctx, b)
}

// refusingDriver refuses the first n commits that end a run, as a driver
// with a bug or a broken disk might.
type refusingDriver struct {
	driver.Driver
	mu sync.Mutex
	n  int
}

func (d *refusingDriver) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	d.mu.Lock()
	refuse := false
	for _, r := range b.Runs {
		if r.EndSeq != 0 && d.n > 0 {
			refuse = true
		}
	}
	if refuse {
		d.n--
	}
	d.mu.Unlock()
	if refuse {
		return 0, fmt.Errorf("%w: refused by the test", driver.ErrInvalidArgument)
	}
	return d.Driver.Commit(ctx, b)
}

// TestTerminalCommitRefused: when a run's terminal record cannot be written
// (nor the failure that replaces it), the run is queued again instead of
// staying active with no executor, and a later attempt answers it.
func TestTerminalCommitRefused(t *testing.T) {
	m, _ := model.NewScripted(model.Script{})
	rt, err := host.New(context.Background(), host.Config{Driver: &refusingDriver{Driver: memdriver.New(), n: 2}, Model: m, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	tk, err := rt.Submit(context.Background(), "T", "hello", host.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := tk.Wait(ctx)
	if err != nil || res.Answer == nil || res.Answer.Content != "hello" {
		t.Fatalf("%+v %v", res, err)
	}
	if r, _ := rt.Run(ctx, tk.RunID); r.Attempt != 2 {
		t.Fatalf("answered on attempt %d, want 2", r.Attempt)
	}
}

// flakyReads makes the first n history reads fail as a restarting driver's do.
type flakyReads struct {
	driver.Driver
	mu sync.Mutex
	n  int
}

func (d *flakyReads) ReadHistory(ctx context.Context, thread string, after int64, limit int) ([]record.Message, error) {
	d.mu.Lock()
	fail := d.n > 0
	d.n--
	d.mu.Unlock()
	if fail {
		return nil, fmt.Errorf("%w: connection reset by peer", driver.ErrUnavailable)
	}
	return d.Driver.ReadHistory(ctx, thread, after, limit)
}

// TestPromptWaitsOutUnavailableStore: a store that is briefly unavailable
// while a run reads its prompt delays the run; it does not fail it.
func TestPromptWaitsOutUnavailableStore(t *testing.T) {
	m, _ := model.NewScripted(model.Script{})
	d := &flakyReads{Driver: memdriver.New()}
	rt, err := host.New(context.Background(), host.Config{Driver: d, Model: m, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	d.mu.Lock()
	d.n = 3
	d.mu.Unlock()
	tk, err := rt.Submit(context.Background(), "T", "hello", host.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := tk.Wait(ctx)
	if err != nil || res.State != record.StateCompleted || answer(res) != "hello" {
		t.Fatalf("%+v %v", res, err)
	}
}

// lossyDriver applies the first commit that match takes, then loses its
// reply and makes the next thread load fail, so that the store layer cannot
// settle the outcome: the caller gets store.ErrOutcomeUnknown although the
// commit landed.
type lossyDriver struct {
	driver.Driver
	mu        sync.Mutex
	match     func(driver.Batch) bool
	failLoads int
}

func (d *lossyDriver) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	d.mu.Lock()
	lose := d.match != nil && d.match(b)
	if lose {
		d.match = nil
		d.failLoads = 1
	}
	d.mu.Unlock()
	v, err := d.Driver.Commit(ctx, b)
	if lose && err == nil {
		return 0, fmt.Errorf("%w: connection reset by peer", driver.ErrUnavailable)
	}
	return v, err
}

func (d *lossyDriver) LoadThread(ctx context.Context, id string) (driver.ThreadSnapshot, error) {
	d.mu.Lock()
	fail := d.failLoads > 0
	d.failLoads--
	d.mu.Unlock()
	if fail {
		return driver.ThreadSnapshot{}, fmt.Errorf("%w: connection refused", driver.ErrUnavailable)
	}
	return d.Driver.LoadThread(ctx, id)
}

// TestLostReplies: a start and an admission that landed without their
// callers hearing back still get their runs executed.
func TestLostReplies(t *testing.T) {
	m, _ := model.NewScripted(model.Script{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Run("start", func(t *testing.T) {
		// A runs (its model waits for the test), B queues behind it; the
		// commit that starts B lands but its reply is lost.
		var bID atomic.Value
		bID.Store("")
		d := &lossyDriver{Driver: memdriver.New(), match: func(b driver.Batch) bool {
			return len(b.Runs) == 1 && b.Runs[0].State == record.StateActive && b.Runs[0].ID == bID.Load().(string)
		}}
		gate := make(chan struct{})
		gm, _ := model.NewScripted(model.Script{Steps: []model.ScriptStep{{Delay: model.Duration(time.Hour)}}})
		gm.Sleep = func(ctx context.Context, _ time.Duration) error {
			select {
			case <-gate:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		rt, err := host.New(ctx, host.Config{Driver: d, Model: gm, Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close(context.Background())
		tA, err := rt.Submit(ctx, "T", "a", host.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(rt, tA.RunID, host.EventStepStarted)
		tB, err := rt.Submit(ctx, "T", "b", host.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		bID.Store(tB.RunID)
		close(gate)
		if res, err := tB.Wait(ctx); err != nil || answer(res) != "a | b" && answer(res) != "b" {
			t.Fatalf("%+v %v", res, err)
		}
	})
	t.Run("admission-that-starts", func(t *testing.T) {
		// The admission of an input to an idle thread also starts its run;
		// its reply is lost, and the client does not retry (no key): the
		// run is executed all the same.
		d := &lossyDriver{Driver: memdriver.New(), match: func(b driver.Batch) bool { return len(b.Messages) == 1 }}
		rt, err := host.New(ctx, host.Config{Driver: d, Model: m, Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close(context.Background())
		if _, err := rt.Submit(ctx, "T", "hello", host.SubmitOptions{}); !errors.Is(err, store.ErrOutcomeUnknown) {
			t.Fatalf("the lost reply: %v", err)
		}
		for {
			runs, err := rt.ThreadRuns(ctx, "T")
			if err == nil && len(runs) == 1 && runs[0].State == record.StateCompleted {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the run admitted without a reply was not executed: %+v %v", runs, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	t.Run("admission", func(t *testing.T) {
		d := &lossyDriver{Driver: memdriver.New(), match: func(b driver.Batch) bool { return len(b.Idempotency) == 1 }}
		rt, err := host.New(ctx, host.Config{Driver: d, Model: m, Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close(context.Background())
		if _, err := rt.Submit(ctx, "T", "hello", host.SubmitOptions{IdempotencyKey: "k"}); err == nil {
			t.Fatal("the lost reply was not reported")
		}
		tk, err := rt.Submit(ctx, "T", "hello", host.SubmitOptions{IdempotencyKey: "k"}) // the client retries
		if err != nil || !tk.Duplicate {
			t.Fatalf("retry: %+v %v", tk, err)
		}
		if res, err := tk.Wait(ctx); err != nil || answer(res) != "hello" {
			t.Fatalf("%+v %v", res, err)
		}
	})
}

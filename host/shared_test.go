package host_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// partitioned is a driver a test can cut this host off from: while down,
// every call fails as an unreachable store does.
type partitioned struct {
	d interface {
		driver.Driver
		driver.Leaser
	}
	down atomic.Bool
}

var errCut = fmt.Errorf("%w: partitioned", driver.ErrUnavailable)

func (p *partitioned) cut() error {
	if p.down.Load() {
		return errCut
	}
	return nil
}

func (p *partitioned) Info(ctx context.Context) (driver.Info, error) { return p.d.Info(ctx) }
func (p *partitioned) LoadThread(ctx context.Context, id string) (driver.ThreadSnapshot, error) {
	if err := p.cut(); err != nil {
		return driver.ThreadSnapshot{}, err
	}
	return p.d.LoadThread(ctx, id)
}
func (p *partitioned) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	if err := p.cut(); err != nil {
		return 0, err
	}
	return p.d.Commit(ctx, b)
}
func (p *partitioned) GetRuns(ctx context.Context, ids []string) ([]record.Run, error) {
	if err := p.cut(); err != nil {
		return nil, err
	}
	return p.d.GetRuns(ctx, ids)
}
func (p *partitioned) GetIdempotency(ctx context.Context, th, k string) (record.Idempotency, error) {
	if err := p.cut(); err != nil {
		return record.Idempotency{}, err
	}
	return p.d.GetIdempotency(ctx, th, k)
}
func (p *partitioned) ReadHistory(ctx context.Context, th string, after int64, n int) ([]record.Message, error) {
	if err := p.cut(); err != nil {
		return nil, err
	}
	return p.d.ReadHistory(ctx, th, after, n)
}
func (p *partitioned) ListRuns(ctx context.Context, st record.RunState, after string, n int) ([]record.Run, error) {
	if err := p.cut(); err != nil {
		return nil, err
	}
	return p.d.ListRuns(ctx, st, after, n)
}
func (p *partitioned) Close(ctx context.Context) error { return nil }
func (p *partitioned) AcquireLease(ctx context.Context, h string, ttl time.Duration) (driver.Lease, error) {
	if err := p.cut(); err != nil {
		return driver.Lease{}, err
	}
	return p.d.AcquireLease(ctx, h, ttl)
}
func (p *partitioned) RenewLease(ctx context.Context, e int64, ttl time.Duration) (driver.Lease, error) {
	if err := p.cut(); err != nil {
		return driver.Lease{}, err
	}
	return p.d.RenewLease(ctx, e, ttl)
}
func (p *partitioned) ReleaseLease(ctx context.Context, e int64) error {
	if err := p.cut(); err != nil {
		return err
	}
	return p.d.ReleaseLease(ctx, e)
}
func (p *partitioned) Leases(ctx context.Context) ([]driver.Lease, error) {
	if err := p.cut(); err != nil {
		return nil, err
	}
	return p.d.Leases(ctx)
}
func (p *partitioned) Notify(ctx context.Context, n driver.Notice) error {
	if err := p.cut(); err != nil {
		return err
	}
	return p.d.Notify(ctx, n)
}
func (p *partitioned) Watch(ctx context.Context) (<-chan driver.Notice, error) {
	if err := p.cut(); err != nil {
		return nil, err
	}
	return p.d.Watch(ctx)
}

// sharedHost is one host of several on a shared memdriver. Its model
// answers with its name, and waits for the test's release when gated.
type sharedHost struct {
	name string
	rt   *host.Runtime
	gate chan struct{}
}

// Lease lengths for the tests: short where a lease must expire within the
// test; long where the test needs leases to hold however slow the machine
// (a heartbeat late by more than a short lease loses it, and with it the
// thread's ownership the test is about).
const (
	shortLease = 300 * time.Millisecond
	longLease  = time.Minute
)

func newSharedHost(t *testing.T, name string, d driver.Driver, gated bool, ttl time.Duration) *sharedHost {
	t.Helper()
	step := model.ScriptStep{Answer: "answered by " + name}
	if gated {
		step.Delay = model.Duration(time.Hour)
	}
	m, err := model.NewScripted(model.Script{Steps: []model.ScriptStep{step}})
	if err != nil {
		t.Fatal(err)
	}
	h := &sharedHost{name: name, gate: make(chan struct{})}
	m.Sleep = func(ctx context.Context, d time.Duration) error {
		if d == 0 {
			return nil
		}
		select {
		case <-h.gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	h.rt, err = host.New(context.Background(), host.Config{
		Driver: d, Model: m, Logger: quietLog, HostName: name,
		LeaseTTL: ttl, PollInterval: 30 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		h.rt.Close(ctx)
	})
	return h
}

func (h *sharedHost) wait(t *testing.T, runID string) host.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := h.rt.Wait(ctx, runID)
	if err != nil {
		t.Fatalf("%s: waiting for %s: %v", h.name, runID, err)
	}
	return res
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !within(timeout, cond) {
		t.Fatalf("not within %v: %s", timeout, what)
	}
}

// within reports whether cond holds before d has passed.
func within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// A host cut off from the store past its lease's expiry loses its threads:
// another host recovers the run it was executing and answers it, and when
// the stale host comes back, the store refuses its commit.
func TestSharedStaleHostIsFenced(t *testing.T) {
	for _, name := range sortedKeys(sharedStores) {
		t.Run(name, func(t *testing.T) {
			da, db := sharedStores[name](t)
			testStaleHostIsFenced(t, da, db)
		})
	}
}

type leaserDriver interface {
	driver.Driver
	driver.Leaser
}

// sharedStores give two handles on one store with leases, as two hosts
// have: the same memdriver, or two pgstore processes on one database.
var sharedStores = map[string]func(t *testing.T) (a, b leaserDriver){
	"memdriver": func(t *testing.T) (a, b leaserDriver) {
		d := memdriver.NewShared(nil)
		return d, d
	},
	"pgstore-plugin": func(t *testing.T) (a, b leaserDriver) {
		u := pgtest.URL(t)
		return launchBuiltin(t, "pgstore", map[string]string{"url": u}).(leaserDriver), launchBuiltin(t, "pgstore", map[string]string{"url": u}).(leaserDriver)
	},
}

func testStaleHostIsFenced(t *testing.T, da, d leaserDriver) {
	pa := &partitioned{d: da}
	a := newSharedHost(t, "A", pa, true, shortLease)
	tk, err := a.rt.Submit(context.Background(), "T", "hello", host.SubmitOptions{IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(a.rt, tk.RunID, host.EventStepStarted)
	if r, _ := a.rt.Run(context.Background(), tk.RunID); r.State != record.StateActive || r.Owner != a.rt.Epoch() {
		t.Fatalf("run %+v: want active under A's lease %s", r, a.rt.Epoch())
	}
	staleOwner := a.rt.Epoch()
	pa.down.Store(true) // A pauses: no heartbeat, no commits

	b := newSharedHost(t, "B", d, false, longLease)
	res := b.wait(t, tk.RunID)
	run, _ := b.rt.Run(context.Background(), tk.RunID)
	if res.State != record.StateCompleted || answer(res) != "answered by B" || run.Attempt != 2 || run.Owner != b.rt.Epoch() {
		t.Fatalf("after A's lease expired: run %+v answer %q; want completed by B at attempt 2", run, answer(res))
	}

	pa.down.Store(false) // A wakes up and finishes its step
	close(a.gate)
	eventually(t, "A notices its lease is gone", func() bool { return a.rt.Stats().LeasesLost >= 1 })
	eventually(t, "A's execution gives up", func() bool {
		return a.rt.Stats().Terminal[string(record.ReasonCompleted)] == 0 && a.rt.Epoch() != staleOwner
	})
	msgs, err := b.rt.History(context.Background(), "T")
	if err != nil {
		t.Fatal(err)
	}
	var answers []string
	for _, m := range msgs {
		if m.Role == record.RoleAssistant {
			answers = append(answers, m.Content)
		}
	}
	if len(answers) != 1 || answers[0] != "answered by B" {
		t.Fatalf("history answers %q: want exactly B's", answers)
	}

	// The stale lease's commits are refused outright, even at the current
	// version: the fence, not the host, decides.
	snap, err := d.LoadThread(context.Background(), "T")
	if err != nil {
		t.Fatal(err)
	}
	var staleEpoch int64
	fmt.Sscanf(staleOwner, "lease-%d", &staleEpoch)
	th := snap.Thread
	th.Version++
	th.Owner = staleEpoch
	th.LastCommitID = "stale"
	_, err = d.Commit(context.Background(), driver.Batch{CommitID: "stale", ThreadID: "T", ExpectedVersion: snap.Thread.Version, Thread: th, Fence: staleEpoch})
	if !errors.Is(err, driver.ErrFenced) {
		t.Fatalf("a commit fenced by the stale lease: %v, want ErrFenced", err)
	}
}

// An input that reaches a host that does not own the thread is admitted
// there and executed by the owner, woken by a notice; with notices lost,
// the owner's poll finds it.
func TestSharedNoticeWakesOwner(t *testing.T) {
	for _, name := range sortedKeys(sharedStores) {
		for _, lose := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/notices_lost=%v", name, lose), func(t *testing.T) {
				da, db := sharedStores[name](t)
				a := newSharedHost(t, "A", da, false, longLease)
				first, err := a.rt.Submit(context.Background(), "T", "one", host.SubmitOptions{})
				if err != nil {
					t.Fatal(err)
				}
				a.wait(t, first.RunID)
				var bd driver.Driver = db
				if lose {
					bd = dropNotices{db}
				}
				b := newSharedHost(t, "B", bd, false, longLease)
				second, err := b.rt.Submit(context.Background(), "T", "two", host.SubmitOptions{})
				if err != nil {
					t.Fatal(err)
				}
				res := b.wait(t, second.RunID)
				run, _ := b.rt.Run(context.Background(), second.RunID)
				if answer(res) != "answered by A" || run.Owner != a.rt.Epoch() {
					t.Fatalf("run %+v answer %q: want A, the thread's owner, to answer", run, answer(res))
				}
				// B wakes A; A tells B the run settled.
				if !lose {
					// (A counts its notice once sent: B may have it first.)
					if !within(timeout, func() bool {
						return b.rt.Stats().NoticesReceived == 1 && a.rt.Stats().NoticesSent == 1
					}) {
						sa, sb := a.rt.Stats(), b.rt.Stats()
						t.Fatalf("B did not hear that its run settled: A sent %d, received %d, lost %d leases; B sent %d, received %d, lost %d leases",
							sa.NoticesSent, sa.NoticesReceived, sa.LeasesLost, sb.NoticesSent, sb.NoticesReceived, sb.LeasesLost)
					}
					if b.rt.Stats().NoticesSent != 1 || a.rt.Stats().NoticesReceived < 1 {
						t.Fatalf("notices: B sent %d, A received %d", b.rt.Stats().NoticesSent, a.rt.Stats().NoticesReceived)
					}
				}
			})
		}
	}
}

// dropNotices loses every notice.
type dropNotices struct{ leaserDriver }

func (dropNotices) Notify(context.Context, driver.Notice) error { return nil }

// A host that closes releases its lease: another host takes its threads
// over at once, without waiting for the expiry.
func TestSharedCloseHandsOver(t *testing.T) {
	d := memdriver.NewShared(nil)
	a := newSharedHost(t, "A", d, false, longLease)
	first, err := a.rt.Submit(context.Background(), "T", "one", host.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.wait(t, first.RunID)
	b := newSharedHost(t, "B", d, false, longLease)
	if rep, err := a.rt.Close(context.Background()); err != nil || !rep.Settled {
		t.Fatalf("close A: %+v, %v", rep, err)
	}
	second, err := b.rt.Submit(context.Background(), "T", "two", host.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res := b.wait(t, second.RunID); answer(res) != "answered by B" {
		t.Fatalf("after A closed: %q", answer(res))
	}
	ls, _ := d.Leases(context.Background())
	if len(ls) != 1 || ls[0].Holder != "B" {
		t.Fatalf("live leases %+v: want B's alone", ls)
	}
}

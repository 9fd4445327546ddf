package driverhost_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/internal/builtins"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// quiet is a logger for the drivers' logs in tests: warnings and up.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// config returns the launch config of driver name, on dir for badgerstore.
func config(t testing.TB, name, dir string) driverhost.Config {
	t.Helper()
	needBins(t)
	cfg := driverhost.Config{Path: bins[name], Logger: quiet}
	if name == "badgerstore" {
		cfg.DriverConfig = map[string]string{"dir": dir}
	}
	return cfg
}

func launch(t testing.TB, cfg driverhost.Config) *driverhost.Driver {
	t.Helper()
	d, err := driverhost.Launch(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	return d
}

var drivers = []string{"memstore", "badgerstore"}

func TestContract(t *testing.T) {
	for _, name := range drivers {
		t.Run(name, func(t *testing.T) {
			storedrivertest.Run(t, func(t *testing.T) driver.Driver {
				return launch(t, config(t, name, t.TempDir())).Store()
			})
			noChildren(t)
		})
	}
}

// TestBuiltin runs drivers served by this test binary re-executed as a
// subprocess, as the agenthost binary serves its own: the whole contract on
// memstore, and a commit read back across a relaunch on badgerstore (each
// launch of a test binary built with -race is slow).
func TestBuiltin(t *testing.T) {
	ctx := context.Background()
	builtin := func(t *testing.T, name string, dc map[string]string) *driverhost.Driver {
		cfg, err := builtins.Launch(name, dc)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Logger = quiet
		return launch(t, cfg)
	}
	t.Run("memstore", func(t *testing.T) {
		storedrivertest.Run(t, func(t *testing.T) driver.Driver { return builtin(t, "memstore", nil) })
	})
	t.Run("badgerstore", func(t *testing.T) {
		dc := map[string]string{"dir": t.TempDir()}
		d := builtin(t, "badgerstore", dc)
		info, err := d.Info(ctx)
		if err != nil || info.Name != "badgerstore" || !info.Durable {
			t.Fatalf("Info = %+v, %v", info, err)
		}
		if _, err := d.Commit(ctx, wholeBatch("th", 0)); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(ctx); err != nil {
			t.Fatal(err)
		}
		d = builtin(t, "badgerstore", dc)
		snap, err := d.LoadThread(ctx, "th")
		if err != nil || snap.Thread.Version != 1 {
			t.Fatalf("after relaunch: %+v, %v", snap.Thread, err)
		}
		if err := d.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := builtins.Launch("nosuch", nil); err == nil {
		t.Fatal("Builtin of an unknown driver: no error")
	}
	noChildren(t)
}

// TestStoreLayer runs the host's store layer over each driver subprocess:
// admissions with keys, start, completion with an absorption, the results,
// and the listings.
func TestStoreLayer(t *testing.T) {
	ctx := context.Background()
	for _, name := range drivers {
		t.Run(name, func(t *testing.T) {
			s := store.New(launch(t, config(t, name, t.TempDir())), store.Options{PageSize: 2})
			inject := func(context.Context, store.ThreadView) (runstate.Decision, error) {
				return runstate.Decision{Action: runstate.ActionInject}, nil
			}
			a1, err := s.Admit(ctx, store.Submission{ThreadID: "th", Key: "k1", Content: "summarise"}, inject)
			if err != nil {
				t.Fatal(err)
			}
			run1, err := s.Start(ctx, "th", "host-1")
			if err != nil || run1.ID != a1.RunID {
				t.Fatalf("Start = %+v, %v", run1, err)
			}
			a2, err := s.Admit(ctx, store.Submission{ThreadID: "th", Key: "k2", Content: "in bullets"}, inject)
			if err != nil || !a2.Offer {
				t.Fatalf("second admission = %+v, %v; want an offer", a2, err)
			}
			var active []string
			for r, err := range s.ListActive(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				active = append(active, r.ID)
			}
			if len(active) != 1 || active[0] != run1.ID {
				t.Fatalf("ListActive = %v", active)
			}
			done, dropped, err := s.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: "th", RunID: run1.ID, Owner: "host-1",
				Reason: record.ReasonCompleted, Answer: "- a\n- b",
				Absorb: []runstate.AbsorbEntry{{RunID: a2.RunID, InputMessageIDs: []string{a2.InputMessageID}}}})
			if err != nil || len(dropped) != 0 || done.State != record.StateCompleted {
				t.Fatalf("CommitTerminal = %+v, %v, %v", done, dropped, err)
			}
			// A retry of the absorbed input's key returns the absorbing answer.
			dup, err := s.Admit(ctx, store.Submission{ThreadID: "th", Key: "k2", Content: "in bullets"}, inject)
			if err != nil || !dup.Duplicate || dup.AnsweredByRunID != run1.ID {
				t.Fatalf("retry of k2 = %+v, %v", dup, err)
			}
			res, err := s.Result(ctx, a2.RunID)
			if err != nil || res.Answer == nil || res.Answer.Content != "- a\n- b" {
				t.Fatalf("Result of the absorbed run = %+v, %v", res, err)
			}
			for r, err := range s.ScanRecoverable(ctx, func(string) bool { return false }) {
				t.Fatalf("recoverable after settling: %+v, %v", r, err)
			}
			var superseded int
			for r, err := range s.Runs(ctx, record.StateSuperseded) {
				if err != nil || r.AbsorbedIntoRunID != run1.ID {
					t.Fatalf("superseded run %+v, %v", r, err)
				}
				superseded++
			}
			hist, err := s.History(ctx, "th")
			if err != nil || len(hist) != 3 {
				t.Fatalf("History = %d messages, %v; want 3", len(hist), err)
			}
			if superseded != 1 {
				t.Fatalf("%d superseded runs, want 1", superseded)
			}
		})
	}
	noChildren(t)
}

// TestBadInput: bad requests over the protocol get clear errors and the
// driver keeps serving, in the same process.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	for _, name := range drivers {
		t.Run(name, func(t *testing.T) {
			d := launch(t, config(t, name, t.TempDir()))
			snap, err := d.LoadThread(ctx, "unknown-thread")
			if err != nil || snap.Thread.Version != 0 {
				t.Fatalf("unknown thread: %+v, %v", snap, err)
			}
			if _, err := d.GetIdempotency(ctx, "unknown-thread", "k"); !errors.Is(err, driver.ErrNotFound) {
				t.Fatalf("key on an unknown thread: %v", err)
			}
			if _, err := d.LoadThread(ctx, ""); !errors.Is(err, driver.ErrInvalidArgument) || !strings.Contains(err.Error(), "empty thread id") {
				t.Fatalf("empty thread id: %v", err)
			}
			if _, err := d.GetRuns(ctx, []string{""}); !errors.Is(err, driver.ErrNotFound) {
				t.Fatalf("empty run id: %v", err)
			}
			if _, err := d.Commit(ctx, driver.Batch{}); !errors.Is(err, driver.ErrInvalidArgument) || !strings.Contains(err.Error(), "no thread id") {
				t.Fatalf("empty batch: %v", err)
			}
			for _, size := range []int{10 << 20, 70 << 20} {
				b := driver.Batch{CommitID: "c1", ThreadID: "t", Thread: record.Thread{ID: "t", Version: 1, LastCommitID: "c1"},
					Messages: []record.Message{{ID: "m1", ThreadID: "t", Seq: 1, Content: strings.Repeat("x", size)}}}
				_, err := d.Commit(ctx, b)
				if !errors.Is(err, driver.ErrTooLarge) {
					t.Fatalf("%d MiB message: %v, want ErrTooLarge", size>>20, err)
				}
			}
			// Still serving, in the same process.
			b := driver.Batch{CommitID: "c1", ThreadID: "t", Thread: record.Thread{ID: "t", Version: 1, LastCommitID: "c1"},
				Messages: []record.Message{{ID: "m1", ThreadID: "t", Seq: 1, Content: "small"}}}
			if _, err := d.Commit(ctx, b); err != nil {
				t.Fatal(err)
			}
			if d.Starts() != 1 {
				t.Fatalf("the driver was started %d times", d.Starts())
			}
		})
	}
	noChildren(t)
}

func TestLaunchErrors(t *testing.T) {
	ctx := context.Background()
	// No common protocol version.
	cfg := config(t, "memstore", "")
	driverhost.SetProtocolVersions(&cfg, driver.ProtocolVersion+1)
	_, err := driverhost.Launch(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("launch offering only protocol version %d: %v", driver.ProtocolVersion+1, err)
	}
	noChildren(t)
	// A config the driver refuses.
	cfg = config(t, "badgerstore", "")
	cfg.DriverConfig = map[string]string{"sync_writes": "yes please"}
	_, err = driverhost.Launch(ctx, cfg)
	if !errors.Is(err, driver.ErrInvalidArgument) || !strings.Contains(err.Error(), "sync_writes") {
		t.Fatalf("launch with a bad config: %v", err)
	}
	noChildren(t)
	// Not a driver.
	_, err = driverhost.Launch(ctx, driverhost.Config{Path: "/bin/true", Logger: quiet, StartTimeout: 5 * time.Second})
	if err == nil {
		t.Fatal("launching /bin/true: no error")
	}
	_, err = driverhost.Launch(ctx, driverhost.Config{Path: "/nonexistent/driver", Logger: quiet})
	if err == nil {
		t.Fatal("launching a missing binary: no error")
	}
	noChildren(t)
}

// TestLogs: the driver's logs arrive in the host's slog logger.
func TestLogs(t *testing.T) {
	var buf syncBuffer
	cfg := config(t, "memstore", "")
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d := launch(t, cfg)
	if err := d.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "logger=driver") || !strings.Contains(out, "plugin") {
		t.Fatalf("no driver log lines in the host log:\n%s", out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRestart: a durable driver killed with SIGKILL is reported
// unavailable, and the next call runs on a fresh process.
func TestRestart(t *testing.T) {
	ctx := context.Background()
	d := launch(t, config(t, "badgerstore", t.TempDir()))
	pid := d.Pid()
	if pid == 0 {
		t.Fatal("no pid")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var sawUnavailable bool
	for i := 0; ; i++ {
		_, err := d.LoadThread(ctx, "t")
		if err == nil && d.Starts() == 2 {
			break
		}
		switch {
		case errors.Is(err, driver.ErrUnavailable):
			sawUnavailable = true
		case err != nil:
			t.Fatalf("call after the kill: %v", err)
		}
		if i == 1000 {
			t.Fatal("the driver was not restarted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !sawUnavailable {
		t.Log("the process was gone before the first call; no call saw it die")
	}
	if d.Pid() == pid {
		t.Fatal("same pid after restart")
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := d.LoadThread(ctx, "t"); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	noChildren(t)
}

// TestKillDuringCommits: kill -9 of badgerstore during a stream of commits
// from several goroutines. After the restart every acknowledged commit is
// there, and every commit is whole or absent.
// TestKillDuringCommits: a driver killed while commits are in flight,
// over either transport: each commit cut fails with ErrUnavailable (its
// outcome unknown), and none acknowledged is lost.
func TestKillDuringCommits(t *testing.T) {
	for _, transport := range []string{"direct", driverhost.TransportGRPC} {
		t.Run(transport, func(t *testing.T) { killDuringCommits(t, transport) })
	}
}

func killDuringCommits(t *testing.T, transport string) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := config(t, "badgerstore", dir)
	cfg.Transport = transport
	d := launch(t, cfg)
	if d.Transport() != transport {
		t.Fatalf("transport %q, want %q", d.Transport(), transport)
	}
	const writers = 6
	acked := make([]int64, writers) // highest acknowledged version per thread
	var wg sync.WaitGroup
	var total sync.WaitGroup
	total.Add(1)
	var once sync.Once
	var count int64
	var mu sync.Mutex
	for w := range writers {
		wg.Go(func() {
			th := fmt.Sprintf("thread-%d", w)
			for v := int64(0); ; v++ {
				_, err := d.Commit(ctx, wholeBatch(th, v))
				if err != nil {
					if !errors.Is(err, driver.ErrUnavailable) {
						t.Errorf("%s: commit %d: %v", th, v+1, err)
					}
					return
				}
				acked[w] = v + 1
				mu.Lock()
				count++
				if count == 300 {
					once.Do(total.Done)
				}
				mu.Unlock()
			}
		})
	}
	total.Wait()
	if err := syscall.Kill(d.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// The same Driver restarts the process on the same data.
	check := func(d driver.Driver) {
		t.Helper()
		for w := range writers {
			th := fmt.Sprintf("thread-%d", w)
			var snap driver.ThreadSnapshot
			var err error
			for i := 0; i < 200; i++ { // the first calls may still find it down
				if snap, err = d.LoadThread(ctx, th); !errors.Is(err, driver.ErrUnavailable) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err != nil {
				t.Fatal(err)
			}
			v := snap.Thread.Version
			if v < acked[w] || v > acked[w]+1 {
				t.Fatalf("%s: at version %d, %d commits acknowledged", th, v, acked[w])
			}
			if snap.Thread.LastCommitID != wholeBatch(th, v-1).CommitID {
				t.Fatalf("%s: last commit %q", th, snap.Thread.LastCommitID)
			}
			msgs, err := d.ReadHistory(ctx, th, 0, 100000)
			if err != nil || int64(len(msgs)) != 2*v {
				t.Fatalf("%s: %d messages at version %d, %v", th, len(msgs), v, err)
			}
			ids := make([]string, v)
			for i := range v {
				ids[i] = fmt.Sprintf("%s-run-%d", th, i+1)
			}
			runs, err := d.GetRuns(ctx, ids)
			if err != nil || int64(len(runs)) != v {
				t.Fatalf("%s: runs: %v", th, err)
			}
			if _, err := d.GetRuns(ctx, []string{fmt.Sprintf("%s-run-%d", th, v+1)}); !errors.Is(err, driver.ErrNotFound) {
				t.Fatalf("%s: a run past the thread version: %v", th, err)
			}
			if v > 0 {
				if _, err := d.GetIdempotency(ctx, th, fmt.Sprintf("key-%d", v)); err != nil {
					t.Fatalf("%s: key of the last commit: %v", th, err)
				}
			}
			if _, err := d.GetIdempotency(ctx, th, fmt.Sprintf("key-%d", v+1)); !errors.Is(err, driver.ErrNotFound) {
				t.Fatalf("%s: key past the thread version: %v", th, err)
			}
		}
	}
	check(d)
	if d.Transport() != transport {
		t.Fatalf("transport %q after the relaunch, want %q", d.Transport(), transport)
	}
	if d.Starts() != 2 {
		t.Fatalf("started %d times, want 2", d.Starts())
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// And a fresh launch on the same directory sees the same.
	d = launch(t, cfg)
	check(d)
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	noChildren(t)
}

// wholeBatch is commit v+1 of thread th: a run, two messages and a key,
// which must land together or not at all.
func wholeBatch(th string, v int64) driver.Batch {
	n := v + 1
	cid := fmt.Sprintf("%s-commit-%d", th, n)
	run := fmt.Sprintf("%s-run-%d", th, n)
	return driver.Batch{
		CommitID: cid, ThreadID: th, ExpectedVersion: v,
		Thread: record.Thread{ID: th, Version: n, LastCommitID: cid, NextMessageSeq: 2*n + 1},
		Runs:   []record.Run{{ID: run, ThreadID: th, Seq: n, State: record.StateCompleted}},
		Messages: []record.Message{
			{ID: run + "-in", ThreadID: th, RunID: run, Seq: 2*n - 1, Role: record.RoleUser, Content: "q"},
			{ID: run + "-out", ThreadID: th, RunID: run, Seq: 2 * n, Role: record.RoleAssistant, Content: "a"},
		},
		Idempotency: []record.Idempotency{{ThreadID: th, Key: fmt.Sprintf("key-%d", n), RunID: run, InputMessageID: run + "-in"}},
	}
}

// TestTransport: drivers served by the SDK are reached over the direct
// transport unless the config or the environment asks for gRPC; both
// carry the whole contract.
func TestTransport(t *testing.T) {
	d := launch(t, config(t, "memstore", ""))
	if d.Transport() != "direct" {
		t.Fatalf("transport %q by default, want direct", d.Transport())
	}
	cfg := config(t, "memstore", "")
	cfg.Transport = driverhost.TransportGRPC
	if d := launch(t, cfg); d.Transport() != "grpc" {
		t.Fatalf("transport %q with Config.Transport grpc, want grpc", d.Transport())
	}
	cfg.Transport = "carrier pigeon"
	if _, err := driverhost.Launch(context.Background(), cfg); !errors.Is(err, driver.ErrInvalidArgument) {
		t.Fatalf("an unknown transport: %v, want ErrInvalidArgument", err)
	}
	t.Setenv(driverhost.TransportEnv, "grpc")
	if d := launch(t, config(t, "memstore", "")); d.Transport() != "grpc" {
		t.Fatalf("transport %q with %s=grpc, want grpc", d.Transport(), driverhost.TransportEnv)
	}
	storedrivertest.Run(t, func(t *testing.T) driver.Driver {
		d := launch(t, config(t, "memstore", ""))
		if d.Transport() != "grpc" {
			t.Fatalf("transport %q, want grpc", d.Transport())
		}
		return d.Store()
	})
}

// TestKillDuringRelaunch: a Kill while a dead driver process is being
// replaced (it does not wait for the relaunch) still ends the new process:
// the driver stays killed.
func TestKillDuringRelaunch(t *testing.T) {
	ctx := context.Background()
	d := launch(t, config(t, "badgerstore", t.TempDir()))
	if _, err := d.Commit(ctx, wholeBatch("t", 0)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(d.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	driverhost.SetBeforePublish(d, d.Kill)
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := d.Commit(ctx, wholeBatch("t", 1))
		if err == nil {
			t.Fatal("a commit succeeded after Kill: the relaunched driver survived it")
		}
		if !errors.Is(err, driver.ErrUnavailable) {
			t.Fatalf("commit after Kill: %v, want ErrUnavailable", err)
		}
		if d.Starts() >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d.Starts() < 2 {
		t.Fatal("the driver was not relaunched")
	}
	if _, err := d.Commit(ctx, wholeBatch("t", 1)); err == nil {
		t.Fatal("a commit succeeded after Kill")
	}
}

// TestProtocolVersions: the host speaks protocol 2 to a driver that does,
// with the step store on the driver value it uses, and protocol 1 to one
// that speaks only 1 (here: a handshake offering only 1, as a driver built
// before protocol 2 answers), without it, so that the host can tell.
func TestProtocolVersions(t *testing.T) {
	ctx := context.Background()
	th := storedrivertest.NewBuilder("t")
	r := th.Run("r1")
	b := th.Batch([]string{r.ID}, []record.Run{storedrivertest.Activate(r, "h", 1)}, []record.Message{th.Msg("r1-in", r.ID)}, nil)
	step := storedrivertest.Step(storedrivertest.Activate(r, "h", 1), 1)

	d := launch(t, config(t, "badgerstore", t.TempDir()))
	if d.Protocol() != 2 {
		t.Fatalf("badgerstore speaks protocol %d, want 2", d.Protocol())
	}
	s := d.Store()
	ss, ok := s.(driver.StepStore)
	if _, lok := s.(driver.ThreadLister); !ok || !lok || driverhost.Of(s) != d {
		t.Fatalf("the store of a protocol 2 driver is %T: no step store or thread lister", s)
	}
	if _, err := s.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := ss.CommitSteps(ctx, driver.StepBatch{ThreadID: "t", RunID: r.ID, Owner: "h", Attempt: 1, Steps: []record.Step{step}}); err != nil {
		t.Fatal(err)
	}
	if got, err := ss.ReadSteps(ctx, r.ID, 0, 10); err != nil || len(got) != 1 {
		t.Fatalf("ReadSteps = %v, %v", got, err)
	}

	cfg := config(t, "badgerstore", t.TempDir())
	driverhost.SetProtocolVersions(&cfg, 1)
	d1 := launch(t, cfg)
	info, err := d1.Info(ctx)
	if err != nil || info.ProtocolVersion != 1 || d1.Protocol() != 1 {
		t.Fatalf("over a protocol 1 handshake: Info %+v, %v, Protocol %d; want 1", info, err, d1.Protocol())
	}
	s1 := d1.Store()
	if _, ok := s1.(driver.StepStore); ok {
		t.Fatal("the store of a protocol 1 driver is a step store")
	}
	if _, ok := s1.(driver.ThreadLister); ok {
		t.Fatal("the store of a protocol 1 driver is a thread lister")
	}
	if driverhost.Of(s1) != d1 {
		t.Fatal("Of does not find the driver of a protocol 1 store")
	}
	// A batch with steps is refused whole by a protocol 1 connection.
	b.Steps = []record.Step{step}
	if _, err := s1.Commit(ctx, b); !errors.Is(err, driver.ErrInvalidArgument) {
		t.Fatalf("a batch with steps over protocol 1: %v, want ErrInvalidArgument", err)
	}
	if snap, err := s1.LoadThread(ctx, "t"); err != nil || snap.Thread.Version != 0 {
		t.Fatalf("after the refused batch: %+v, %v", snap, err)
	}
	// The step calls themselves are refused.
	if err := (&driverhost.StepDriver{Driver: d1}).CommitSteps(ctx, driver.StepBatch{ThreadID: "t", RunID: r.ID, Owner: "h", Attempt: 1, Steps: []record.Step{step}}); !errors.Is(err, driver.ErrInvalidArgument) {
		t.Fatalf("CommitSteps over protocol 1: %v, want ErrInvalidArgument", err)
	}
}

package driverhost_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/host/driverhost"
)

// waitGone waits until process pid has ended (reaped or a zombie).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNonDurableNotRelaunched: a driver whose Info says it is not durable
// is not relaunched when its process ends: the data is gone with it, and
// an empty store under a host that holds the old one's runs would accept
// inputs it cannot answer. Calls fail with ErrLost, Lost is closed, and
// the generation moves (caches of it are dropped).
func TestNonDurableNotRelaunched(t *testing.T) {
	ctx := context.Background()
	d := launch(t, config(t, "memstore", ""))
	if d.Durable() {
		t.Fatal("memstore reported durable")
	}
	if _, err := d.Commit(ctx, wholeBatch("t", 0)); err != nil {
		t.Fatal(err)
	}
	gen := d.Generation()
	if err := syscall.Kill(d.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := d.LoadThread(ctx, "t")
		if err == nil {
			if time.Now().After(deadline) {
				t.Fatal("the killed driver still answers")
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !errors.Is(err, driver.ErrUnavailable) {
			t.Fatalf("after the kill: %v, want ErrUnavailable", err)
		}
		if errors.Is(err, driverhost.ErrLost) {
			break
		}
	}
	select {
	case <-d.Lost():
	default:
		t.Fatal("Lost not closed")
	}
	if d.Starts() != 1 {
		t.Fatalf("started %d times: a driver that is not durable was relaunched", d.Starts())
	}
	if d.Generation() == gen {
		t.Fatal("the generation did not move when the driver was lost")
	}
	if _, err := d.Commit(ctx, wholeBatch("t", 0)); !errors.Is(err, driverhost.ErrLost) {
		t.Fatalf("commit after the loss: %v, want ErrLost", err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	noChildren(t)
}

// TestStalledDriverReplaced: a driver process that stops answering
// (SIGSTOP) fails the call that waits on it after CallTimeout, with
// ErrUnavailable, not at the end of the stall; it is counted, killed and
// relaunched on its data, by the heartbeat even when no call is made.
func TestStalledDriverReplaced(t *testing.T) {
	ctx := context.Background()
	cfg := config(t, "badgerstore", t.TempDir())
	cfg.CallTimeout = 2 * time.Second
	cfg.HeartbeatInterval = 500 * time.Millisecond
	d := launch(t, cfg)
	if _, err := d.Commit(ctx, wholeBatch("t", 0)); err != nil {
		t.Fatal(err)
	}
	pid := d.Pid()
	gen := d.Generation()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	began := time.Now()
	_, err := d.Commit(ctx, wholeBatch("t", 1))
	if !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("commit to a stopped driver: %v, want ErrUnavailable", err)
	}
	if waited := time.Since(began); waited > time.Minute {
		t.Fatalf("the call waited %v", waited)
	}
	if d.Stalls() != 1 {
		t.Fatalf("stalls = %d, want 1", d.Stalls())
	}
	waitGone(t, pid)
	// The heartbeat relaunches it with no call made.
	deadline := time.Now().Add(time.Minute)
	for d.Starts() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the stalled driver was not relaunched")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d.Pid() == pid || d.Generation() == gen {
		t.Fatalf("pid %d (was %d), generation %d (was %d) after the relaunch", d.Pid(), pid, d.Generation(), gen)
	}
	snap, err := d.LoadThread(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	// The commit cut short may have landed or not; the one before did.
	if v := snap.Thread.Version; v != 1 && v != 2 {
		t.Fatalf("thread at version %d after the relaunch", v)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	noChildren(t)
}

// A stalled driver that is not durable is lost, not relaunched.
func TestStalledNonDurableLost(t *testing.T) {
	ctx := context.Background()
	cfg := config(t, "memstore", "")
	cfg.CallTimeout = 2 * time.Second
	d := launch(t, cfg)
	pid := d.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if _, err := d.LoadThread(ctx, "t"); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("load from a stopped driver: %v, want ErrUnavailable", err)
	}
	if _, err := d.LoadThread(ctx, "t"); !errors.Is(err, driverhost.ErrLost) {
		t.Fatalf("load after the stall: %v, want ErrLost", err)
	}
	waitGone(t, pid)
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	noChildren(t)
}

// processAlive reports whether process pid runs (a zombie does not).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	st := string(b)
	i := strings.LastIndexByte(st, ')')
	return i < 0 || i+2 >= len(st) || st[i+2] != 'Z'
}

// waitStopped waits until process pid is stopped (state T): a signal is
// delivered a moment after kill returns.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		st := string(b)
		if i := strings.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) && st[i+2] == 'T' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not stopped after SIGSTOP", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

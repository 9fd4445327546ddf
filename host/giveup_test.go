package host_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// noOwnerZero is a driver certified before a thread could be given up: it
// refuses a commit that leaves a thread with no owner.
type noOwnerZero struct {
	leaserDriver
	refused atomic.Int64
}

func (d *noOwnerZero) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	if b.Fence != 0 && b.Thread.Owner == 0 && len(b.Runs) == 0 && len(b.Messages) == 0 {
		d.refused.Add(1)
		return 0, fmt.Errorf("%w: thread %s with no owner", driver.ErrInvalidArgument, b.ThreadID)
	}
	return d.leaserDriver.Commit(ctx, b)
}

// warnCounter counts the warnings whose message contains want.
type warnCounter struct {
	want string
	n    *atomic.Int64
}

func (h warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.Contains(r.Message, h.want) {
		h.n.Add(1)
	}
	return nil
}
func (h warnCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h warnCounter) WithGroup(string) slog.Handler      { return h }

// TestSharedGiveUpRefusedWarnsOnce: over a driver that refuses to give a
// thread up, a host whose threads belong with another warns once and
// stops handing threads back, instead of a warning after every run.
func TestSharedGiveUpRefusedWarnsOnce(t *testing.T) {
	mem := memdriver.NewShared(nil)
	d := &noOwnerZero{leaserDriver: mem}
	var warns atomic.Int64
	m, err := model.NewScripted(model.Script{Steps: []model.ScriptStep{{Answer: "answered by A"}}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := host.New(context.Background(), host.Config{
		Driver: d, Model: m, HostName: "A", LeaseTTL: longLease, PollInterval: 30 * time.Millisecond,
		Logger: slog.New(warnCounter{want: "refuses to give a thread up", n: &warns}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		a.Close(ctx)
	})
	newSharedHost(t, "B", mem, false, longLease) // the home of some threads
	k := 0
	round := func() {
		t.Helper()
		for i := range 16 {
			k++
			tk, err := a.Submit(context.Background(), fmt.Sprintf("T%d", i), fmt.Sprintf("input %d", k), host.SubmitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			res, err := a.Wait(ctx, tk.RunID)
			cancel()
			if err != nil || res.State != record.StateCompleted {
				t.Fatalf("run %s: %v %v", tk.RunID, res.State, err)
			}
		}
	}
	// Until A sees B's lease, A is alone and hands nothing back.
	for deadline := time.Now().Add(timeout); d.refused.Load() == 0 && time.Now().Before(deadline); {
		round()
	}
	for range 3 {
		round()
	}
	if d.refused.Load() == 0 {
		t.Fatal("no thread was given up: the test proves nothing")
	}
	if got := d.refused.Load(); got != 1 {
		t.Errorf("the host asked the driver to give a thread up %d times after its refusal", got-1)
	}
	if got := warns.Load(); got != 1 {
		t.Errorf("%d warnings about the refusal, want 1", got)
	}
}

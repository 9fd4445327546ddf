package driverrpc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var memFactory = storedriver.FactoryFunc(func(ctx context.Context, config map[string]string) (driver.Driver, error) {
	if len(config) != 0 {
		return nil, fmt.Errorf("%w: memstore takes no configuration", driver.ErrInvalidArgument)
	}
	return memdriver.New(), nil
})

// connect returns a client over an in-process go-plugin gRPC connection to
// a server of f.
func connect(t *testing.T, f storedriver.Factory) *driverrpc.Client {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, driverrpc.PluginSets(driverrpc.NewServer(f))[driver.ProtocolVersion])
	// Closing the client shuts the server down (go-plugin's controller).
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(driverrpc.PluginName)
	if err != nil {
		t.Fatal(err)
	}
	return raw.(*driverrpc.Client)
}

func TestContractOverGRPC(t *testing.T) {
	storedrivertest.Run(t, func(t *testing.T) driver.Driver {
		c := connect(t, memFactory)
		if err := c.Open(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		return c
	})
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	c := connect(t, memFactory)
	_, err := c.LoadThread(ctx, "t")
	if !errors.Is(err, driver.ErrClosed) || !strings.Contains(err.Error(), "not opened") {
		t.Fatalf("call before Open: %v, want ErrClosed saying it was not opened", err)
	}
	err = c.Open(ctx, map[string]string{"dir": "x"})
	if !errors.Is(err, driver.ErrInvalidArgument) || !strings.Contains(err.Error(), "no configuration") {
		t.Fatalf("Open with a bad config: %v, want ErrInvalidArgument with the driver's reason", err)
	}
	if err := c.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Open(ctx, nil); !errors.Is(err, driver.ErrInvalidArgument) {
		t.Fatalf("second Open: %v, want ErrInvalidArgument", err)
	}
}

func TestErrorsRoundTrip(t *testing.T) {
	for _, s := range []error{driver.ErrVersionConflict, driver.ErrNotFound, driver.ErrInvalidArgument,
		driver.ErrTooLarge, driver.ErrUnavailable, driver.ErrClosed, context.Canceled, context.DeadlineExceeded} {
		in := fmt.Errorf("%w: detail", s)
		out := driverrpc.FromStatus(driverrpc.ToStatus(in))
		if !errors.Is(out, s) {
			t.Errorf("%v crossed as %v, which is not %v", in, out, s)
		}
		if out.Error() != in.Error() {
			t.Errorf("%q crossed as %q", in, out)
		}
		for _, other := range []error{driver.ErrVersionConflict, driver.ErrNotFound, driver.ErrInvalidArgument} {
			if other != s && errors.Is(out, other) {
				t.Errorf("%v crossed as %v, which is also %v", in, out, other)
			}
		}
	}
	plain := driverrpc.FromStatus(driverrpc.ToStatus(errors.New("disk on fire")))
	if plain == nil || !strings.Contains(plain.Error(), "disk on fire") || errors.Is(plain, driver.ErrUnavailable) {
		t.Errorf("a plain error crossed as %v", plain)
	}
}

func TestTooLarge(t *testing.T) {
	ctx := context.Background()
	c := connect(t, memFactory)
	if err := c.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", driverrpc.MaxMessageSize+1)
	b := driver.Batch{CommitID: "c", ThreadID: "t", Thread: record.Thread{ID: "t", Version: 1, LastCommitID: "c"},
		Messages: []record.Message{{ID: "m", ThreadID: "t", Seq: 1, Content: big}}}
	if _, err := c.Commit(ctx, b); !errors.Is(err, driver.ErrTooLarge) {
		t.Fatalf("commit over the message size limit: %v, want ErrTooLarge", err)
	}
	snap, err := c.LoadThread(ctx, "t")
	if err != nil || snap.Thread.Version != 0 {
		t.Fatalf("after a refused commit: %+v, %v", snap, err)
	}
}

// TestConcurrentCommitsOwnResults: concurrent commits share round trips
// (CommitMany); each still gets its own result, good or bad.
func TestConcurrentCommitsOwnResults(t *testing.T) {
	ctx := context.Background()
	c := connect(t, memFactory)
	if err := c.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	const n = 200
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			th := fmt.Sprintf("t%d", i)
			b := driver.Batch{CommitID: "c", ThreadID: th, Thread: record.Thread{ID: th, Version: 1, LastCommitID: "c"},
				Messages: []record.Message{{ID: "m-" + th, ThreadID: th, Seq: 1}}}
			switch i % 3 {
			case 1:
				b.ExpectedVersion, b.Thread.Version = 5, 6 // conflict
			case 2:
				b.Messages[0].ID = "" // invalid
			}
			_, errs[i] = c.Commit(ctx, b)
		})
	}
	wg.Wait()
	for i, err := range errs {
		want := []error{nil, driver.ErrVersionConflict, driver.ErrInvalidArgument}[i%3]
		if (want == nil && err != nil) || (want != nil && !errors.Is(err, want)) {
			t.Fatalf("commit %d: %v, want %v", i, err, want)
		}
		snap, err := c.LoadThread(ctx, fmt.Sprintf("t%d", i))
		if err != nil || (snap.Thread.Version == 1) != (want == nil) {
			t.Fatalf("thread t%d after its commit: %+v, %v", i, snap.Thread, err)
		}
	}
	// A commit whose context is already done is not sent.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	b := driver.Batch{CommitID: "c", ThreadID: "tc", Thread: record.Thread{ID: "tc", Version: 1, LastCommitID: "c"}}
	if _, err := c.Commit(cctx, b); !errors.Is(err, context.Canceled) {
		t.Fatalf("commit with a canceled context: %v", err)
	}
}

// TestLoneCommitsOwnResults: commits made one after another, each alone on
// the wire (sent from the caller's goroutine), get their own results, and
// concurrent ones that follow still do.
func TestLoneCommitsOwnResults(t *testing.T) {
	ctx := context.Background()
	c := connect(t, memFactory)
	if err := c.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	batch := func(v int64) driver.Batch {
		cid := fmt.Sprintf("c%d", v)
		return driver.Batch{CommitID: cid, ThreadID: "t", ExpectedVersion: v - 1, Thread: record.Thread{ID: "t", Version: v, LastCommitID: cid},
			Messages: []record.Message{{ID: fmt.Sprintf("m%d", v), ThreadID: "t", Seq: v}}}
	}
	for v := int64(1); v <= 20; v++ {
		if got, err := c.Commit(ctx, batch(v)); err != nil || got != v {
			t.Fatalf("commit %d: version %d, %v", v, got, err)
		}
		if _, err := c.Commit(ctx, batch(v)); !errors.Is(err, driver.ErrVersionConflict) {
			t.Fatalf("commit %d again: %v, want a version conflict", v, err)
		}
		bad := batch(v + 1)
		bad.Messages[0].ID = ""
		if _, err := c.Commit(ctx, bad); !errors.Is(err, driver.ErrInvalidArgument) {
			t.Fatalf("commit %d without a message id: %v, want invalid argument", v+1, err)
		}
	}
	snap, err := c.LoadThread(ctx, "t")
	if err != nil || snap.Thread.Version != 20 {
		t.Fatalf("after the commits: %+v, %v", snap.Thread, err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range errs {
		wg.Go(func() {
			th := fmt.Sprintf("u%d", i)
			_, errs[i] = c.Commit(ctx, driver.Batch{CommitID: "c", ThreadID: th, Thread: record.Thread{ID: th, Version: 1, LastCommitID: "c"}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent commit %d: %v", i, err)
		}
	}
}

package driverrpc_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/go-plugin"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/plugins/badgerstore/badgerdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// badgerFactory opens badgerstore on a test directory: a driver of store
// protocol 2.
func badgerFactory(t *testing.T) storedriver.Factory {
	dir := t.TempDir()
	return storedriver.FactoryFunc(func(ctx context.Context, _ map[string]string) (driver.Driver, error) {
		return badgerdriver.Open(badgerdriver.DefaultConfig(dir))
	})
}

// connectAt returns a client over a go-plugin connection whose handshake
// chose protocol version v.
func connectAt(t *testing.T, f storedriver.Factory, v int) *driverrpc.Client {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, driverrpc.PluginSetsFor(driverrpc.NewServer(f), v)[v])
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(driverrpc.PluginName)
	if err != nil {
		t.Fatal(err)
	}
	c := raw.(*driverrpc.Client)
	if err := c.Open(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func TestStepConversions(t *testing.T) {
	r := record.Run{ID: "r", ThreadID: "t", State: record.StateCompleted, TakenBy: "a", TranscriptIDs: []string{"m1", "m3", "m2"}, Attempt: 2, Owner: "h"}
	if got := driverrpc.RunFromProto(driverrpc.RunToProto(r)); !reflect.DeepEqual(got, r) {
		t.Fatalf("run round trip: %+v, want %+v", got, r)
	}
	run := storedrivertest.Activate(record.Run{ID: "r", ThreadID: "t"}, "h", 3)
	for _, s := range storedrivertest.Steps(run, 1, 3) {
		got := driverrpc.StepFromProto(driverrpc.StepToProto(s))
		if !reflect.DeepEqual(record.NormalizeStep(got), record.NormalizeStep(s)) {
			t.Fatalf("%s step round trip: %+v, want %+v", s.Kind, got, s)
		}
	}
	b := driver.StepBatch{ThreadID: "t", RunID: "r", Owner: "h", Attempt: 3, Fence: 7, Steps: storedrivertest.Steps(run, 1, 2)}
	got := driverrpc.StepBatchFromProto(driverrpc.StepBatchToProto(b))
	if got.ThreadID != b.ThreadID || got.RunID != b.RunID || got.Owner != b.Owner || got.Attempt != b.Attempt || got.Fence != b.Fence || len(got.Steps) != 2 {
		t.Fatalf("step batch round trip: %+v, want %+v", got, b)
	}
	batch := driver.Batch{CommitID: "c", ThreadID: "t", Steps: b.Steps}
	if got := driverrpc.BatchFromProto(driverrpc.BatchToProto(batch)); len(got.Steps) != 2 || got.Steps[1].ID != b.Steps[1].ID {
		t.Fatalf("batch steps round trip: %+v", got.Steps)
	}
}

// TestStepsOverGRPC: the step calls of a protocol 2 driver cross the wire
// with their errors; the contract's step rules hold through it.
func TestStepsOverGRPC(t *testing.T) {
	storedrivertest.Run(t, func(t *testing.T) driver.Driver {
		c := connectAt(t, badgerFactory(t), 2)
		info, err := c.Info(context.Background())
		if err != nil || info.ProtocolVersion != 2 {
			t.Fatalf("Info = %+v, %v; want protocol 2", info, err)
		}
		d := c.ForProtocol(info.ProtocolVersion)
		if driver.Speaks(d) != 2 {
			t.Fatalf("the client of a protocol 2 driver is %T, without the step interfaces", d)
		}
		return d
	})
}

// TestStepsRefusedByProtocol1: a driver speaks protocol 1 when the
// handshake chose 1, or when it does not implement the step interfaces
// (memstore here): Info says 1, and the step calls and a batch with steps
// are refused with ErrInvalidArgument, writing nothing.
func TestStepsRefusedByProtocol1(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]*driverrpc.Client{
		"handshake 1":          connectAt(t, badgerFactory(t), 1),
		"driver without steps": connectAt(t, noStepsFactory, 2),
	} {
		t.Run(name, func(t *testing.T) {
			info, err := c.Info(ctx)
			if err != nil || info.ProtocolVersion != 1 {
				t.Fatalf("Info = %+v, %v; want protocol 1", info, err)
			}
			if _, ok := c.ForProtocol(info.ProtocolVersion).(driver.StepStore); ok {
				t.Fatal("ForProtocol(1) is a step store")
			}
			th := storedrivertest.NewBuilder("t")
			r := storedrivertest.Activate(th.Run("r"), "h", 1)
			b := th.Batch([]string{r.ID}, []record.Run{r}, nil, nil)
			b.Steps = []record.Step{storedrivertest.Step(r, 1)}
			if _, err := c.Commit(ctx, b); !errors.Is(err, driver.ErrInvalidArgument) {
				t.Fatalf("a batch with steps: %v, want ErrInvalidArgument", err)
			}
			if snap, err := c.LoadThread(ctx, "t"); err != nil || snap.Thread.Version != 0 {
				t.Fatalf("after the refused batch: %+v, %v", snap, err)
			}
			s := c.Steps()
			err = s.CommitSteps(ctx, storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 1)))
			if !errors.Is(err, driver.ErrInvalidArgument) || !strings.Contains(err.Error(), "protocol 1") {
				t.Fatalf("CommitSteps: %v, want ErrInvalidArgument naming protocol 1", err)
			}
			if _, err := s.ReadSteps(ctx, "r", 0, 10); !errors.Is(err, driver.ErrInvalidArgument) {
				t.Fatalf("ReadSteps: %v, want ErrInvalidArgument", err)
			}
			if _, err := s.ListThreads(ctx, "", 10); !errors.Is(err, driver.ErrInvalidArgument) {
				t.Fatalf("ListThreads: %v, want ErrInvalidArgument", err)
			}
		})
	}
}

// TestStepBatchTooLarge: a step batch over driver.MaxBatchBytes is refused
// with ErrTooLarge before the driver sees it.
func TestStepBatchTooLarge(t *testing.T) {
	c := connectAt(t, badgerFactory(t), 2).Steps()
	r := storedrivertest.Activate(record.Run{ID: "r", ThreadID: "t"}, "h", 1)
	s := storedrivertest.Step(r, 1)
	s.Message.Content = strings.Repeat("x", driver.MaxBatchBytes+1)
	err := c.CommitSteps(context.Background(), storedrivertest.StepBatchOf(r, s))
	if !errors.Is(err, driver.ErrTooLarge) {
		t.Fatalf("a step batch over the limit: %v, want ErrTooLarge", err)
	}
}

// noStepsFactory opens memstore behind a value that hides its step
// interfaces: a driver built before store protocol 2.
var noStepsFactory = storedriver.FactoryFunc(func(ctx context.Context, config map[string]string) (driver.Driver, error) {
	d, err := memFactory.Open(ctx, config)
	if err != nil {
		return nil, err
	}
	return struct{ driver.Driver }{d}, nil
})

package driverrpc_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/abi/storepb"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/sdk/storedriver"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// gatedServer serves a driver and holds every step commit until gate is
// closed, counting the calls; with loseReply, a CommitStepsMany's reply is
// lost after the driver committed its batches.
type gatedServer struct {
	*driverrpc.Server
	gate         chan struct{}
	single, many atomic.Int64 // calls
	manyBatches  atomic.Int64 // batches in CommitStepsMany calls
	loseReply    bool
}

func (s *gatedServer) CommitSteps(ctx context.Context, req *storepb.CommitStepsRequest) (*storepb.CommitStepsResponse, error) {
	s.single.Add(1)
	<-s.gate
	return s.Server.CommitSteps(ctx, req)
}

func (s *gatedServer) CommitStepsMany(ctx context.Context, req *storepb.CommitStepsManyRequest) (*storepb.CommitStepsManyResponse, error) {
	s.many.Add(1)
	s.manyBatches.Add(int64(len(req.GetBatches())))
	<-s.gate
	r, err := s.Server.CommitStepsMany(ctx, req)
	if err == nil && s.loseReply {
		return nil, status.Error(codes.Unavailable, "connection reset: the reply was lost")
	}
	return r, err
}

// gatedPlugin serves a gatedServer; with old, as a driver built with an
// SDK from before CommitStepsMany: its service does not have the method.
type gatedPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	s   *gatedServer
	old bool
}

func (p *gatedPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	desc := storepb.Store_ServiceDesc
	if p.old {
		desc.Methods = slices.DeleteFunc(slices.Clone(desc.Methods), func(m grpc.MethodDesc) bool { return m.MethodName == "CommitStepsMany" })
	}
	s.RegisterService(&desc, p.s)
	return nil
}

func (p *gatedPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return driverrpc.NewClient(c), nil
}

// connectGated returns a client of a gated server of f, and the server.
func connectGated(t *testing.T, f storedriver.Factory, old, loseReply bool) (*driverrpc.Client, *gatedServer) {
	t.Helper()
	s := &gatedServer{Server: driverrpc.NewServer(f), gate: make(chan struct{}), loseReply: loseReply}
	client, _ := plugin.TestPluginGRPCConn(t, false, plugin.PluginSet{driverrpc.PluginName: &gatedPlugin{s: s, old: old}})
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
	return c, s
}

// activeRuns commits n active runs, each on a thread of its own.
func activeRuns(t *testing.T, c *driverrpc.Client, n int) []record.Run {
	t.Helper()
	runs := make([]record.Run, n)
	for i := range runs {
		th := storedrivertest.NewBuilder(fmt.Sprintf("t%d", i))
		r := storedrivertest.Activate(th.Run(th.ID+"-run"), storedrivertest.StepOwner, storedrivertest.StepAttempt)
		if _, err := c.Commit(context.Background(), th.Batch([]string{r.ID}, []record.Run{r}, []record.Message{th.Msg(r.ID+"-in", r.ID)}, nil)); err != nil {
			t.Fatal(err)
		}
		runs[i] = r
	}
	return runs
}

// eventually waits, for long, until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// burst commits batches[i] from a goroutine each, so that the client
// groups them: the first two go alone and wait at the server's gate, the
// others queue behind them; then the gate opens. It returns each commit's
// error.
func burst(t *testing.T, c *driverrpc.Client, s *gatedServer, batches []driver.StepBatch) []error {
	t.Helper()
	errs := make([]error, len(batches))
	var wg sync.WaitGroup
	commit := func(i int) {
		wg.Go(func() { errs[i] = c.Steps().CommitSteps(context.Background(), batches[i]) })
	}
	commit(0)
	commit(1)
	eventually(t, "two lone step commits are at the server", func() bool { return s.single.Load() == 2 })
	for i := 2; i < len(batches); i++ {
		commit(i)
	}
	eventually(t, "the other step commits are queued", func() bool { return driverrpc.StepsQueued(c) == len(batches)-2 })
	close(s.gate)
	wg.Wait()
	return errs
}

// expectLog checks that run r's log holds exactly steps.
func expectLog(t *testing.T, c *driverrpc.Client, r record.Run, steps []record.Step) {
	t.Helper()
	got, err := c.Steps().ReadSteps(context.Background(), r.ID, 0, 100)
	if err != nil || len(got) != len(steps) {
		t.Fatalf("run %s's log: %d steps, %v; want %d", r.ID, len(got), err, len(steps))
	}
	for i := range got {
		if got[i].ID != steps[i].ID {
			t.Fatalf("run %s's step %d is %s, want %s", r.ID, i+1, got[i].ID, steps[i].ID)
		}
	}
}

// countingStepsMany is a driver whose driverrpc.StepsManyCommitter calls
// are counted.
type countingStepsMany struct {
	driver.Driver
	driver.StepStore
	driver.ThreadLister
	many  driverrpc.StepsManyCommitter
	calls *atomic.Int64
}

func (d countingStepsMany) CommitStepsMany(ctx context.Context, bs []driver.StepBatch) []error {
	d.calls.Add(1)
	return d.many.CommitStepsMany(ctx, bs)
}

// TestStepCommitsGroupedOwnResults: concurrent step commits share a round
// trip (CommitStepsMany), and each gets its own result: committed, refused
// as another execution's (a conflict), or refused for what it holds;
// whether the server hands the call to the driver whole
// (driverrpc.StepsManyCommitter) or a batch at a time.
func TestStepCommitsGroupedOwnResults(t *testing.T) {
	for _, whole := range []bool{true, false} {
		t.Run(fmt.Sprintf("whole=%v", whole), func(t *testing.T) {
			var calls atomic.Int64
			f := badgerFactory(t)
			wrapped := storedriver.FactoryFunc(func(ctx context.Context, config map[string]string) (driver.Driver, error) {
				d, err := f.Open(ctx, config)
				if err != nil {
					return nil, err
				}
				if whole {
					return countingStepsMany{d, d.(driver.StepStore), d.(driver.ThreadLister), d.(driverrpc.StepsManyCommitter), &calls}, nil
				}
				// Without CommitStepsMany: one CommitSteps per batch.
				return struct {
					driver.Driver
					driver.StepStore
					driver.ThreadLister
				}{d, d.(driver.StepStore), d.(driver.ThreadLister)}, nil
			})
			testStepCommitsGroupedOwnResults(t, wrapped)
			if whole && calls.Load() == 0 {
				t.Fatal("the server did not hand CommitStepsMany to the driver whole")
			}
		})
	}
}

func testStepCommitsGroupedOwnResults(t *testing.T, f storedriver.Factory) {
	c, s := connectGated(t, f, false, false)
	const n = 30
	runs := activeRuns(t, c, n)
	batches := make([]driver.StepBatch, n)
	for i, r := range runs {
		b := storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 1))
		switch i % 3 {
		case 1:
			b.Owner = "another-host" // not this run's execution
		case 2:
			b.Steps[0].ID = "" // invalid
		}
		batches[i] = b
	}
	errs := burst(t, c, s, batches)
	if s.many.Load() == 0 || s.manyBatches.Load() != n-2 {
		t.Fatalf("%d CommitStepsMany calls with %d batches; want the %d queued commits grouped", s.many.Load(), s.manyBatches.Load(), n-2)
	}
	for i, err := range errs {
		want := []error{nil, driver.ErrVersionConflict, driver.ErrInvalidArgument}[i%3]
		if (want == nil && err != nil) || (want != nil && !errors.Is(err, want)) {
			t.Fatalf("step commit %d: %v, want %v", i, err, want)
		}
		if want == nil {
			expectLog(t, c, runs[i], batches[i].Steps)
		} else {
			expectLog(t, c, runs[i], nil)
		}
	}
	if driverrpc.StepsOneByOne(c) {
		t.Fatal("the client gave up CommitStepsMany on a driver that has it")
	}
}

// TestStepCommitsGroupedLostReply: when the reply of a CommitStepsMany is
// lost, each of its commits fails with ErrUnavailable, an unknown outcome,
// which reading the run's steps settles (here: committed).
func TestStepCommitsGroupedLostReply(t *testing.T) {
	c, s := connectGated(t, badgerFactory(t), false, true)
	const n = 12
	runs := activeRuns(t, c, n)
	batches := make([]driver.StepBatch, n)
	for i, r := range runs {
		batches[i] = storedrivertest.StepBatchOf(r, storedrivertest.Steps(r, 1, 2)...)
	}
	errs := burst(t, c, s, batches)
	for i, err := range errs {
		switch {
		case i < 2 && err != nil:
			t.Fatalf("lone step commit %d: %v", i, err)
		case i >= 2 && !errors.Is(err, driver.ErrUnavailable):
			t.Fatalf("step commit %d whose reply was lost: %v, want ErrUnavailable", i, err)
		}
		expectLog(t, c, runs[i], batches[i].Steps)
	}
}

// TestStepCommitsOlderSDK: a driver served by an SDK without
// CommitStepsMany (its service answers UNIMPLEMENTED) gets the grouped
// step commits one by one, each with its own result, and every later one
// alone.
func TestStepCommitsOlderSDK(t *testing.T) {
	c, s := connectGated(t, badgerFactory(t), true, false)
	const n = 20
	runs := activeRuns(t, c, n)
	batches := make([]driver.StepBatch, n)
	for i, r := range runs {
		batches[i] = storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 1))
		if i%2 == 1 {
			batches[i].Attempt++ // another attempt's: a conflict
		}
	}
	errs := burst(t, c, s, batches)
	for i, err := range errs {
		if want := i%2 == 1; want != errors.Is(err, driver.ErrVersionConflict) || (!want && err != nil) {
			t.Fatalf("step commit %d: %v", i, err)
		}
	}
	if !driverrpc.StepsOneByOne(c) {
		t.Fatal("the client did not fall back to CommitSteps")
	}
	if got := s.single.Load(); got != n {
		t.Fatalf("%d CommitSteps calls, want %d (one per commit)", got, n)
	}
	// From now on concurrent step commits go one by one.
	var wg sync.WaitGroup
	errs = make([]error, n)
	for i, r := range runs {
		wg.Go(func() {
			errs[i] = c.Steps().CommitSteps(context.Background(), storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 2)))
		})
	}
	wg.Wait()
	for i, r := range runs {
		want := storedrivertest.Steps(r, 1, 2)
		if i%2 == 1 {
			// seq 1 was refused, so seq 2 does not follow the log.
			if errs[i] == nil {
				t.Fatalf("step 2 of run %s without step 1: committed", r.ID)
			}
			want = nil
		} else if errs[i] != nil {
			t.Fatalf("step 2 of run %s: %v", r.ID, errs[i])
		}
		expectLog(t, c, r, want)
	}
	if got := s.single.Load(); got != 2*n {
		t.Fatalf("%d CommitSteps calls, want %d", got, 2*n)
	}
}

// TestStepCommitsGroupedProtocol1: grouped step commits to a driver that
// keeps no steps are refused each as CommitSteps refuses them.
func TestStepCommitsGroupedProtocol1(t *testing.T) {
	c, s := connectGated(t, noStepsFactory, false, false)
	r := storedrivertest.Activate(record.Run{ID: "r", ThreadID: "t"}, "h", 1)
	batches := make([]driver.StepBatch, 8)
	for i := range batches {
		batches[i] = storedrivertest.StepBatchOf(r, storedrivertest.Step(r, 1))
	}
	for i, err := range burst(t, c, s, batches) {
		if !errors.Is(err, driver.ErrInvalidArgument) {
			t.Fatalf("step commit %d to a protocol 1 driver: %v, want ErrInvalidArgument", i, err)
		}
	}
}

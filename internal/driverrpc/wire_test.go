package driverrpc_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/abi/storepb"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/plugins/badgerstore/badgerdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// wireRecorder is badgerstore, noting the wire forms it is handed.
type wireRecorder struct {
	*badgerdriver.Driver
	mu  sync.Mutex
	got [][]*driverrpc.Encoded
}

func (w *wireRecorder) CommitManyEncoded(ctx context.Context, bs []driver.Batch, enc []*driverrpc.Encoded) ([]int64, []error) {
	w.mu.Lock()
	w.got = append(w.got, enc)
	w.mu.Unlock()
	return w.Driver.CommitManyEncoded(ctx, bs, enc)
}

// TestCommitManyWire: through a driver process's gRPC server, CommitMany
// hands an EncodedCommitter each batch's records as the host encoded them,
// which decode to the batch's records; the driver stores them and reads
// them back whole.
func TestCommitManyWire(t *testing.T) {
	ctx := context.Background()
	rec := &wireRecorder{}
	srv := driverrpc.NewServer(storedriver.FactoryFunc(func(context.Context, map[string]string) (driver.Driver, error) {
		d, err := badgerdriver.Open(badgerdriver.DefaultConfig(t.TempDir()))
		rec.Driver = d
		return rec, err
	}))
	gs := driverrpc.NewGRPCServer(nil)
	if err := (&driverrpc.GRPCPlugin{Impl: srv, Version: driver.ProtocolVersion}).GRPCServer(nil, gs); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", filepath.Join(t.TempDir(), "sock"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := driverrpc.NewClient(conn)
	if err := c.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)

	var bs []driver.Batch
	for _, id := range []string{"w1", "w2"} {
		th := storedrivertest.NewBuilder(id)
		r := th.Run(id + "-r")
		bs = append(bs, th.Batch([]string{r.ID}, []record.Run{r}, []record.Message{th.Msg(id+"-m1", r.ID), th.Msg(id+"-m2", r.ID)},
			[]record.Idempotency{th.Key("k", r.ID, id+"-m1")}))
	}
	req := &storepb.CommitManyRequest{}
	for _, b := range bs {
		req.Batches = append(req.Batches, driverrpc.BatchToProto(b))
	}
	res, err := storepb.NewStoreClient(conn).CommitMany(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res.Results {
		if r.Code != 0 || r.Version != 1 {
			t.Fatalf("batch %d: %+v", i, r)
		}
	}
	if len(rec.got) != 1 || len(rec.got[0]) != len(bs) {
		t.Fatalf("the driver was handed wire forms %v, want one call of %d batches", rec.got, len(bs))
	}
	same := func(what string, raw []byte, want proto.Message) {
		t.Helper()
		got := want.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(raw, got); err != nil || !proto.Equal(got, want) {
			t.Fatalf("%s: wire form decodes to %v (%v), want %v", what, got, err, want)
		}
	}
	for i, e := range rec.got[0] {
		b := bs[i]
		if e == nil {
			t.Fatalf("batch %d: no wire form", i)
		}
		if e.Size != proto.Size(req.Batches[i]) {
			t.Errorf("batch %d: size %d, want %d", i, e.Size, proto.Size(req.Batches[i]))
		}
		same("thread", e.Thread, driverrpc.ThreadToProto(b.Thread))
		if len(e.Runs) != 1 || len(e.Messages) != 2 || len(e.Idempotency) != 1 || len(e.Steps) != 0 {
			t.Fatalf("batch %d: %d runs, %d messages, %d keys, %d steps", i, len(e.Runs), len(e.Messages), len(e.Idempotency), len(e.Steps))
		}
		same("run", e.Runs[0], driverrpc.RunToProto(b.Runs[0]))
		for j := range e.Messages {
			same("message", e.Messages[j], driverrpc.MessageToProto(b.Messages[j]))
		}
		same("idempotency", e.Idempotency[0], driverrpc.IdempotencyToProto(b.Idempotency[0]))

		snap, err := c.LoadThread(ctx, b.ThreadID)
		if err != nil || !reflect.DeepEqual(snap.Thread, b.Thread) || !reflect.DeepEqual(snap.Runs, b.Runs) {
			t.Fatalf("thread %s read back: %+v, %v; want %+v", b.ThreadID, snap, err, b)
		}
		msgs, err := c.ReadHistory(ctx, b.ThreadID, 0, 10)
		if err != nil || !reflect.DeepEqual(msgs, b.Messages) {
			t.Fatalf("history of %s: %+v, %v; want %+v", b.ThreadID, msgs, err, b.Messages)
		}
		k, err := c.GetIdempotency(ctx, b.ThreadID, "k")
		if err != nil || !reflect.DeepEqual(k, b.Idempotency[0]) {
			t.Fatalf("key of %s: %+v, %v", b.ThreadID, k, err)
		}
	}
}

// stepsWireRecorder is badgerstore, noting the wire forms of steps it is
// handed.
type stepsWireRecorder struct {
	*badgerdriver.Driver
	mu  sync.Mutex
	got [][]*driverrpc.EncodedSteps
}

func (w *stepsWireRecorder) CommitStepsManyEncoded(ctx context.Context, bs []driver.StepBatch, enc []*driverrpc.EncodedSteps) []error {
	w.mu.Lock()
	w.got = append(w.got, enc)
	w.mu.Unlock()
	return w.Driver.CommitStepsManyEncoded(ctx, bs, enc)
}

// grpcClient returns a client over a driver process's gRPC server (its
// codec and service as storedriver.Serve registers them) serving srv.
func grpcClient(t *testing.T, srv *driverrpc.Server) *driverrpc.Client {
	t.Helper()
	gs := driverrpc.NewGRPCServer(nil)
	if err := (&driverrpc.GRPCPlugin{Impl: srv, Version: driver.ProtocolVersion}).GRPCServer(nil, gs); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", filepath.Join(t.TempDir(), "sock"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return driverrpc.NewClient(conn)
}

// TestCommitStepsWire: over gRPC and over the direct transport, CommitSteps
// and CommitStepsMany hand an EncodedStepsCommitter each batch's steps as
// the host encoded them, with the batch's size on the wire; the driver
// stores them and reads them back whole. A batch the server refuses is
// refused as without them.
func TestCommitStepsWire(t *testing.T) {
	for _, transport := range []string{"grpc", "direct"} {
		t.Run(transport, func(t *testing.T) {
			ctx := context.Background()
			rec := &stepsWireRecorder{}
			f := storedriver.FactoryFunc(func(context.Context, map[string]string) (driver.Driver, error) {
				d, err := badgerdriver.Open(badgerdriver.DefaultConfig(t.TempDir()))
				rec.Driver = d
				return rec, err
			})
			var c *driverrpc.Client
			if transport == "grpc" {
				c = grpcClient(t, driverrpc.NewServer(f))
			} else {
				c, _ = connectDirect(t, f)
			}
			if err := c.Open(ctx, nil); err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			var runs []record.Run
			for _, id := range []string{"w1", "w2"} {
				th := storedrivertest.NewBuilder(id)
				r := storedrivertest.Activate(th.Run(id+"-r"), storedrivertest.StepOwner, storedrivertest.StepAttempt)
				if _, err := c.Commit(ctx, th.Batch([]string{r.ID}, []record.Run{r}, []record.Message{th.Msg(id+"-m", r.ID)}, nil)); err != nil {
					t.Fatal(err)
				}
				runs = append(runs, r)
			}
			check := func(call int, bs []driver.StepBatch) {
				t.Helper()
				if len(rec.got) != call+1 || len(rec.got[call]) != len(bs) {
					t.Fatalf("the driver was handed wire forms %v, want call %d of %d batches", rec.got, call, len(bs))
				}
				for i, e := range rec.got[call] {
					if e == nil || len(e.Steps) != len(bs[i].Steps) {
						t.Fatalf("batch %d: wire form %+v", i, e)
					}
					if want := proto.Size(driverrpc.StepBatchToProto(bs[i])); e.Size != want {
						t.Errorf("batch %d: size %d, want %d", i, e.Size, want)
					}
					for j, raw := range e.Steps {
						got := &storepb.Step{}
						if err := proto.Unmarshal(raw, got); err != nil || !proto.Equal(got, driverrpc.StepToProto(bs[i].Steps[j])) {
							t.Fatalf("batch %d step %d: wire form decodes to %v (%v)", i, j, got, err)
						}
					}
				}
			}

			// One batch: CommitSteps.
			one := storedrivertest.StepBatchOf(runs[0], storedrivertest.Steps(runs[0], 1, 2)...)
			if err := c.Steps().CommitSteps(ctx, one); err != nil {
				t.Fatal(err)
			}
			check(0, []driver.StepBatch{one})

			// Two: CommitStepsMany, each with its own result.
			many := []driver.StepBatch{
				storedrivertest.StepBatchOf(runs[0], storedrivertest.Steps(runs[0], 3, 4)...),
				storedrivertest.StepBatchOf(runs[1], storedrivertest.Steps(runs[1], 1, 3)...),
				storedrivertest.StepBatchOf(runs[1], storedrivertest.Step(runs[1], 9)), // not the next seq
			}
			errs, err := driverrpc.CommitStepsManyCall(c, many)
			if err != nil || len(errs) != 3 || errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], driver.ErrVersionConflict) {
				t.Fatalf("CommitStepsMany: %v, %v; want two committed, a conflict", errs, err)
			}
			check(1, many)

			// Refused by the server's checks: the driver sees none of it.
			fenced := storedrivertest.StepBatchOf(runs[1], storedrivertest.Step(runs[1], 4))
			fenced.Fence = 7
			if err := c.Steps().CommitSteps(ctx, fenced); !errors.Is(err, driver.ErrInvalidArgument) {
				t.Fatalf("a fenced batch: %v, want ErrInvalidArgument", err)
			}
			if len(rec.got) != 2 {
				t.Fatalf("the driver was handed a batch the server refused: %v", rec.got)
			}

			for _, w := range []struct {
				r    record.Run
				want []record.Step
			}{{runs[0], storedrivertest.Steps(runs[0], 1, 4)}, {runs[1], storedrivertest.Steps(runs[1], 1, 3)}} {
				got, err := c.Steps().ReadSteps(ctx, w.r.ID, 0, 10)
				if err != nil || !reflect.DeepEqual(mapNormal(got), mapNormal(w.want)) {
					t.Fatalf("steps of %s read back: %+v, %v; want %+v", w.r.ID, got, err, w.want)
				}
			}
		})
	}
}

func mapNormal(steps []record.Step) []record.Step {
	out := make([]record.Step, len(steps))
	for i, s := range steps {
		out[i] = record.NormalizeStep(s)
	}
	return out
}

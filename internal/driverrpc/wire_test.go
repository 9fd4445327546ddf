package driverrpc_test

import (
	"context"
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

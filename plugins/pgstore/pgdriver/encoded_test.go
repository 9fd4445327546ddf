package pgdriver_test

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// wireOf returns the wire form of b's records as a host sends them, each
// with extra appended (a field the driver does not know, so that a stored
// payload shows whether it is the bytes sent or an encoding of its own).
func wireOf(t *testing.T, b driver.Batch, extra []byte) *driverrpc.Encoded {
	t.Helper()
	pb := driverrpc.BatchToProto(b)
	enc := func(m proto.Message) []byte {
		v, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return append(v, extra...)
	}
	e := &driverrpc.Encoded{Thread: enc(pb.Thread)}
	for _, r := range pb.Runs {
		e.Runs = append(e.Runs, enc(r))
	}
	for _, m := range pb.Messages {
		e.Messages = append(e.Messages, enc(m))
	}
	for _, k := range pb.Idempotency {
		e.Idempotency = append(e.Idempotency, enc(k))
	}
	for _, s := range pb.Steps {
		e.Steps = append(e.Steps, enc(s))
	}
	return e
}

// TestCommitManyEncoded: the records of a group committed with their wire
// form (driverrpc.EncodedCommitter) are stored as they were sent, byte for
// byte, and read back as the batch's records; a batch without a wire form,
// or with one that does not match it, is encoded by the driver; a wire
// form over the size limit is refused.
func TestCommitManyEncoded(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	d := open(t, url, "encoded")
	unknown := protowire.AppendBytes(protowire.AppendTag(nil, 1000, protowire.BytesType), []byte("sent"))

	a, b, c := storedrivertest.NewBuilder("A"), storedrivertest.NewBuilder("B"), storedrivertest.NewBuilder("C")
	a1 := storedrivertest.Activate(a.Run("a1"), storedrivertest.StepOwner, storedrivertest.StepAttempt)
	ba := a.Batch([]string{a1.ID}, []record.Run{a1}, []record.Message{a.Msg("a1-in", a1.ID)}, []record.Idempotency{a.Key("ka", a1.ID, "a1-in")})
	ba.Steps = []record.Step{storedrivertest.Step(a1, 1)}
	b1 := b.Run("b1")
	bb := b.Batch([]string{b1.ID}, []record.Run{b1}, []record.Message{b.Msg("b1-in", b1.ID)}, nil)
	c1 := c.Run("c1")
	bc := c.Batch([]string{c1.ID}, []record.Run{c1}, []record.Message{c.Msg("c1-in", c1.ID)}, nil)
	wa := wireOf(t, ba, unknown)
	wc := wireOf(t, bc, unknown)
	wc.Runs = nil // does not match bc: encoded by the driver

	batches := []driver.Batch{ba, bb, bc}
	_, errs := d.CommitManyEncoded(ctx, batches, []*driverrpc.Encoded{wa, nil, wc})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	payload := func(query string, args ...any) []byte {
		t.Helper()
		var p []byte
		if err := conn.QueryRow(ctx, query, args...).Scan(&p); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return p
	}
	for _, c := range []struct {
		name string
		got  []byte
		sent []byte
	}{
		{"thread", payload("SELECT payload FROM encoded.threads WHERE id = 'A'"), wa.Thread},
		{"run", payload("SELECT payload FROM encoded.runs WHERE id = $1", a1.ID), wa.Runs[0]},
		{"message", payload("SELECT payload FROM encoded.messages WHERE id = 'a1-in'"), wa.Messages[0]},
		{"key", payload("SELECT payload FROM encoded.idempotency WHERE key = 'ka'"), wa.Idempotency[0]},
		{"step", payload("SELECT payload FROM encoded.steps WHERE run_id = $1", a1.ID), wa.Steps[0]},
	} {
		if !bytes.Equal(c.got, c.sent) {
			t.Errorf("%s stored as %x, sent as %x", c.name, c.got, c.sent)
		}
	}
	for _, id := range []string{b1.ID, c1.ID} {
		if p := payload("SELECT payload FROM encoded.runs WHERE id = $1", id); bytes.HasSuffix(p, unknown) {
			t.Errorf("run %s stored with the wire form's unknown field, want the driver's encoding", id)
		}
	}

	for i, th := range []*storedrivertest.Builder{a, b, c} {
		th.Committed(batches[i])
		snap, err := d.LoadThread(ctx, th.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(snap.Thread, batches[i].Thread) {
			t.Errorf("thread %s read back as %+v, committed %+v", th.ID, snap.Thread, batches[i].Thread)
		}
		msgs, err := d.ReadHistory(ctx, th.ID, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(msgs, batches[i].Messages) {
			t.Errorf("thread %s history %+v, committed %+v", th.ID, msgs, batches[i].Messages)
		}
	}
	runs, err := d.GetRuns(ctx, []string{a1.ID, b1.ID, c1.ID})
	if err != nil {
		t.Fatal(err)
	}
	if want := []record.Run{a1, b1, c1}; !reflect.DeepEqual(runs, want) {
		t.Errorf("runs %+v, committed %+v", runs, want)
	}
	k, err := d.GetIdempotency(ctx, "A", "ka")
	if err != nil || !reflect.DeepEqual(k, ba.Idempotency[0]) {
		t.Errorf("key ka: %+v, %v; committed %+v", k, err, ba.Idempotency[0])
	}
	steps, err := d.ReadSteps(ctx, a1.ID, 0, 10)
	if err != nil || !reflect.DeepEqual(steps, ba.Steps) {
		t.Errorf("steps of %s: %+v, %v; committed %+v", a1.ID, steps, err, ba.Steps)
	}

	// The size limit holds for the wire form too.
	big := b.Batch(b.Open, nil, nil, nil)
	wbig := wireOf(t, big, unknown)
	wbig.Thread = append(wbig.Thread, protowire.AppendBytes(protowire.AppendTag(nil, 1001, protowire.BytesType), make([]byte, driver.MaxBatchBytes))...)
	if _, errs := d.CommitManyEncoded(ctx, []driver.Batch{big}, []*driverrpc.Encoded{wbig}); !errors.Is(errs[0], driver.ErrTooLarge) {
		t.Errorf("a wire form over the limit: %v, want ErrTooLarge", errs[0])
	}
}

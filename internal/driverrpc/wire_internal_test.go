package driverrpc

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/abi/storepb"
)

// TestEncodedBatchesMismatch: bytes that do not split one for one into the
// decoded request's records (a thread sent twice, which proto merges) give
// no wire form; canonical bytes do.
func TestEncodedBatchesMismatch(t *testing.T) {
	b := &storepb.Batch{CommitId: "c", ThreadId: "t", Thread: &storepb.Thread{Id: "t", Version: 1}, Runs: []*storepb.Run{{Id: "r"}}}
	raw, err := proto.Marshal(&storepb.CommitManyRequest{Batches: []*storepb.Batch{b}})
	if err != nil {
		t.Fatal(err)
	}
	req := &storepb.CommitManyRequest{}
	if err := proto.Unmarshal(raw, req); err != nil {
		t.Fatal(err)
	}
	if enc := encodedBatches(req, raw); len(enc) != 1 || len(enc[0].Runs) != 1 || enc[0].Thread == nil {
		t.Fatalf("canonical bytes: %+v", enc)
	}

	// The batch again, with a second thread field.
	batch, _ := proto.Marshal(b)
	second, _ := proto.Marshal(&storepb.Thread{LastCommitId: "o"})
	batch = protowire.AppendTag(batch, 4, protowire.BytesType)
	batch = protowire.AppendBytes(batch, second)
	raw = protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), batch)
	req = &storepb.CommitManyRequest{}
	if err := proto.Unmarshal(raw, req); err != nil {
		t.Fatal(err)
	}
	if req.Batches[0].Thread.LastCommitId != "o" || req.Batches[0].Thread.Version != 1 {
		t.Fatalf("proto did not merge the two threads: %v", req.Batches[0].Thread)
	}
	if enc := encodedBatches(req, raw); enc != nil {
		t.Fatalf("a thread sent twice: %+v, want no wire form", enc)
	}
	if enc := encodedBatches(req, nil); enc != nil {
		t.Fatalf("no bytes: %+v", enc)
	}
}

// TestEncodedStepBatches: a request's bytes split into each batch's steps,
// unless they do not match the decoded batches one for one.
func TestEncodedStepBatches(t *testing.T) {
	b := &storepb.StepBatch{RunId: "r", Steps: []*storepb.Step{{Id: "s1", Seq: 1}, {Id: "s2", Seq: 2}}}
	raw, err := proto.Marshal(&storepb.CommitStepsManyRequest{Batches: []*storepb.StepBatch{b, b}})
	if err != nil {
		t.Fatal(err)
	}
	req := &storepb.CommitStepsManyRequest{}
	if err := proto.Unmarshal(raw, req); err != nil {
		t.Fatal(err)
	}
	enc := encodedStepBatches(req.Batches, raw)
	if len(enc) != 2 || len(enc[1].Steps) != 2 || enc[1].Size != proto.Size(b) {
		t.Fatalf("canonical bytes: %+v", enc)
	}
	if got := &(storepb.Step{}); proto.Unmarshal(enc[1].Steps[1], got) != nil || got.Id != "s2" {
		t.Fatalf("step 2 of batch 2 decodes to %v", got)
	}
	if enc := encodedStepBatches(req.Batches[:1], raw); enc != nil {
		t.Fatalf("more batches than decoded: %+v", enc)
	}
	short := []*storepb.StepBatch{req.Batches[0], {RunId: "r", Steps: req.Batches[1].Steps[:1]}}
	if enc := encodedStepBatches(short, raw); enc != nil {
		t.Fatalf("more steps than decoded: %+v", enc)
	}
	if enc := encodedStepBatches(req.Batches, nil); enc != nil {
		t.Fatalf("no bytes: %+v", enc)
	}
}

package driverrpc_test

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/abi/storepb"
	"github.com/agenthost/agenthost/internal/driverrpc"
)

// TestBatchToProto: a batch's wire form, taken from shared allocations, is
// the one its records convert to one by one, and converts back to the batch.
func TestBatchToProto(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890, time.UTC)
	b := driver.Batch{CommitID: "c2", ThreadID: "th", ExpectedVersion: 1, Fence: 7,
		Thread: record.Thread{ID: "th", Version: 2, NextRunSeq: 3, NextMessageSeq: 4, OpenRunIDs: []string{"r2"},
			LastCommitID: "c2", Owner: 5, UpdatedAt: at},
		Runs: []record.Run{
			{ID: "r1", ThreadID: "th", Seq: 1, State: record.StateCompleted, TerminalReason: record.TerminalReason("answered"),
				InputMessageIDs: []string{"m1"}, AssistantMessageID: "m2", AnswerSeq: 2, Attempt: 2, Owner: "h1",
				EndSeq: 2, CreatedAt: at, StartedAt: at.Add(time.Second), EndedAt: at.Add(2 * time.Second),
				TranscriptIDs: []string{"m1", "m2"}, WaitTakeovers: 1},
			{ID: "r2", ThreadID: "th", Seq: 2, State: record.StateQueued, InputMessageIDs: []string{"m3"}, CreatedAt: at},
		},
		Messages: []record.Message{
			{ID: "m2", ThreadID: "th", RunID: "r1", Seq: 2, Role: record.RoleAssistant, Content: "hi",
				ToolCalls: []record.ToolCall{{ID: "t1", Name: "f", Arguments: "{}"}}, CreatedAt: at},
			{ID: "m3", ThreadID: "th", RunID: "r2", Seq: 3, Role: record.RoleUser, Content: "again"}, // no time
		},
		Idempotency: []record.Idempotency{{ThreadID: "th", Key: "k", RunID: "r2", InputMessageID: "m3", CreatedAt: at}},
	}
	got := driverrpc.BatchToProto(b)
	want := &storepb.Batch{CommitId: b.CommitID, ThreadId: b.ThreadID, ExpectedVersion: b.ExpectedVersion, Fence: b.Fence,
		Thread: driverrpc.ThreadToProto(b.Thread), Runs: driverrpc.RunsToProto(b.Runs),
		Messages:    driverrpc.MessagesToProto(b.Messages),
		Idempotency: []*storepb.Idempotency{driverrpc.IdempotencyToProto(b.Idempotency[0])}}
	if !proto.Equal(got, want) {
		t.Fatalf("BatchToProto:\n got %v\nwant %v", got, want)
	}
	if back := driverrpc.BatchFromProto(got); !reflect.DeepEqual(back, b) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, b)
	}
	if got.Messages[1].CreatedAt != nil {
		t.Fatalf("a zero time crossed as %v", got.Messages[1].CreatedAt)
	}
}

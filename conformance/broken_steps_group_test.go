package conformance_test

import (
	"context"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/driverrpc"
)

// TestBrokenStepsBreakEveryGroupedCommit: the protocol's server hands a
// group of commits to a driver's CommitManyEncoded when it has one, so a
// broken step driver must break that path as it breaks Commit, or the
// suite would see a correct driver for every grouped commit.
func TestBrokenStepsBreakEveryGroupedCommit(t *testing.T) {
	ctx := context.Background()
	d, err := brokenStepFactory("approval-dropped").Open(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	ec, ok := d.(driverrpc.EncodedCommitter)
	if !ok {
		t.Skip("the broken driver takes no encoded groups")
	}
	b := driver.Batch{CommitID: "c1", ThreadID: "th", ExpectedVersion: 0,
		Thread: record.Thread{ID: "th", Version: 1, LastCommitID: "c1", OpenRunIDs: []string{"run1"}, NextRunSeq: 2, NextMessageSeq: 2},
		Runs: []record.Run{{ID: "run1", ThreadID: "th", Seq: 1, State: record.StateActive, Owner: "o", Attempt: 1,
			InputMessageIDs: []string{"msg1"}, Pending: []string{"call1"}}},
		Messages: []record.Message{{ID: "msg1", ThreadID: "th", RunID: "run1", Seq: 1, Role: record.RoleUser, Content: "hi"}},
	}
	_, errs := ec.CommitManyEncoded(ctx, []driver.Batch{b}, nil)
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	runs, err := d.GetRuns(ctx, []string{"run1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs[0].Pending) != 0 {
		t.Fatalf("a grouped commit kept the run's Pending %v: approval-dropped is not broken there", runs[0].Pending)
	}
}

// TestBrokenStepsBreakEncodedStepCommits: the protocol's server hands step
// batches to a driver's CommitStepsManyEncoded when it has one, CommitSteps
// included, so a broken step driver must break that path too.
func TestBrokenStepsBreakEncodedStepCommits(t *testing.T) {
	ctx := context.Background()
	d, err := brokenStepFactory("steps-ignore-owner").Open(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	ec, ok := d.(driverrpc.EncodedStepsCommitter)
	if !ok {
		t.Skip("the broken driver takes no encoded step batches")
	}
	b := driver.Batch{CommitID: "c1", ThreadID: "th", ExpectedVersion: 0,
		Thread: record.Thread{ID: "th", Version: 1, LastCommitID: "c1", OpenRunIDs: []string{"run1"}, NextRunSeq: 2, NextMessageSeq: 2},
		Runs: []record.Run{{ID: "run1", ThreadID: "th", Seq: 1, State: record.StateActive, Owner: "o", Attempt: 1,
			InputMessageIDs: []string{"msg1"}}},
		Messages: []record.Message{{ID: "msg1", ThreadID: "th", RunID: "run1", Seq: 1, Role: record.RoleUser, Content: "hi"}},
	}
	if _, err := d.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
	sb := driver.StepBatch{ThreadID: "th", RunID: "run1", Owner: "another", Attempt: 1,
		Steps: []record.Step{{ID: "s1", RunID: "run1", ThreadID: "th", Seq: 1, Attempt: 1, Kind: record.StepModel,
			Message: record.Message{ID: "s1-m", ThreadID: "th", RunID: "run1", Role: record.RoleAssistant, Content: "x"}}}}
	if errs := ec.CommitStepsManyEncoded(ctx, []driver.StepBatch{sb}, nil); errs[0] != nil {
		t.Fatalf("another owner's steps refused (%v): steps-ignore-owner is not broken there", errs[0])
	}
}

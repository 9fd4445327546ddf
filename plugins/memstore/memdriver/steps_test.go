package memdriver_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// activeRun commits thread th with one run, active under owner h1.
func activeRun(t *testing.T, d driver.Driver, th string) (*storedrivertest.Builder, record.Run) {
	t.Helper()
	ctx := context.Background()
	b := storedrivertest.NewBuilder(th)
	r := b.Run(th + "-A")
	m := b.Msg(r.InputMessageIDs[0], r.ID)
	batch := b.Batch([]string{r.ID}, []record.Run{r}, []record.Message{m}, nil)
	if _, err := d.Commit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	b.Committed(batch)
	r.State, r.Owner = record.StateActive, "h1"
	batch = b.Batch([]string{r.ID}, []record.Run{r}, nil, nil)
	if _, err := d.Commit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	b.Committed(batch)
	return b, r
}

func step(r record.Run, seq int64, kind record.StepKind) record.Step {
	s := record.Step{ID: fmt.Sprintf("%s-step-%d", r.ID, seq), RunID: r.ID, ThreadID: r.ThreadID, Seq: seq, Attempt: r.Attempt, Kind: kind, CreatedAt: storedrivertest.T0}
	switch kind {
	case record.StepModel:
		s.Message = record.Message{ID: s.ID + "-m", ThreadID: r.ThreadID, RunID: r.ID, Role: record.RoleAssistant, ToolCalls: []record.ToolCall{{ID: "c1", Name: "search"}}}
	case record.StepTool:
		s.Message = record.Message{ID: s.ID + "-m", ThreadID: r.ThreadID, RunID: r.ID, Role: record.RoleTool, ToolCallID: "c1", Content: "ok"}
	case record.StepTake:
		s.Taken = []record.Take{{RunID: "q", InputMessageIDs: []string{"q-in"}}}
	}
	return s
}

func TestStepsCommitAndRead(t *testing.T) {
	ctx := context.Background()
	d := memdriver.New()
	b, r := activeRun(t, d, "T")
	sb := driver.StepBatch{ThreadID: "T", RunID: r.ID, Owner: "h1", Attempt: 1,
		Steps: []record.Step{step(r, 1, record.StepModel), step(r, 2, record.StepTool)}}
	if err := d.CommitSteps(ctx, sb); err != nil {
		t.Fatal(err)
	}
	// The thread's version does not move.
	snap, err := d.LoadThread(ctx, "T")
	if err != nil || snap.Thread.Version != b.Version {
		t.Fatalf("thread after steps: version %d, %v; want %d", snap.Thread.Version, err, b.Version)
	}
	// A step that is not the next Seq, and one written again, conflict.
	for _, bad := range [][]record.Step{{step(r, 4, record.StepTake)}, {step(r, 2, record.StepTool)}} {
		sb.Steps = bad
		if err := d.CommitSteps(ctx, sb); !errors.Is(err, driver.ErrVersionConflict) {
			t.Fatalf("CommitSteps(seq %d) = %v, want ErrVersionConflict", bad[0].Seq, err)
		}
	}
	// Steps go in a batch too, checked against the log.
	sb.Steps = []record.Step{step(r, 3, record.StepTake)}
	batch := b.Batch([]string{r.ID}, []record.Run{r}, nil, nil)
	batch.Steps = []record.Step{step(r, 4, record.StepModel)}
	if _, err := d.Commit(ctx, batch); !errors.Is(err, driver.ErrVersionConflict) {
		t.Fatalf("Commit with a step past the log's end = %v, want ErrVersionConflict", err)
	}
	batch.Steps = []record.Step{step(r, 3, record.StepTake)}
	if _, err := d.Commit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	b.Committed(batch)
	got, err := d.ReadSteps(ctx, r.ID, 0, 10)
	if err != nil || len(got) != 3 {
		t.Fatalf("ReadSteps = %d steps, %v; want 3", len(got), err)
	}
	for i, s := range got {
		if s.Seq != int64(i+1) || s.ID != step(r, s.Seq, s.Kind).ID {
			t.Fatalf("step %d = %+v", i, s)
		}
	}
	if got[2].Kind != record.StepTake || got[2].Taken[0].InputMessageIDs[0] != "q-in" {
		t.Fatalf("take step = %+v", got[2])
	}
	got, _ = d.ReadSteps(ctx, r.ID, 1, 1)
	if len(got) != 1 || got[0].Seq != 2 {
		t.Fatalf("ReadSteps(after 1, limit 1) = %+v", got)
	}
	if got, _ = d.ReadSteps(ctx, "nobody", 0, 10); len(got) != 0 {
		t.Fatalf("an unknown run has steps: %+v", got)
	}
	// A run that is no longer active, or another attempt or owner, writes no steps.
	sb.Steps = []record.Step{step(r, 4, record.StepModel)}
	sb.Owner = "h2"
	if err := d.CommitSteps(ctx, sb); !errors.Is(err, driver.ErrVersionConflict) {
		t.Fatalf("CommitSteps by another owner = %v, want ErrVersionConflict", err)
	}
	sb.Owner, sb.Attempt = "h1", 2
	if err := d.CommitSteps(ctx, sb); !errors.Is(err, driver.ErrVersionConflict) {
		t.Fatalf("CommitSteps of another attempt = %v, want ErrVersionConflict", err)
	}
	sb.Attempt = 1
	r.State, r.TerminalReason = record.StateFailed, record.ReasonFailed
	batch = b.Batch(nil, []record.Run{r}, nil, nil)
	if _, err := d.Commit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if err := d.CommitSteps(ctx, sb); !errors.Is(err, driver.ErrVersionConflict) {
		t.Fatalf("CommitSteps of an ended run = %v, want ErrVersionConflict", err)
	}
	// Bad arguments.
	for name, bad := range map[string]record.Step{
		"no id":        {RunID: r.ID, ThreadID: "T", Seq: 4, Kind: record.StepModel},
		"unknown kind": {ID: "x", RunID: r.ID, ThreadID: "T", Seq: 4, Kind: "nap"},
		"other thread": {ID: "x", RunID: r.ID, ThreadID: "U", Seq: 4, Kind: record.StepModel},
	} {
		sb.Steps = []record.Step{bad}
		if err := d.CommitSteps(ctx, sb); !errors.Is(err, driver.ErrInvalidArgument) {
			t.Errorf("%s: CommitSteps = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := d.ReadSteps(ctx, r.ID, 0, 0); !errors.Is(err, driver.ErrInvalidArgument) {
		t.Errorf("ReadSteps(limit 0) = %v, want ErrInvalidArgument", err)
	}
	d.Close(ctx)
	if _, err := d.ReadSteps(ctx, r.ID, 0, 1); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("ReadSteps after Close = %v, want ErrClosed", err)
	}
}

func TestStepsFenced(t *testing.T) {
	ctx := context.Background()
	d := memdriver.NewShared(nil)
	b, r := activeRun(t, d, "T")
	mine, err := d.AcquireLease(ctx, "h1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sb := driver.StepBatch{ThreadID: "T", RunID: r.ID, Owner: "h1", Attempt: 1, Fence: mine.Epoch, Steps: []record.Step{step(r, 1, record.StepModel)}}
	// A live lease that does not own the thread (no lease does yet) is
	// refused: steps never take a thread over.
	if err := d.CommitSteps(ctx, sb); !errors.Is(err, driver.ErrFenced) {
		t.Fatalf("CommitSteps fenced by a lease that does not own the thread = %v, want ErrFenced", err)
	}
	take := b.Batch([]string{r.ID}, nil, nil, nil)
	take.Fence, take.Thread.Owner = mine.Epoch, mine.Epoch
	if _, err := d.Commit(ctx, take); err != nil {
		t.Fatal(err)
	}
	if err := d.CommitSteps(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := d.ReleaseLease(ctx, mine.Epoch); err != nil {
		t.Fatal(err)
	}
	sb.Steps = []record.Step{step(r, 2, record.StepTool)}
	if err := d.CommitSteps(ctx, sb); !errors.Is(err, driver.ErrFenced) {
		t.Fatalf("CommitSteps under a dead lease = %v, want ErrFenced", err)
	}
}

func TestListThreads(t *testing.T) {
	ctx := context.Background()
	d := memdriver.New()
	for _, th := range []string{"c", "a", "b"} {
		activeRun(t, d, th)
	}
	var got []string
	after := ""
	for {
		page, err := d.ListThreads(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, th := range page {
			got = append(got, th.ID)
		}
		after = page[len(page)-1].ID
	}
	if fmt.Sprint(got) != "[a b c]" {
		t.Fatalf("ListThreads pages = %v, want [a b c]", got)
	}
	if _, err := d.ListThreads(ctx, "", 0); !errors.Is(err, driver.ErrInvalidArgument) {
		t.Fatalf("ListThreads(limit 0) = %v", err)
	}
}

package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// lossySteps loses the reply of every other step commit, after applying it.
type lossySteps struct {
	*memdriver.Driver
	n int
}

func (l *lossySteps) CommitSteps(ctx context.Context, b driver.StepBatch) error {
	err := l.Driver.CommitSteps(ctx, b)
	l.n++
	if err == nil && l.n%2 == 1 {
		return fmt.Errorf("%w: reply lost", driver.ErrUnavailable)
	}
	return err
}

// noSteps is a driver of the first protocol: it keeps no step records.
type noSteps struct{ driver.Driver }

func modelStep(run record.Run, seq int64) record.Step {
	id := fmt.Sprintf("%s-step-%d", run.ID, seq)
	return record.Step{ID: id, RunID: run.ID, ThreadID: run.ThreadID, Seq: seq, Attempt: run.Attempt, Kind: record.StepModel,
		Message: record.Message{ID: id + "-m", ThreadID: run.ThreadID, RunID: run.ID, Role: record.RoleAssistant, Content: "thinking"}}
}

func TestCommitStepsSettlesLostReplies(t *testing.T) {
	ctx := context.Background()
	d := &lossySteps{Driver: memdriver.New()}
	s := store.New(d, store.Options{})
	if !s.StepsKept() {
		t.Fatal("a driver with step records is taken for one without")
	}
	mustAdmit(t, s, store.Submission{ThreadID: "T", Content: "q"}, nil)
	run, err := s.Start(ctx, "T", "h1")
	if err != nil {
		t.Fatal(err)
	}
	for seq := int64(1); seq <= 4; seq++ {
		if err := s.CommitSteps(ctx, run, []record.Step{modelStep(run, seq)}); err != nil {
			t.Fatalf("step %d: %v", seq, err)
		}
	}
	got, err := s.ReadSteps(ctx, run.ID, 0, 0)
	if err != nil || len(got) != 4 {
		t.Fatalf("ReadSteps = %d steps, %v; want 4, each once", len(got), err)
	}
	// Another owner's steps are refused as a conflict, not retried.
	other := run
	other.Owner = "h2"
	if err := s.CommitSteps(ctx, other, []record.Step{modelStep(run, 5)}); !errors.Is(err, driver.ErrVersionConflict) {
		t.Fatalf("steps of another owner: %v, want ErrVersionConflict", err)
	}
}

func TestTakeAndCancelTaken(t *testing.T) {
	ctx := context.Background()
	s, d := newStore(t)
	mustAdmit(t, s, store.Submission{ThreadID: "T", Content: "a"}, nil)
	run, err := s.Start(ctx, "T", "h1")
	if err != nil {
		t.Fatal(err)
	}
	b := mustAdmit(t, s, store.Submission{ThreadID: "T", Content: "make it shorter"}, decideAlways(runstate.ActionInject, true))
	before, _ := d.LoadThread(ctx, "T")
	res, err := s.Take(ctx, run, []record.Take{{RunID: b.RunID, InputMessageIDs: []string{b.InputMessageID}}}, "step-1", 1, 1)
	if err != nil || res.Step == nil || len(res.Refused) != 0 {
		t.Fatalf("Take = %+v, %v", res, err)
	}
	after, _ := d.LoadThread(ctx, "T")
	if after.Thread.Version != before.Thread.Version+1 || after.Runs[1].TakenBy != run.ID {
		t.Fatalf("after the take: version %d (was %d), queued run %+v", after.Thread.Version, before.Thread.Version, after.Runs[1])
	}
	steps, _ := s.ReadSteps(ctx, run.ID, 0, 0)
	if len(steps) != 1 || steps[0].Kind != record.StepTake || steps[0].Taken[0].RunID != b.RunID {
		t.Fatalf("step log = %+v", steps)
	}
	// Another input coalesces into no taken run.
	c := mustAdmit(t, s, store.Submission{ThreadID: "T", Content: "another question"}, decideAlways(runstate.ActionInject, true))
	if c.Coalesced || c.RunID == b.RunID {
		t.Fatalf("an input joined the taken run: %+v", c)
	}
	_, err = s.Cancel(ctx, b.RunID)
	var te *runstate.TakenError
	if !errors.As(err, &te) || te.TakenBy != run.ID {
		t.Fatalf("cancel of the taken run = %v, want ErrTaken naming %s", err, run.ID)
	}
	// Once its taker is canceled, it is an ordinary queued run.
	if _, err := s.CancelActive(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, b.RunID); err != nil {
		t.Fatalf("cancel after the taker ended: %v", err)
	}
}

func TestStepsFallback(t *testing.T) {
	ctx := context.Background()
	s := store.New(noSteps{memdriver.New()}, store.Options{})
	if s.StepsKept() {
		t.Fatal("a driver without step records is taken for one with")
	}
	mustAdmit(t, s, store.Submission{ThreadID: "T", Content: "q"}, nil)
	run, err := s.Start(ctx, "T", "h1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CommitSteps(ctx, run, []record.Step{modelStep(run, 1)}); !errors.Is(err, store.ErrNoSteps) {
		t.Fatalf("CommitSteps = %v, want ErrNoSteps", err)
	}
	if _, err := s.Take(ctx, run, []record.Take{{RunID: "x"}}, "s", 1, 0); !errors.Is(err, store.ErrNoSteps) {
		t.Fatalf("Take = %v, want ErrNoSteps", err)
	}
	if steps, err := s.ReadSteps(ctx, run.ID, 0, 0); err != nil || len(steps) != 0 {
		t.Fatalf("ReadSteps = %v, %v; want none", steps, err)
	}
}

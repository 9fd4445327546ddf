package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
)

// ErrNoSteps: the driver keeps no step records (it does not implement
// driver.StepStore). A host over it restarts a recovered run from its
// first step and takes nothing by injection.
var ErrNoSteps = errors.New("the store driver keeps no step records")

// StepsKept reports whether the driver keeps step records.
func (s *Store) StepsKept() bool { return s.steps != nil }

// CommitSteps appends steps to the log of run, which executes under
// run.Owner, without moving the thread's version (see
// driver.StepStore.CommitSteps). A commit whose outcome is unknown
// (driver.ErrUnavailable) is settled by reading the log back, by step id,
// and tried again when it did not land. A refusal because the run is no
// longer this execution's (ended, recovered, another attempt) is
// driver.ErrVersionConflict; a fenced one, driver.ErrFenced.
func (s *Store) CommitSteps(ctx context.Context, run record.Run, steps []record.Step) error {
	if s.steps == nil {
		return ErrNoSteps
	}
	if len(steps) == 0 {
		return nil
	}
	b := driver.StepBatch{ThreadID: run.ThreadID, RunID: run.ID, Owner: run.Owner, Attempt: run.Attempt,
		Fence: s.opt.Fence(run.Owner), Steps: steps}
	backoff := 10 * time.Millisecond
	for attempt := 0; ; attempt++ {
		began := time.Now()
		err := s.steps.CommitSteps(ctx, b)
		if s.opt.ObserveCommit != nil {
			s.opt.ObserveCommit(time.Since(began), err)
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, driver.ErrFenced):
			return &FencedError{ThreadID: run.ThreadID, Err: err}
		case errors.Is(err, driver.ErrClosed):
			return fmt.Errorf("committing steps of run %s: %w", run.ID, err)
		}
		// Unavailable, or a refusal that may be this very batch applied by
		// an earlier try whose reply was lost (its Seq taken: a conflict;
		// its ids stored: invalid): read it back. The earlier try may be
		// the caller's, before a call of its own that returned
		// ErrOutcomeUnknown, so a first refusal is read back too.
		applied, serr := s.stepsApplied(ctx, run.ID, steps)
		switch {
		case serr == nil && applied:
			return nil
		case serr == nil && (errors.Is(err, driver.ErrVersionConflict) || errors.Is(err, driver.ErrInvalidArgument) || errors.Is(err, driver.ErrTooLarge)):
			return fmt.Errorf("committing steps of run %s: %w", run.ID, err)
		case errors.Is(err, driver.ErrInvalidArgument) || errors.Is(err, driver.ErrTooLarge):
			// Refused for what it holds, or already stored: which is not
			// known until the log can be read.
			return fmt.Errorf("%w: committing steps of run %s: %w (reading back: %w)", ErrOutcomeUnknown, run.ID, err, serr)
		case serr != nil && ctx.Err() != nil:
			return fmt.Errorf("%w: committing steps of run %s: %w (reading back: %w)", ErrOutcomeUnknown, run.ID, err, serr)
		case attempt+1 >= s.opt.MaxRetries:
			return fmt.Errorf("%w: committing steps of run %s: %w", ErrOutcomeUnknown, run.ID, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: committing steps of run %s: %w", ErrOutcomeUnknown, run.ID, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// StepsApplied reports whether steps, committed for the run runID by a call
// whose outcome is unknown, are in the run's log: by id, at their Seq.
func (s *Store) StepsApplied(ctx context.Context, runID string, steps []record.Step) (bool, error) {
	if s.steps == nil {
		return false, ErrNoSteps
	}
	if len(steps) == 0 {
		return true, nil
	}
	return s.stepsApplied(ctx, runID, steps)
}

// stepsApplied reports whether steps are in their run's log, by id at
// their Seq.
func (s *Store) stepsApplied(ctx context.Context, runID string, steps []record.Step) (bool, error) {
	got, err := s.steps.ReadSteps(ctx, runID, steps[0].Seq-1, len(steps))
	if err != nil {
		return false, err
	}
	if len(got) == 0 || got[0].ID != steps[0].ID {
		return false, nil
	}
	// A batch is applied whole or not at all: its first step tells. The
	// rest are checked as a store that kept part of one is broken.
	if len(got) != len(steps) || !slices.EqualFunc(got, steps, func(a, b record.Step) bool { return a.ID == b.ID }) {
		return false, fmt.Errorf("run %s's step log holds part of a batch starting at %s", runID, steps[0].ID)
	}
	return true, nil
}

// ReadSteps returns the steps of run runID with Seq > afterSeq, up to
// limit (every one after afterSeq when limit <= 0), in Seq order. Over a
// driver without step records, a run has none.
func (s *Store) ReadSteps(ctx context.Context, runID string, afterSeq int64, limit int) ([]record.Step, error) {
	if s.steps == nil {
		return nil, nil
	}
	var out []record.Step
	for limit <= 0 || len(out) < limit {
		n := s.opt.PageSize
		if limit > 0 {
			n = min(n, limit-len(out))
		}
		page, err := s.steps.ReadSteps(ctx, runID, afterSeq, n)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < n {
			break
		}
		afterSeq = page[len(page)-1].Seq
	}
	return out, nil
}

// TakeResult is the outcome of Take.
type TakeResult struct {
	// Step is the take step record written; nil when nothing was taken.
	Step *record.Step
	// Refused lists the entries not taken, with why.
	Refused []runstate.DroppedAbsorb
}

// Take records, through the normal commit path, that run (active under
// run.Owner) takes the inputs of entries at a step boundary, as the step
// record of Seq seq of its log (see runstate.Take). Over a driver without
// step records it takes nothing (ErrNoSteps).
func (s *Store) Take(ctx context.Context, run record.Run, entries []record.Take, stepID string, seq int64, model int) (TakeResult, error) {
	if s.steps == nil {
		return TakeResult{}, ErrNoSteps
	}
	eff, err := s.reduce(ctx, run.ThreadID, s.opt.Fence(run.Owner), func() runstate.Mutation {
		return runstate.Take{ThreadID: run.ThreadID, RunID: run.ID, Owner: run.Owner, Entries: entries,
			StepID: stepID, Seq: seq, Model: model, Now: s.opt.Now()}
	})
	if err != nil {
		return TakeResult{}, err
	}
	res := TakeResult{Refused: eff.Dropped}
	if len(eff.Steps) == 1 {
		st := eff.Steps[0]
		res.Step = &st
	}
	return res, nil
}

// Wait records, through the normal commit path, that run (active under
// run.Owner, at run.Attempt) waits for answers to the calls of asks, its
// StepAsk records (see runstate.Wait). It returns the run as committed.
func (s *Store) Wait(ctx context.Context, run record.Run, asks []record.Step) (record.Run, error) {
	if s.steps == nil {
		return record.Run{}, ErrNoSteps
	}
	eff, err := s.reduce(ctx, run.ThreadID, s.opt.Fence(run.Owner), func() runstate.Mutation {
		return runstate.Wait{ThreadID: run.ThreadID, RunID: run.ID, Owner: run.Owner, Attempt: run.Attempt, Asks: asks, Now: s.opt.Now()}
	})
	if err != nil {
		return record.Run{}, err
	}
	return *eff.Run, nil
}

// Answer commits answer a to the pending call a.CallID of run runID (see
// runstate.Answer), reading the run's step log for the call's ask and
// earlier answers at every attempt. Any host may commit it: it is not
// fenced. It returns the run as it is after the answer and the outcome.
func (s *Store) Answer(ctx context.Context, runID string, a record.Answer) (record.Run, runstate.AnswerResult, error) {
	if s.steps == nil {
		return record.Run{}, runstate.AnswerResult{}, ErrNoSteps
	}
	run, err := s.GetRun(ctx, runID)
	if err != nil {
		return record.Run{}, runstate.AnswerResult{}, err
	}
	stepID := s.opt.NewID("step")
	eff, err := s.apply(ctx, run.ThreadID, "", unfenced, true, func(snap runstate.Snapshot, _ bool) (runstate.Effects, error) {
		// Read after the snapshot: an answer committed since moves the
		// thread's version, so this commit conflicts and is redone.
		steps, err := s.ReadSteps(ctx, runID, 0, 0)
		if err != nil {
			return runstate.Effects{}, fmt.Errorf("reading run %s's steps: %w", runID, err)
		}
		m := runstate.Answer{ThreadID: run.ThreadID, RunID: runID, Answer: a, StepID: stepID, Seq: int64(len(steps)) + 1, Now: s.opt.Now()}
		for _, st := range steps {
			switch {
			case st.Kind == record.StepAsk && st.Ask.CallID == a.CallID:
				// A model may use a call id again in a later step: the
				// answers are those to the last ask with the id, after it;
				// those to earlier asks keep their keys.
				ask := st
				m.Ask, m.Earlier, m.Prior = &ask, append(m.Earlier, m.Prior...), nil
			case st.Kind == record.StepAnswer && st.Answer.CallID == a.CallID:
				m.Prior = append(m.Prior, st)
			}
		}
		if len(steps) > 0 {
			m.Seq = steps[len(steps)-1].Seq + 1
		}
		return runstate.Reduce(snap, m)
	})
	if err != nil {
		return record.Run{}, runstate.AnswerResult{}, err
	}
	res := *eff.Answered
	if eff.Run != nil {
		return *eff.Run, res, nil
	}
	run, err = s.GetRun(ctx, runID) // a duplicate answer to a run that has ended
	return run, res, err
}

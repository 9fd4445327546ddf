package storedriver

import (
	"fmt"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

// ValidateBatch checks the shape of a batch: the checks every driver makes
// before it writes anything. It does not check versions or existing records.
func ValidateBatch(b driver.Batch) error {
	switch {
	case b.ThreadID == "":
		return fmt.Errorf("%w: batch has no thread id", driver.ErrInvalidArgument)
	case b.CommitID == "":
		return fmt.Errorf("%w: batch has no commit id", driver.ErrInvalidArgument)
	case b.ExpectedVersion < 0:
		return fmt.Errorf("%w: negative expected version %d", driver.ErrInvalidArgument, b.ExpectedVersion)
	case b.Thread.ID != b.ThreadID:
		return fmt.Errorf("%w: thread header is for %q, batch for %q", driver.ErrInvalidArgument, b.Thread.ID, b.ThreadID)
	case b.Thread.Version != b.ExpectedVersion+1:
		return fmt.Errorf("%w: new thread version %d is not expected version %d + 1", driver.ErrInvalidArgument, b.Thread.Version, b.ExpectedVersion)
	case b.Thread.LastCommitID != b.CommitID:
		return fmt.Errorf("%w: thread header does not carry the batch's commit id", driver.ErrInvalidArgument)
	}
	seen := make(map[string]bool, len(b.Runs))
	for i, r := range b.Runs {
		switch {
		case r.ID == "":
			return fmt.Errorf("%w: run %d has no id", driver.ErrInvalidArgument, i)
		case r.ThreadID != b.ThreadID:
			return fmt.Errorf("%w: run %s belongs to thread %q, not %q", driver.ErrInvalidArgument, r.ID, r.ThreadID, b.ThreadID)
		case !r.State.Valid():
			return fmt.Errorf("%w: run %s has unknown state %q", driver.ErrInvalidArgument, r.ID, r.State)
		case seen[r.ID]:
			return fmt.Errorf("%w: run %s appears twice", driver.ErrInvalidArgument, r.ID)
		}
		seen[r.ID] = true
	}
	seen = make(map[string]bool, len(b.Messages))
	for i, m := range b.Messages {
		switch {
		case m.ID == "":
			return fmt.Errorf("%w: message %d has no id", driver.ErrInvalidArgument, i)
		case m.ThreadID != b.ThreadID:
			return fmt.Errorf("%w: message %s belongs to thread %q, not %q", driver.ErrInvalidArgument, m.ID, m.ThreadID, b.ThreadID)
		case m.Seq <= 0:
			return fmt.Errorf("%w: message %s has seq %d", driver.ErrInvalidArgument, m.ID, m.Seq)
		case seen[m.ID]:
			return fmt.Errorf("%w: message %s appears twice", driver.ErrInvalidArgument, m.ID)
		}
		seen[m.ID] = true
	}
	seen = make(map[string]bool, len(b.Idempotency))
	for _, k := range b.Idempotency {
		switch {
		case k.Key == "":
			return fmt.Errorf("%w: idempotency record has no key", driver.ErrInvalidArgument)
		case k.ThreadID != b.ThreadID:
			return fmt.Errorf("%w: idempotency key %q belongs to thread %q, not %q", driver.ErrInvalidArgument, k.Key, k.ThreadID, b.ThreadID)
		case k.RunID == "" || k.InputMessageID == "":
			return fmt.Errorf("%w: idempotency key %q names no admission", driver.ErrInvalidArgument, k.Key)
		case seen[k.Key]:
			return fmt.Errorf("%w: idempotency key %q appears twice", driver.ErrInvalidArgument, k.Key)
		}
		seen[k.Key] = true
	}
	for _, id := range b.Thread.OpenRunIDs {
		if id == "" {
			return fmt.Errorf("%w: thread header lists an empty open run id", driver.ErrInvalidArgument)
		}
	}
	return validateSteps(b.ThreadID, b.Steps)
}

// ValidateListRuns checks the arguments of ListRuns.
func ValidateListRuns(state record.RunState, limit int) error {
	if !state.Valid() {
		return fmt.Errorf("%w: unknown run state %q", driver.ErrInvalidArgument, state)
	}
	if limit <= 0 {
		return fmt.Errorf("%w: limit %d must be positive", driver.ErrInvalidArgument, limit)
	}
	return nil
}

// ValidateStepBatch checks the shape of a CommitSteps batch: the checks
// every driver makes before it writes anything. It does not check the
// run's stored state, the next Seq or the lease.
func ValidateStepBatch(b driver.StepBatch) error {
	switch {
	case b.ThreadID == "":
		return fmt.Errorf("%w: step batch has no thread id", driver.ErrInvalidArgument)
	case b.RunID == "":
		return fmt.Errorf("%w: step batch has no run id", driver.ErrInvalidArgument)
	case b.Owner == "":
		return fmt.Errorf("%w: step batch of run %s has no owner", driver.ErrInvalidArgument, b.RunID)
	case b.Attempt <= 0:
		return fmt.Errorf("%w: step batch of run %s has attempt %d", driver.ErrInvalidArgument, b.RunID, b.Attempt)
	case b.Fence < 0:
		return fmt.Errorf("%w: step batch of run %s has negative fence %d", driver.ErrInvalidArgument, b.RunID, b.Fence)
	case len(b.Steps) == 0:
		return fmt.Errorf("%w: step batch of run %s has no steps", driver.ErrInvalidArgument, b.RunID)
	}
	for _, s := range b.Steps {
		if s.RunID != b.RunID {
			return fmt.Errorf("%w: step %s belongs to run %q, not %q", driver.ErrInvalidArgument, s.ID, s.RunID, b.RunID)
		}
	}
	return validateSteps(b.ThreadID, b.Steps)
}

// validateSteps checks step records of one thread: each well formed, no id
// twice, and the steps of each run consecutive in the order given.
func validateSteps(threadID string, steps []record.Step) error {
	ids := make(map[string]bool, len(steps))
	last := map[string]int64{}
	for i, s := range steps {
		if err := validateStep(s); err != nil {
			return err
		}
		switch {
		case s.ThreadID != threadID:
			return fmt.Errorf("%w: step %s belongs to thread %q, not %q", driver.ErrInvalidArgument, s.ID, s.ThreadID, threadID)
		case ids[s.ID]:
			return fmt.Errorf("%w: step %s appears twice", driver.ErrInvalidArgument, s.ID)
		}
		if prev, ok := last[s.RunID]; ok && s.Seq != prev+1 {
			return fmt.Errorf("%w: step %d (%s) of run %s has seq %d after %d: a run's steps must be consecutive", driver.ErrInvalidArgument, i, s.ID, s.RunID, s.Seq, prev)
		}
		ids[s.ID], last[s.RunID] = true, s.Seq
	}
	return nil
}

// validateStep checks the shape of one step record.
func validateStep(s record.Step) error {
	switch {
	case s.ID == "":
		return fmt.Errorf("%w: step of run %q has no id", driver.ErrInvalidArgument, s.RunID)
	case s.RunID == "":
		return fmt.Errorf("%w: step %s has no run id", driver.ErrInvalidArgument, s.ID)
	case s.Seq <= 0:
		return fmt.Errorf("%w: step %s has seq %d", driver.ErrInvalidArgument, s.ID, s.Seq)
	case s.Attempt <= 0:
		return fmt.Errorf("%w: step %s has attempt %d", driver.ErrInvalidArgument, s.ID, s.Attempt)
	case s.Model < 0:
		return fmt.Errorf("%w: step %s has model step %d", driver.ErrInvalidArgument, s.ID, s.Model)
	case !s.Kind.Valid():
		return fmt.Errorf("%w: step %s has unknown kind %q", driver.ErrInvalidArgument, s.ID, s.Kind)
	}
	if s.Kind != record.StepAsk && s.Ask != (record.Ask{}) || s.Kind != record.StepAnswer && s.Answer != (record.Answer{}) {
		return fmt.Errorf("%w: %s step %s holds an ask or an answer: only those kinds do", driver.ErrInvalidArgument, s.Kind, s.ID)
	}
	switch s.Kind {
	case record.StepModel, record.StepTool:
		if s.Message.ID == "" {
			return fmt.Errorf("%w: %s step %s has no message", driver.ErrInvalidArgument, s.Kind, s.ID)
		}
		if len(s.Taken) > 0 {
			return fmt.Errorf("%w: %s step %s takes inputs: only a take step does", driver.ErrInvalidArgument, s.Kind, s.ID)
		}
	case record.StepAsk:
		if s.Ask.CallID == "" || s.Ask.Tool == "" {
			return fmt.Errorf("%w: ask step %s names no call or no tool", driver.ErrInvalidArgument, s.ID)
		}
	case record.StepAnswer:
		if s.Answer.CallID == "" || !s.Answer.Action.Valid() {
			return fmt.Errorf("%w: answer step %s names no call or has action %q", driver.ErrInvalidArgument, s.ID, s.Answer.Action)
		}
	case record.StepTake:
		if len(s.Taken) == 0 {
			return fmt.Errorf("%w: take step %s takes nothing", driver.ErrInvalidArgument, s.ID)
		}
		for _, t := range s.Taken {
			if t.RunID == "" || len(t.InputMessageIDs) == 0 {
				return fmt.Errorf("%w: take step %s names no run or no inputs", driver.ErrInvalidArgument, s.ID)
			}
		}
	}
	return nil
}

// ValidateReadSteps checks the arguments of ReadSteps.
func ValidateReadSteps(runID string, limit int) error {
	if runID == "" {
		return fmt.Errorf("%w: empty run id", driver.ErrInvalidArgument)
	}
	if limit <= 0 {
		return fmt.Errorf("%w: limit %d must be positive", driver.ErrInvalidArgument, limit)
	}
	return nil
}

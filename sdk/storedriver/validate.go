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
	return nil
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

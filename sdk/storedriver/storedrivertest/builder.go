package storedrivertest

import (
	"fmt"
	"slices"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

// T0 is the time the Builder's records carry.
var T0 = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)

// Builder builds records and batches for one thread as a host would,
// tracking the thread's version, open runs and history position. It reports
// nothing itself: the caller commits its batches and calls Committed after
// each one that succeeds.
type Builder struct {
	ID      string
	Version int64
	NextSeq int64 // the next message's seq
	RunSeq  int64 // the next run's seq
	Open    []string
	Commits int
}

// NewBuilder returns a builder for a thread never written.
func NewBuilder(id string) *Builder { return &Builder{ID: id, NextSeq: 1, RunSeq: 1} }

// Run returns the thread's next run, queued.
func (b *Builder) Run(id string) record.Run {
	r := record.Run{ID: id, ThreadID: b.ID, Seq: b.RunSeq, State: record.StateQueued, Attempt: 1,
		AssistantMessageID: id + "-answer", InputMessageIDs: []string{id + "-in"}, CreatedAt: T0}
	b.RunSeq++
	return r
}

// Msg returns the thread's next user message, for run runID.
func (b *Builder) Msg(id, runID string) record.Message {
	m := record.Message{ID: id, ThreadID: b.ID, RunID: runID, Seq: b.NextSeq, Role: record.RoleUser,
		Content: "content of " + id, Metadata: map[string]string{"k": id}, CreatedAt: T0}
	b.NextSeq++
	return m
}

// Key returns an idempotency record of the thread.
func (b *Builder) Key(key, runID, msgID string) record.Idempotency {
	return record.Idempotency{ThreadID: b.ID, Key: key, RunID: runID, InputMessageID: msgID, ContentHash: "h-" + key, CreatedAt: T0}
}

// Batch returns a batch at the thread's current version; open is the new
// list of open runs.
func (b *Builder) Batch(open []string, runs []record.Run, msgs []record.Message, keys []record.Idempotency) driver.Batch {
	b.Commits++
	cid := fmt.Sprintf("%s-commit-%d", b.ID, b.Commits)
	return driver.Batch{
		CommitID: cid, ThreadID: b.ID, ExpectedVersion: b.Version,
		Thread: record.Thread{ID: b.ID, Version: b.Version + 1, NextRunSeq: b.RunSeq, NextMessageSeq: b.NextSeq,
			OpenRunIDs: slices.Clone(open), LastCommitID: cid, UpdatedAt: T0.Add(time.Duration(b.Commits) * time.Second)},
		Runs: runs, Messages: msgs, Idempotency: keys,
	}
}

// Committed records that batch was committed.
func (b *Builder) Committed(batch driver.Batch) {
	b.Version = batch.Thread.Version
	b.Open = slices.Clone(batch.Thread.OpenRunIDs)
}

// Fork returns a copy of b that builds from the same state without changing
// b: a second writer that read the thread at the same moment.
func (b *Builder) Fork() *Builder {
	c := *b
	c.Open = slices.Clone(b.Open)
	return &c
}

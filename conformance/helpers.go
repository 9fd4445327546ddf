package conformance

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)

// thread builds batches for one thread as a host would, tracking its
// version, open runs and history position.
type thread struct {
	c       *C
	d       driver.Driver
	id      string
	version int64
	nextSeq int64
	runSeq  int64
	open    []string
	commits int
}

func (c *C) thread(d driver.Driver, id string) *thread {
	return &thread{c: c, d: d, id: id, nextSeq: 1, runSeq: 1}
}

func (th *thread) run(id string) record.Run {
	r := record.Run{ID: id, ThreadID: th.id, Seq: th.runSeq, State: record.StateQueued, Attempt: 1,
		AssistantMessageID: id + "-answer", InputMessageIDs: []string{id + "-in"}, CreatedAt: t0}
	th.runSeq++
	return r
}

func (th *thread) msg(id, runID string) record.Message {
	m := record.Message{ID: id, ThreadID: th.id, RunID: runID, Seq: th.nextSeq, Role: record.RoleUser,
		Content: "content of " + id, Metadata: map[string]string{"k": id}, CreatedAt: t0}
	th.nextSeq++
	return m
}

func (th *thread) key(key, runID, msgID string) record.Idempotency {
	return record.Idempotency{ThreadID: th.id, Key: key, RunID: runID, InputMessageID: msgID, ContentHash: "h-" + key, CreatedAt: t0}
}

func (th *thread) batch(open []string, runs []record.Run, msgs []record.Message, keys []record.Idempotency) driver.Batch {
	th.commits++
	cid := fmt.Sprintf("%s-commit-%d", th.id, th.commits)
	return driver.Batch{
		CommitID: cid, ThreadID: th.id, ExpectedVersion: th.version,
		Thread: record.Thread{ID: th.id, Version: th.version + 1, NextRunSeq: th.runSeq, NextMessageSeq: th.nextSeq,
			OpenRunIDs: slices.Clone(open), LastCommitID: cid, UpdatedAt: t0.Add(time.Duration(th.commits) * time.Second)},
		Runs: runs, Messages: msgs, Idempotency: keys,
	}
}

// commit commits b, which must succeed; a failure is rule's.
func (th *thread) commit(rule string, b driver.Batch) {
	v, err := th.d.Commit(th.c.ctx, b)
	if err != nil {
		th.c.Fatalf(rule, "commit %s: %v", b.CommitID, err)
	}
	if v != b.Thread.Version {
		th.c.Fatalf(rule, "commit %s returned version %d, want %d", b.CommitID, v, b.Thread.Version)
	}
	th.version = v
	th.open = slices.Clone(b.Thread.OpenRunIDs)
}

// admit commits a new queued run, its input and, if key is set, its key.
func (th *thread) admit(rule, runID, key string) record.Run {
	r := th.run(runID)
	m := th.msg(runID+"-in", runID)
	var keys []record.Idempotency
	if key != "" {
		keys = []record.Idempotency{th.key(key, runID, m.ID)}
	}
	th.commit(rule, th.batch(append(slices.Clone(th.open), runID), []record.Run{r}, []record.Message{m}, keys))
	return r
}

// Equality up to representation: times by instant, nil and empty alike.

func sameRun(a, b record.Run) bool {
	return reflect.DeepEqual(storedriver.NormalizeRun(a), storedriver.NormalizeRun(b))
}

func sameMessage(a, b record.Message) bool {
	return reflect.DeepEqual(storedriver.NormalizeMessage(a), storedriver.NormalizeMessage(b))
}

// allHistory reads a thread's whole history with page size limit.
func (c *C) allHistory(rule string, d driver.Driver, threadID string, limit int) []record.Message {
	var out []record.Message
	after := int64(0)
	for i := 0; ; i++ {
		page, err := d.ReadHistory(c.ctx, threadID, after, limit)
		if err != nil {
			c.Fatalf(rule, "ReadHistory(%s, %d, %d): %v", threadID, after, limit, err)
		}
		if len(page) > limit {
			c.Fatalf("reads.history-paging", "ReadHistory with limit %d returned %d messages", limit, len(page))
		}
		if len(page) == 0 {
			return out
		}
		for _, m := range page {
			if m.Seq <= after {
				c.Fatalf("reads.history-order", "ReadHistory(%s) after seq %d returned seq %d (history must be in seq order)", threadID, after, m.Seq)
			}
			after = m.Seq
		}
		out = append(out, page...)
		if i > 1<<20 {
			c.Fatalf("reads.history-paging", "ReadHistory(%s) never ends", threadID)
		}
	}
}

// listAll lists every run in state st with page size limit.
func (c *C) listAll(d driver.Driver, st record.RunState, limit int) []record.Run {
	var out []record.Run
	after := ""
	for i := 0; ; i++ {
		page, err := d.ListRuns(c.ctx, st, after, limit)
		if err != nil {
			c.Fatalf("index.list-by-state", "ListRuns(%s, %q, %d): %v", st, after, limit, err)
		}
		if len(page) > limit {
			c.Fatalf("index.paging", "ListRuns with limit %d returned %d runs", limit, len(page))
		}
		if len(page) == 0 {
			return out
		}
		for _, r := range page {
			if r.ID <= after {
				c.Fatalf("index.paging", "ListRuns(%s) after %q returned %q (runs must come in id order after the cursor)", st, after, r.ID)
			}
			if r.State != st {
				c.Fatalf("index.list-by-state", "ListRuns(%s) returned run %s in state %s", st, r.ID, r.State)
			}
			after = r.ID
		}
		out = append(out, page...)
		if i > 1<<20 {
			c.Fatalf("index.paging", "ListRuns(%s) never ends", st)
		}
	}
}

func ids(runs []record.Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.ID
	}
	return out
}

// runAbsent fails rule unless run id does not exist anywhere.
func (c *C) runAbsent(rule string, d driver.Driver, id string) {
	if _, err := d.GetRuns(c.ctx, []string{id}); !errors.Is(err, driver.ErrNotFound) {
		c.Fatalf(rule, "run %s of a batch that must not have been written: GetRuns gave %v, want ErrNotFound", id, err)
	}
}

// getRun returns run id, failing rule when it cannot.
func (c *C) getRun(rule string, d driver.Driver, id string) record.Run {
	rs, err := d.GetRuns(c.ctx, []string{id})
	if err != nil || len(rs) != 1 {
		c.Fatalf(rule, "GetRuns(%s) = %d runs, %v", id, len(rs), err)
	}
	return rs[0]
}

package conformance

import (
	"errors"
	"reflect"
	"slices"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// thread commits the batches a Builder makes for one thread, as a host
// would, and fails the case when one that must succeed does not.
type thread struct {
	*storedrivertest.Builder
	c *C
	d driver.Driver
}

func (c *C) thread(d driver.Driver, id string) *thread {
	return &thread{Builder: storedrivertest.NewBuilder(id), c: c, d: d}
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
	th.Committed(b)
}

// admit commits a new queued run, its input and, if key is set, its key.
func (th *thread) admit(rule, runID, key string) record.Run {
	r := th.Run(runID)
	m := th.Msg(runID+"-in", runID)
	var keys []record.Idempotency
	if key != "" {
		keys = []record.Idempotency{th.Key(key, runID, m.ID)}
	}
	th.commit(rule, th.Batch(append(slices.Clone(th.Open), runID), []record.Run{r}, []record.Message{m}, keys))
	return r
}

// Equality up to representation: times by instant, nil and empty alike.

func sameRun(a, b record.Run) bool {
	return reflect.DeepEqual(record.NormalizeRun(a), record.NormalizeRun(b))
}

func sameMessage(a, b record.Message) bool {
	return reflect.DeepEqual(record.NormalizeMessage(a), record.NormalizeMessage(b))
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

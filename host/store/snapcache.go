package store

import (
	"sync"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// snapCache keeps, per thread, the snapshot that this store layer's last
// commit on it left: the next mutation on the thread starts from it instead
// of reading the thread again. Another writer (a host, or this process
// through another store layer) makes it stale; the commit's version check
// then refuses the mutation, which is retried from a fresh read. It holds
// at most max threads, the oldest inserted dropped first.
type snapCache struct {
	mu    sync.Mutex
	m     map[string]driver.ThreadSnapshot
	order []string // insertion order, for eviction; may hold forgotten ids
	max   int
}

func (c *snapCache) get(thread string) (driver.ThreadSnapshot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[thread]
	if !ok {
		return driver.ThreadSnapshot{}, false
	}
	// The reducer gets its own copy.
	out := driver.ThreadSnapshot{Thread: storedriver.CloneThread(s.Thread), Runs: make([]record.Run, len(s.Runs))}
	for i, r := range s.Runs {
		out.Runs[i] = storedriver.CloneRun(r)
	}
	return out, true
}

func (c *snapCache) forget(thread string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, thread)
}

// put records the snapshot after batch b, computed from a snapshot whose
// open runs were before, with written the runs it wrote.
func (c *snapCache) put(b driver.Batch, before, written []record.Run) {
	byID := make(map[string]record.Run, len(before)+len(written))
	for _, r := range before {
		byID[r.ID] = r
	}
	for _, r := range written {
		byID[r.ID] = r
	}
	s := driver.ThreadSnapshot{Thread: storedriver.CloneThread(b.Thread), Runs: make([]record.Run, 0, len(b.Thread.OpenRunIDs))}
	for _, id := range b.Thread.OpenRunIDs {
		r, ok := byID[id]
		if !ok {
			c.forget(b.ThreadID) // cannot tell: read it next time
			return
		}
		s.Runs = append(s.Runs, storedriver.CloneRun(r))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[b.ThreadID]; !ok {
		for len(c.m) >= c.max && len(c.order) > 0 {
			delete(c.m, c.order[0])
			c.order = c.order[1:]
		}
		c.order = append(c.order, b.ThreadID)
	}
	c.m[b.ThreadID] = s
	if len(c.order) > 2*c.max { // compact the ids forgotten meanwhile
		kept := c.order[:0]
		for _, id := range c.order {
			if _, ok := c.m[id]; ok {
				kept = append(kept, id)
			}
		}
		c.order = kept
	}
}

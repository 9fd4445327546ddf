package store

import (
	"sync"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
)

// snapCache keeps, per thread, the snapshot that this store layer's last
// commit on it left: the next mutation on the thread starts from it instead
// of reading the thread again. Another writer (a host, or this process
// through another store layer) makes it stale; the commit's version check
// then refuses the mutation, which is retried from a fresh read. It holds
// at most max threads, the oldest inserted dropped first.
type snapCache struct {
	mu sync.Mutex
	f  fifo[driver.ThreadSnapshot]
}

func (c *snapCache) get(thread string) (driver.ThreadSnapshot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.f.get(thread)
	if !ok {
		return driver.ThreadSnapshot{}, false
	}
	// The reducer gets its own copy.
	out := driver.ThreadSnapshot{Thread: record.CloneThread(s.Thread), Runs: make([]record.Run, len(s.Runs))}
	for i, r := range s.Runs {
		out.Runs[i] = record.CloneRun(r)
	}
	return out, true
}

// set records a snapshot read from the driver.
func (c *snapCache) set(s driver.ThreadSnapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.f.get(s.Thread.ID)
	if !ok || old.Thread.Version > s.Thread.Version {
		return // only threads this layer commits to, and nothing older
	}
	c.f.set(s.Thread.ID, s)
}

func (c *snapCache) forget(thread string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.f.del(thread)
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
	s := driver.ThreadSnapshot{Thread: record.CloneThread(b.Thread), Runs: make([]record.Run, 0, len(b.Thread.OpenRunIDs))}
	for _, id := range b.Thread.OpenRunIDs {
		r, ok := byID[id]
		if !ok {
			c.forget(b.ThreadID) // cannot tell: read it next time
			return
		}
		s.Runs = append(s.Runs, record.CloneRun(r))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.f.set(b.ThreadID, s)
}

// peek returns the cached header of a thread, without copying its runs.
func (c *snapCache) peek(thread string) (record.Thread, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.f.get(thread)
	return s.Thread, ok
}

// histCache keeps threads' histories and their terminal runs, as read: both
// only grow (a message never changes, a terminal run never changes again),
// so what was read stays true. Entries are immutable once stored: a reader
// may keep them while a writer replaces them. It holds at most max threads
// and, per thread, at most maxHistMessages messages.
type histCache struct {
	mu sync.Mutex
	f  fifo[*histEntry]
}

type histEntry struct {
	msgs []record.Message
	runs map[string]record.Run // terminal runs of msgs, by id
}

const maxHistMessages = 4096

func (c *histCache) entry(thread string) (*histEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.f.get(thread)
}

func (c *histCache) get(thread string) ([]record.Message, map[string]record.Run) {
	e, ok := c.entry(thread)
	if !ok {
		return nil, nil
	}
	return e.msgs[:len(e.msgs):len(e.msgs)], e.runs
}

// put stores a thread's history and adds terminal runs to the ones known.
func (c *histCache) put(thread string, msgs []record.Message, terminal map[string]record.Run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(msgs) > maxHistMessages {
		c.f.del(thread)
		return
	}
	old, ok := c.f.get(thread)
	if ok && len(old.msgs) > len(msgs) {
		return // a reader that raced with a longer one
	}
	runs := map[string]record.Run{}
	if ok {
		if len(terminal) == 0 {
			runs = old.runs
		} else {
			for id, r := range old.runs {
				runs[id] = r
			}
		}
	}
	for id, r := range terminal {
		runs[id] = r
	}
	c.f.set(thread, &histEntry{msgs: msgs, runs: runs})
}

// doneCache keeps the terminal runs this store layer committed, with their
// answers: a terminal run never changes again, so Result can answer from it
// without reading. It holds at most max runs, the oldest dropped first.
type doneCache struct {
	mu sync.Mutex
	f  fifo[doneRun]
}

type doneRun struct {
	run    record.Run
	answer *record.Message // the completed run's answer
}

func (c *doneCache) get(id string) (doneRun, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.f.get(id)
}

// put records the terminal runs of a committed batch.
func (c *doneCache) put(b driver.Batch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range b.Runs {
		if !runstate.IsTerminal(r.State) {
			continue
		}
		d := doneRun{run: record.CloneRun(r)}
		if r.State == record.StateCompleted {
			for _, m := range b.Messages {
				if m.ID == r.AssistantMessageID {
					msg := record.CloneMessage(m)
					d.answer = &msg
				}
			}
			if d.answer == nil {
				continue // answer not in this batch: read it
			}
		}
		c.f.set(r.ID, d)
	}
}

// appendCommitted adds what a commit wrote to a thread's cached history:
// the messages it appended, when they follow it (or begin the thread's
// history), and the runs it made terminal.
func (c *histCache) appendCommitted(thread string, msgs []record.Message, runs []record.Run) {
	terminal := map[string]record.Run{}
	for _, r := range runs {
		if runstate.IsTerminal(r.State) {
			terminal[r.ID] = record.CloneRun(r)
		}
	}
	if len(msgs) == 0 {
		if len(terminal) > 0 {
			if e, ok := c.entry(thread); ok {
				c.put(thread, e.msgs, terminal)
			}
		}
		return
	}
	e, ok := c.entry(thread)
	var have []record.Message
	last := int64(0)
	if ok {
		have = e.msgs
		if n := len(have); n > 0 {
			last = have[n-1].Seq
		}
	}
	if msgs[0].Seq != last+1 {
		return // a gap: the next read fills it
	}
	out := make([]record.Message, 0, len(have)+len(msgs))
	out = append(out, have...)
	for _, m := range msgs {
		out = append(out, record.CloneMessage(m))
	}
	c.put(thread, out, terminal)
}

// fifo is a map of at most max keys: setting a new key when it is full
// drops the key set longest ago. Its owner locks it.
type fifo[V any] struct {
	m     map[string]V
	order []string // the keys in the order they were set; may hold deleted ones
	max   int
}

func newFIFO[V any](max int) fifo[V] { return fifo[V]{m: map[string]V{}, max: max} }

func (f *fifo[V]) get(k string) (V, bool) {
	v, ok := f.m[k]
	return v, ok
}

func (f *fifo[V]) del(k string) { delete(f.m, k) }

func (f *fifo[V]) set(k string, v V) {
	if _, ok := f.m[k]; !ok {
		for len(f.m) >= f.max && len(f.order) > 0 {
			delete(f.m, f.order[0])
			f.order = f.order[1:]
		}
		f.order = append(f.order, k)
	}
	f.m[k] = v
	if len(f.order) > 2*f.max { // drop the keys deleted meanwhile
		kept := f.order[:0]
		for _, k := range f.order {
			if _, ok := f.m[k]; ok {
				kept = append(kept, k)
			}
		}
		f.order = kept
	}
}

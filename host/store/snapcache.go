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
//
// A snapshot may also come from a notice (learn): the thread as another
// host's commit left it. Such a snapshot is told: it is as fresh as that
// host's last commit, where one this layer committed or read itself is
// stale once another host owns the thread (see Store.apply).
type snapCache struct {
	mu sync.Mutex
	f  fifo[snapEntry]
}

type snapEntry struct {
	snap driver.ThreadSnapshot
	told bool // from a notice, and not replaced since
}

// get returns a copy of the thread's snapshot, and whether it was told.
func (c *snapCache) get(thread string) (driver.ThreadSnapshot, bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.f.get(thread)
	if !ok {
		return driver.ThreadSnapshot{}, false, false
	}
	// The reducer gets its own copy.
	s := e.snap
	out := driver.ThreadSnapshot{Thread: record.CloneThread(s.Thread), Runs: make([]record.Run, len(s.Runs))}
	for i, r := range s.Runs {
		out.Runs[i] = record.CloneRun(r)
	}
	return out, e.told, true
}

// set records a snapshot read from the driver.
func (c *snapCache) set(s driver.ThreadSnapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.f.get(s.Thread.ID)
	if !ok || old.snap.Thread.Version > s.Thread.Version {
		return // only threads this layer commits to, and nothing older
	}
	c.f.set(s.Thread.ID, snapEntry{snap: s})
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
	c.f.set(b.ThreadID, snapEntry{snap: s})
}

// peek returns the cached header of a thread, without copying its runs.
func (c *snapCache) peek(thread string) (record.Thread, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.f.get(thread)
	return e.snap.Thread, ok
}

// histCache keeps the end of threads' histories and their terminal runs,
// as read: both only grow (a message never changes, a terminal run never
// changes again), so what was read stays true. Per thread it holds the last
// perThread messages (a contiguous run of seqs) and the terminal runs they
// name; across threads at most budget messages and at most max threads, the
// oldest inserted dropped first. Its memory is so bounded however long
// threads grow, and each update costs what it adds, not what it holds.
//
// A reader gets a thread's messages as a slice capped at its length: the
// cache appends in place beyond that length only, so what a reader holds
// never changes.
type histCache struct {
	mu        sync.Mutex
	f         fifo[*histEntry]
	perThread int
	budget    int
	total     int // messages held
}

type histEntry struct {
	msgs []record.Message      // contiguous seqs, up to the last known
	runs map[string]record.Run // terminal runs of msgs, by id; changed under mu
}

func (c *histCache) get(thread string) []record.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.f.get(thread)
	if !ok {
		return nil
	}
	return e.msgs[:len(e.msgs):len(e.msgs)]
}

// terminal returns the terminal runs known of a thread among ids.
func (c *histCache) terminal(thread string, ids []string) map[string]record.Run {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]record.Run, len(ids))
	e, ok := c.f.get(thread)
	if !ok {
		return out
	}
	for _, id := range ids {
		if r, ok := e.runs[id]; ok {
			out[id] = r
		}
	}
	return out
}

// put stores the end of a thread's history, unless a longer end is stored,
// keeping the terminal runs known.
func (c *histCache) put(thread string, msgs []record.Message) {
	if len(msgs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.f.get(thread)
	if ok && old.msgs[len(old.msgs)-1].Seq >= msgs[len(msgs)-1].Seq {
		return // as long already, or a reader that raced with a longer one
	}
	e := &histEntry{msgs: c.trim(msgs), runs: map[string]record.Run{}}
	if ok {
		e.runs = old.runs
		c.prune(e)
	}
	c.set(thread, e)
}

// trim keeps the last perThread messages.
func (c *histCache) trim(msgs []record.Message) []record.Message {
	if n := len(msgs); n > c.perThread {
		return msgs[n-c.perThread:]
	}
	return msgs
}

// prune drops the runs the messages no longer name, once they are many.
func (c *histCache) prune(e *histEntry) {
	if len(e.runs) <= c.perThread {
		return
	}
	named := make(map[string]bool, len(e.msgs))
	for _, m := range e.msgs {
		named[m.RunID] = true
	}
	for id := range e.runs {
		if !named[id] {
			delete(e.runs, id)
		}
	}
}

// set stores an entry, dropping the oldest threads beyond max threads or
// beyond the budget of messages. The caller holds mu.
func (c *histCache) set(thread string, e *histEntry) {
	if old, ok := c.f.get(thread); ok {
		c.total -= len(old.msgs)
	} else {
		for len(c.f.m) >= c.f.max && len(c.f.order) > 0 {
			c.dropOldest(thread)
		}
	}
	c.f.set(thread, e)
	c.total += len(e.msgs)
	for c.total > c.budget && len(c.f.m) > 1 {
		c.dropOldest(thread)
	}
}

// dropOldest drops the thread set longest ago, other than keep.
func (c *histCache) dropOldest(keep string) {
	k := c.f.order[0]
	c.f.order = c.f.order[1:]
	if k == keep {
		c.f.order = append(c.f.order, k)
		return
	}
	if old, ok := c.f.m[k]; ok {
		c.total -= len(old.msgs)
		delete(c.f.m, k)
	}
}

// addTerminal adds the terminal runs among runs to those known of a thread.
func (c *histCache) addTerminal(thread string, runs []record.Run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.f.get(thread)
	if !ok {
		return
	}
	for _, r := range runs {
		if _, ok := e.runs[r.ID]; !ok && runstate.IsTerminal(r.State) {
			e.runs[r.ID] = r
		}
	}
}

// held returns the messages the cache holds.
func (c *histCache) held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
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
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.f.get(thread)
	last := int64(0)
	if ok {
		last = e.msgs[len(e.msgs)-1].Seq
	}
	if len(msgs) > 0 && msgs[0].Seq != last+1 {
		return // a gap: the next read fills it
	}
	if !ok {
		if len(msgs) == 0 {
			return
		}
		e = &histEntry{runs: map[string]record.Run{}}
	}
	have := e.msgs
	for _, m := range msgs {
		have = append(have, record.CloneMessage(m))
	}
	// A new entry, so that a reader's capped slice stays its own.
	ne := &histEntry{msgs: c.trim(have), runs: e.runs}
	for _, r := range runs {
		if runstate.IsTerminal(r.State) {
			ne.runs[r.ID] = record.CloneRun(r)
		}
	}
	c.prune(ne)
	c.set(thread, ne)
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

package store

import (
	"cmp"
	"slices"
	"sync"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
)

// promptMemo keeps, per thread, the settled conversation that
// runstate.PromptWindow projects, up to date by what each prompt finds new:
// the contributions of the runs that ended (terminal, neither absorbed nor
// canceled), in the order they ended, and the messages of the runs still
// open. A prompt then costs what was added to the thread since the last
// one, and the copy of its window, instead of indexing the window, looking
// up its runs and sorting them every time.
//
// It projects exactly what PromptWindow does over the same tail (tests
// compare the two on every prompt, see verifyMemo): a run is in the
// projection when a message of its own is in the window, and the
// projection starts after the last such run, in the order they ended, that
// has a message before the window (or one not known). What it holds only
// grows true — messages and terminal runs never change — so it is dropped
// only when the driver's generation moves (revalidate) or when what it
// reads does not continue what it holds.
type promptMemo struct {
	mu sync.Mutex
	f  fifo[*threadMemo]
}

type threadMemo struct {
	busy bool // taken by a prompt (under promptMemo.mu)
	gen  uint64
	end  int64 // the messages up to Seq end were taken in
	// ended are the runs in the projection's order (EndSeq, then Seq).
	ended []contribution
	// open are the runs named by messages taken in whose records were not
	// yet seen terminal, with their messages.
	open map[string]*openRun
	// byID finds the messages taken in at or after the window's start,
	// kept in seqs' order for dropping them as the window moves.
	byID map[string]record.Message
	seqs []idSeq
}

type contribution struct {
	id          string
	endSeq, seq int64
	first       int64 // least Seq of its messages; 0 if one is not known
	last        int64 // greatest Seq of a message of its own (RunID)
	msgs        []record.Message
}

type openRun struct {
	last int64 // greatest Seq of a message of its own
	msgs []record.Message
}

type idSeq struct {
	id  string
	seq int64
}

// verifyMemo makes Prompt compute every prompt both ways and fail on a
// difference (tests).
var verifyMemo = false

func (c *promptMemo) take(thread string, gen uint64) *threadMemo {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.f.get(thread)
	if !ok || m.busy || m.gen != gen {
		return nil
	}
	m.busy = true // one prompt of a thread at a time updates it
	return m
}

// put keeps m, taken or new, as the thread's memo.
func (c *promptMemo) put(thread string, m *threadMemo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m.busy = false
	if old, ok := c.f.get(thread); !ok || old != m {
		c.f.set(thread, m)
	}
}

// release gives back a memo taken and not kept.
func (c *promptMemo) release(thread string, m *threadMemo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.f.get(thread); ok && old == m {
		c.f.del(thread)
	}
}

func (c *promptMemo) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.f.clear()
}

// newThreadMemo returns an empty memo that takes in messages after end.
func newThreadMemo(gen uint64, end int64) *threadMemo {
	return &threadMemo{gen: gen, end: end, open: map[string]*openRun{}, byID: map[string]record.Message{}}
}

// advance takes in tail's messages after m.end, which must continue them,
// and the runs they (and those still open) name, looked up with lookup
// (which returns what it knows, by id). It reports false when tail does
// not continue what m holds, or a message names a run m has as ended: m
// must then be built again.
func (m *threadMemo) advance(tail []record.Message, from int64, exceptRun string, lookup func(ids []string) (map[string]record.Run, error)) (bool, error) {
	if len(tail) == 0 || tail[0].Seq > m.end+1 || tail[len(tail)-1].Seq < m.end {
		return false, nil // a gap before it, or it ends before what m holds
	}
	i, _ := slices.BinarySearchFunc(tail, m.end+1, func(x record.Message, seq int64) int { return cmp.Compare(x.Seq, seq) })
	for _, msg := range tail[i:] {
		if msg.Seq != m.end+1 {
			return false, nil
		}
		if slices.ContainsFunc(m.ended, func(c contribution) bool { return c.id == msg.RunID }) {
			return false, nil
		}
		o := m.open[msg.RunID]
		if o == nil {
			o = &openRun{}
			m.open[msg.RunID] = o
		}
		o.last = msg.Seq
		o.msgs = append(o.msgs, msg)
		m.byID[msg.ID] = msg
		m.seqs = append(m.seqs, idSeq{msg.ID, msg.Seq})
		m.end = msg.Seq
	}
	ids := make([]string, 0, len(m.open))
	for id := range m.open {
		if id != exceptRun {
			ids = append(ids, id)
		}
	}
	if len(ids) > 0 {
		runs, err := lookup(ids)
		if err != nil {
			return false, err
		}
		var gone []string
		for _, id := range ids {
			r, ok := runs[id]
			if !ok || !runstate.IsTerminal(r.State) || (r.State == record.StateCompleted && r.AnswerSeq > m.end) {
				continue // open, or its end not yet taken in
			}
			gone = append(gone, id)
			if r.TerminalReason == record.ReasonAbsorbed || r.TerminalReason == record.ReasonCanceled {
				continue
			}
			m.addEnded(r)
		}
		for _, id := range gone {
			delete(m.open, id)
		}
	}
	m.drop(from)
	return true, nil
}

// addEnded adds the contribution of terminal run r.
func (m *threadMemo) addEnded(r record.Run) {
	c := contribution{id: r.ID, endSeq: r.EndSeq, seq: r.Seq, first: -1}
	if o := m.open[r.ID]; o != nil {
		c.last = o.last
	}
	ids := r.TranscriptIDs
	if len(ids) == 0 {
		ids = r.InputMessageIDs
	}
	for _, id := range ids {
		msg, ok := m.byID[id]
		if !ok {
			c.first = 0
			continue
		}
		c.msgs = append(c.msgs, msg)
		if c.first != 0 && (c.first < 0 || msg.Seq < c.first) {
			c.first = msg.Seq
		}
	}
	if len(r.TranscriptIDs) == 0 {
		if o := m.open[r.ID]; o != nil {
			for _, msg := range o.msgs {
				if msg.Role != record.RoleUser {
					c.msgs = append(c.msgs, msg)
					if c.first != 0 && (c.first < 0 || msg.Seq < c.first) {
						c.first = msg.Seq
					}
				}
			}
		}
	}
	if c.first < 0 {
		c.first = 0
	}
	at, _ := slices.BinarySearchFunc(m.ended, c, func(a, b contribution) int {
		return cmp.Or(cmp.Compare(a.endSeq, b.endSeq), cmp.Compare(a.seq, b.seq))
	})
	m.ended = slices.Insert(m.ended, at, c)
}

// drop forgets what lies wholly before position from: the window only moves
// on, so none of it is in a projection again.
func (m *threadMemo) drop(from int64) {
	k := 0
	for k < len(m.seqs) && m.seqs[k].seq < from {
		delete(m.byID, m.seqs[k].id)
		k++
	}
	if k > 0 {
		m.seqs = slices.Delete(m.seqs, 0, k)
	}
	m.ended = slices.DeleteFunc(m.ended, func(c contribution) bool { return c.last < from })
	for id, o := range m.open {
		if o.last < from {
			delete(m.open, id)
		}
	}
}

// prompt is the settled conversation within the window starting at from,
// then run's inputs, then taken (see runstate.PromptWindow). ok is false
// when one of the run's inputs is not known.
func (m *threadMemo) prompt(run record.Run, from int64, taken []record.Message) ([]record.Message, bool) {
	start := 0
	for k, c := range m.ended {
		if c.id != run.ID && c.first < from {
			start = k + 1
		}
	}
	n := len(run.InputMessageIDs) + len(taken)
	for _, c := range m.ended[start:] {
		n += len(c.msgs)
	}
	out := make([]record.Message, 0, n)
	for _, c := range m.ended[start:] {
		if c.id != run.ID {
			out = append(out, c.msgs...)
		}
	}
	seen := make(map[string]bool, len(run.InputMessageIDs)+len(taken))
	for _, id := range run.InputMessageIDs {
		msg, ok := m.byID[id]
		if !ok {
			return nil, false
		}
		seen[id] = true
		out = append(out, msg)
	}
	for _, msg := range taken {
		if !seen[msg.ID] {
			seen[msg.ID] = true
			out = append(out, msg)
		}
	}
	return out, true
}

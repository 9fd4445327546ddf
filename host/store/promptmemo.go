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
	// ended are the runs in the projection's order (EndSeq, then Seq), and
	// endedIDs their ids.
	ended    []contribution
	endedIDs map[string]bool
	nextOrd  int64 // the ord of the next contribution appended
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
	// ord numbers the contributions in ended's order (increasing, not
	// consecutive once some are dropped). chain is the ord of the first of
	// the longest sequence of contributions ending at this one whose
	// messages, taken in turn, are consecutive positions of the history; -1
	// when this one's own are not (see shared).
	ord, chain int64
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
	return &threadMemo{gen: gen, end: end, open: map[string]*openRun{}, byID: map[string]record.Message{}, endedIDs: map[string]bool{}}
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
		if m.endedIDs[msg.RunID] {
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
	m.endedIDs[c.id] = true
	if at == len(m.ended) {
		// Runs end in turn: the usual case, which costs this run only.
		c.ord = m.nextOrd
		m.nextOrd++
		var prev *contribution
		if at > 0 {
			prev = &m.ended[at-1]
		}
		c.chain = chainOf(prev, &c)
		m.ended = append(m.ended, c)
		return
	}
	m.ended = slices.Insert(m.ended, at, c)
	m.rechain()
}

// consecutive reports whether c's messages are known and at consecutive
// positions of the history, in order.
func consecutive(c *contribution) bool {
	if len(c.msgs) == 0 || c.first != c.msgs[0].Seq {
		return false
	}
	for k, msg := range c.msgs {
		if msg.Seq != c.first+int64(k) {
			return false
		}
	}
	return true
}

// chainOf is c.chain, c following prev (nil: none) in ended.
func chainOf(prev, c *contribution) int64 {
	switch {
	case !consecutive(c):
		return -1
	case prev != nil && prev.chain >= 0 && prev.msgs[len(prev.msgs)-1].Seq+1 == c.first:
		return prev.chain
	}
	return c.ord
}

// rechain numbers ended again and recomputes the chains, after a
// contribution was put before others or taken from between them.
func (m *threadMemo) rechain() {
	for k := range m.ended {
		c := &m.ended[k]
		c.ord = m.nextOrd
		m.nextOrd++
		var prev *contribution
		if k > 0 {
			prev = &m.ended[k-1]
		}
		c.chain = chainOf(prev, c)
	}
}

// drop forgets what lies wholly before position from: the window only moves
// on, so none of it is in a projection again.
func (m *threadMemo) drop(from int64) {
	k := 0
	for k < len(m.seqs) && m.seqs[k].seq < from {
		delete(m.byID, m.seqs[k].id)
		k++
	}
	// Resliced, not moved down: append reallocates once the front is
	// used up, so that dropping costs what is dropped.
	clear(m.seqs[:k])
	m.seqs = m.seqs[k:]
	gone := func(c contribution) bool { return c.last < from }
	k = 0
	for k < len(m.ended) && gone(m.ended[k]) {
		delete(m.endedIDs, m.ended[k].id)
		k++
	}
	clear(m.ended[:k])
	m.ended = m.ended[k:]
	if slices.ContainsFunc(m.ended, gone) {
		for _, c := range m.ended {
			if gone(c) {
				delete(m.endedIDs, c.id)
			}
		}
		m.ended = slices.DeleteFunc(m.ended, gone)
		m.rechain()
	}
	for id, o := range m.open {
		if o.last < from {
			delete(m.open, id)
		}
	}
}

// prompt is the settled conversation within the window starting at from,
// then run's inputs, then taken (see runstate.PromptWindow). ok is false
// when one of the run's inputs is not known. tail is the end of the
// history that m was last advanced with: when the prompt is consecutive
// positions of it (see shared), it is that part of tail, not a copy.
func (m *threadMemo) prompt(run record.Run, from int64, taken, tail []record.Message) ([]record.Message, bool) {
	if p, ok := m.shared(run, from, taken, tail); ok {
		return p, true
	}
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

// shared returns the prompt as part of tail when it is consecutive
// positions of the history: the runs of the settled part ended in the
// order of their messages, each contributing all of them, and the run's
// inputs come right after (no taken input). It is the usual case of a
// thread whose runs follow one another; its cost is the run's inputs, not
// the window's messages. ok is false otherwise.
func (m *threadMemo) shared(run record.Run, from int64, taken, tail []record.Message) ([]record.Message, bool) {
	if len(taken) > 0 || len(run.InputMessageIDs) == 0 || len(tail) == 0 || m.endedIDs[run.ID] {
		return nil, false
	}
	var lo, next int64 // the positions of the prompt's first message and of the run's first input
	if n := len(m.ended); n > 0 {
		last := &m.ended[n-1]
		if last.chain < 0 {
			return nil, false
		}
		// The chain ending at the last run; in it, the runs' first
		// positions increase, so the first wholly in the window is found
		// by bisection.
		c0, _ := slices.BinarySearchFunc(m.ended, last.chain, func(c contribution, ord int64) int { return cmp.Compare(c.ord, ord) })
		k, _ := slices.BinarySearchFunc(m.ended[c0:], from, func(c contribution, from int64) int { return cmp.Compare(c.first, from) })
		s := c0 + k
		// The projection starts after the last run, in ended's order, that
		// begins before the window: within the chain, the one before s;
		// before the chain, it must be the one before it.
		if s == c0 && c0 > 0 && m.ended[c0-1].first >= from {
			return nil, false
		}
		next = last.msgs[len(last.msgs)-1].Seq + 1
		lo = next
		if s < n {
			lo = m.ended[s].first
		}
	} else {
		in, ok := m.byID[run.InputMessageIDs[0]]
		if !ok {
			return nil, false
		}
		lo, next = in.Seq, in.Seq
	}
	at := func(seq int64) int {
		i := seq - tail[0].Seq
		if i < 0 || i >= int64(len(tail)) || tail[i].Seq != seq {
			return -1
		}
		return int(i)
	}
	for k, id := range run.InputMessageIDs {
		if i := at(next + int64(k)); i < 0 || tail[i].ID != id {
			return nil, false
		}
	}
	end := next + int64(len(run.InputMessageIDs)) - 1
	i, j := at(lo), at(end)
	if i < 0 || j < 0 || int64(j-i) != end-lo {
		return nil, false
	}
	return tail[i : j+1 : j+1], true
}

package store

import (
	"slices"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
)

// Records carried by notices between hosts (driver.Notice): what a host
// committed, sent after the commit, so that the host it tells need not read
// it back. A notice is a hint: it may be lost, cut, late or out of order,
// so what it carries is checked before it goes into a cache, and each cache
// it goes into is one whose users already cope with a stale entry (a
// commit from a stale snapshot conflicts and is retried from a fresh read).

// Committed returns what this store layer's last commit on the thread
// left, if it was the commit that moved the thread to version: the
// thread's header and open runs. ok is false when the layer no longer
// holds it (another commit since, or the cache dropped it).
func (s *Store) Committed(threadID string, version int64) (driver.ThreadSnapshot, bool) {
	s.revalidate()
	ts, _, ok := s.snaps.get(threadID)
	if !ok || ts.Thread.Version != version {
		return driver.ThreadSnapshot{}, false
	}
	return ts, true
}

// Learn takes a thread as another host's commit left it (ts: its header
// and open runs) and the messages that commit appended, from a notice. The
// snapshot replaces this layer's only when it is newer (a late notice is
// ignored), and serves the next mutation on the thread as this layer's own
// commits do; the messages extend the cached end of the thread's history
// when they follow it. It reports whether the snapshot was taken.
func (s *Store) Learn(ts driver.ThreadSnapshot, msgs []record.Message) bool {
	th := ts.Thread
	if th.ID == "" || th.Version <= 0 || len(ts.Runs) != len(th.OpenRunIDs) {
		return false
	}
	for i, r := range ts.Runs {
		if r.ID != th.OpenRunIDs[i] || r.ThreadID != th.ID || runstate.IsTerminal(r.State) {
			return false
		}
	}
	next := int64(0)
	for _, m := range msgs {
		if m.ThreadID != th.ID || m.Seq <= 0 || m.Seq >= th.NextMessageSeq || (next != 0 && m.Seq != next) {
			return false
		}
		next = m.Seq + 1
	}
	gen := s.revalidate()
	snap := driver.ThreadSnapshot{Thread: record.CloneThread(th), Runs: make([]record.Run, len(ts.Runs))}
	for i, r := range ts.Runs {
		snap.Runs[i] = record.CloneRun(r)
	}
	if !s.current(gen) || !s.snaps.learn(snap) {
		return false
	}
	if len(msgs) > 0 {
		s.hist.appendCommitted(th.ID, msgs, nil)
	}
	return true
}

// LearnOpen takes a thread's header th, from a notice that runs of it
// settled, with its open runs found among runs (the notice carries them
// with the terminal records): see Learn. It reports whether it was taken.
func (s *Store) LearnOpen(th record.Thread, runs []record.Run) bool {
	open := make([]record.Run, 0, len(th.OpenRunIDs))
	for _, id := range th.OpenRunIDs {
		i := slices.IndexFunc(runs, func(r record.Run) bool { return r.ID == id })
		if i < 0 {
			return false
		}
		open = append(open, runs[i])
	}
	return s.Learn(driver.ThreadSnapshot{Thread: th, Runs: open}, nil)
}

// Snapshot returns the thread as this store layer last committed, read or
// learned it, if it holds it: what a notice may carry to other hosts.
func (s *Store) Snapshot(threadID string) (driver.ThreadSnapshot, bool) {
	s.revalidate()
	ts, _, ok := s.snaps.get(threadID)
	return ts, ok
}

// learn records a snapshot from a notice, if it is newer than the one held.
func (c *snapCache) learn(s driver.ThreadSnapshot) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.f.get(s.Thread.ID); ok && old.snap.Thread.Version >= s.Thread.Version {
		return false
	}
	c.f.set(s.Thread.ID, snapEntry{snap: s, told: true})
	return true
}

// SettledRecords returns, of runs ids of thread threadID, the terminal
// records this store layer committed, with the records of the runs that
// answered them (an absorbed run's) and the answers: what a notice that
// they settled carries (see LearnSettled). A run it did not commit is left
// out. The answers' contents together are at most maxContent bytes, else
// none is returned: a large answer is read by whoever needs it.
func (s *Store) SettledRecords(threadID string, ids []string, maxContent int) ([]record.Run, []record.Message) {
	s.revalidate()
	var runs []record.Run
	var msgs []record.Message
	size := 0
	seen := map[string]bool{}
	for _, id := range ids {
		for hops := 0; id != "" && !seen[id] && hops <= 8; hops++ {
			d, ok := s.done.get(id)
			if !ok || d.run.ThreadID != threadID {
				break
			}
			seen[id] = true
			runs = append(runs, d.run)
			if d.answer != nil {
				msgs = append(msgs, *d.answer)
				size += len(d.answer.Content)
				for k, v := range d.answer.Metadata {
					size += len(k) + len(v)
				}
				for _, c := range d.answer.ToolCalls {
					size += len(c.ID) + len(c.Name) + len(c.Arguments)
				}
			}
			id = d.run.AbsorbedIntoRunID
		}
	}
	if size > maxContent {
		return nil, nil
	}
	return runs, msgs
}

// LearnSettled takes, from a notice that runs ids of thread threadID
// settled, their terminal records and answers (runs, msgs): those that hold
// together go into the cache Result answers from, as if this layer had
// committed them. A record is taken only if it is terminal and of the
// thread, one of ids or the run that answered one of them, and, for a
// completed run, with its answer (its assistant message at its answer's
// position); a record is never replaced (a terminal record never changes).
// The notice is sent after the commit, so a record it carries was
// committed. It returns how many runs it took.
func (s *Store) LearnSettled(threadID string, ids []string, runs []record.Run, msgs []record.Message) int {
	if len(runs) == 0 {
		return 0
	}
	gen := s.revalidate()
	wanted := map[string]bool{}
	for _, id := range ids {
		wanted[id] = true
	}
	byID := map[string]record.Run{}
	for _, r := range runs {
		byID[r.ID] = r
	}
	// The runs that answered wanted ones are wanted too.
	for _, id := range ids {
		for hops := 0; hops < 8; hops++ {
			r, ok := byID[id]
			if !ok || r.TerminalReason != record.ReasonAbsorbed || r.AbsorbedIntoRunID == "" {
				break
			}
			id = r.AbsorbedIntoRunID
			wanted[id] = true
		}
	}
	var b driver.Batch
	for _, r := range runs {
		if !wanted[r.ID] || r.ThreadID != threadID || !runstate.IsTerminal(r.State) {
			continue
		}
		if r.State == record.StateCompleted {
			i := slices.IndexFunc(msgs, func(m record.Message) bool { return m.ID == r.AssistantMessageID })
			if i < 0 {
				continue
			}
			m := msgs[i]
			if m.ThreadID != threadID || m.Seq != r.AnswerSeq || m.Role != record.RoleAssistant || r.AnswerSeq <= 0 {
				continue
			}
			b.Messages = append(b.Messages, m)
		}
		if _, known := s.done.get(r.ID); known {
			continue
		}
		b.Runs = append(b.Runs, r)
	}
	if len(b.Runs) == 0 || !s.current(gen) {
		return 0
	}
	s.done.put(b)
	return len(b.Runs)
}

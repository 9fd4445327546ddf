package runstate

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/agenthost/agenthost/abi/record"
)

// History returns a thread's settled conversation: the messages of its
// terminal runs in the order the runs ended, each run's conversation in the
// order its model saw it — its TranscriptIDs when set, else its inputs
// followed by its output (tool exchanges, then the answer) in history order.
// Runs that were canceled, and runs that were absorbed (their inputs belong
// to the run that absorbed them), contribute nothing of their own.
//
// runs must hold every run that history refers to; history is the thread's
// messages in any order. A message a run names that is missing from history
// is an error: the store is inconsistent.
func History(runs []record.Run, history []record.Message) ([]record.Message, error) {
	return settled(runs, newIndex(history), "", false, 0)
}

// Prompt returns what the model sees for run runID: the settled history of
// the other runs (see History), then the run's own inputs, then the messages
// it took by injection, in the order taken. Nothing else reaches the prompt:
// in particular, no input of a queued run the run did not take.
func Prompt(runs []record.Run, history []record.Message, runID string, taken []record.Message) ([]record.Message, error) {
	return prompt(runs, newIndex(history), runID, taken, false, 0)
}

// PromptWindow is Prompt over the end of a thread's history only: tail is
// the thread's messages from some position to its end, in Seq order (the
// run's inputs are among them), and the settled history it holds is that of
// the whole runs all of whose messages have Seq ≥ from. A run partly before
// from is left out with every run that ended before it, so the settled part
// is always the end of the thread's settled conversation, in order, and
// never separates a tool call from its result (both belong to one run).
// runs must hold the runs the messages of tail at or after from refer to,
// and runID.
func PromptWindow(runs []record.Run, tail []record.Message, from int64, runID string, taken []record.Message) ([]record.Message, error) {
	return prompt(runs, newIndex(tail), runID, taken, true, from)
}

func prompt(runs []record.Run, ix index, runID string, taken []record.Message, partial bool, from int64) ([]record.Message, error) {
	i := slices.IndexFunc(runs, func(r record.Run) bool { return r.ID == runID })
	if i < 0 {
		return nil, fmt.Errorf("%w: run %s", ErrRunNotFound, runID)
	}
	out, err := settled(runs, ix, runID, partial, from)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(runs[i].InputMessageIDs)+len(taken))
	for _, id := range runs[i].InputMessageIDs {
		m, ok := ix.get(id)
		if !ok {
			return nil, fmt.Errorf("%w: run %s names input %s, which is not in the history", ErrInvalid, runID, id)
		}
		seen[id] = true
		out = append(out, m)
	}
	for _, m := range taken {
		if !seen[m.ID] {
			seen[m.ID] = true
			out = append(out, m)
		}
	}
	return out, nil
}

// index finds messages by id, and a run's output (its messages other than
// user ones) in Seq order.
type index struct {
	msgs    []record.Message
	byID    map[string]int
	outputs map[string][]int
}

func newIndex(history []record.Message) index {
	ix := index{msgs: history, byID: make(map[string]int, len(history)), outputs: map[string][]int{}}
	sorted := true
	for i, m := range history {
		ix.byID[m.ID] = i
		if m.Role != record.RoleUser {
			ix.outputs[m.RunID] = append(ix.outputs[m.RunID], i)
		}
		if i > 0 && history[i-1].Seq > m.Seq {
			sorted = false
		}
	}
	if !sorted {
		for _, o := range ix.outputs {
			slices.SortFunc(o, func(a, b int) int { return cmp.Compare(history[a].Seq, history[b].Seq) })
		}
	}
	return ix
}

func (ix index) get(id string) (record.Message, bool) {
	i, ok := ix.byID[id]
	if !ok {
		return record.Message{}, false
	}
	return ix.msgs[i], true
}

// settled projects the terminal runs other than except. partial: ix holds
// the end of the history only, and the projection the whole runs among the
// messages at or after from (see PromptWindow); otherwise a missing message
// is an error.
func settled(runs []record.Run, ix index, except string, partial bool, from int64) ([]record.Message, error) {
	var ended []*record.Run
	for i := range runs {
		r := &runs[i]
		if r.ID == except || !IsTerminal(r.State) ||
			r.TerminalReason == record.ReasonAbsorbed || r.TerminalReason == record.ReasonCanceled {
			continue
		}
		ended = append(ended, r)
	}
	if len(ended) == 0 {
		return nil, nil
	}
	slices.SortFunc(ended, func(a, b *record.Run) int {
		return cmp.Or(cmp.Compare(a.EndSeq, b.EndSeq), cmp.Compare(a.Seq, b.Seq))
	})
	// Where the projection starts: after the last run (in the order they
	// ended) that is partly before the window.
	inWindow := func(id string) bool {
		i, ok := ix.byID[id]
		return ok && (!partial || ix.msgs[i].Seq >= from)
	}
	first := 0
	for k, r := range ended {
		ids, what := r.TranscriptIDs, "message"
		if len(ids) == 0 {
			ids, what = r.InputMessageIDs, "input"
		}
		for _, id := range ids {
			if inWindow(id) {
				continue
			}
			if !partial {
				return nil, fmt.Errorf("%w: run %s names %s %s, which is not in the history", ErrInvalid, r.ID, what, id)
			}
			first = k + 1
			break
		}
		if partial && first <= k && len(r.TranscriptIDs) == 0 {
			if o := ix.outputs[r.ID]; len(o) > 0 && ix.msgs[o[0]].Seq < from {
				first = k + 1
			}
		}
	}
	n := 0
	for _, r := range ended[first:] {
		if len(r.TranscriptIDs) > 0 {
			n += len(r.TranscriptIDs)
		} else {
			n += len(r.InputMessageIDs) + len(ix.outputs[r.ID])
		}
	}
	out := make([]record.Message, 0, n+4)
	for _, r := range ended[first:] {
		if len(r.TranscriptIDs) > 0 {
			for _, id := range r.TranscriptIDs {
				out = append(out, ix.msgs[ix.byID[id]])
			}
			continue
		}
		for _, id := range r.InputMessageIDs {
			out = append(out, ix.msgs[ix.byID[id]])
		}
		for _, i := range ix.outputs[r.ID] {
			out = append(out, ix.msgs[i])
		}
	}
	return out, nil
}

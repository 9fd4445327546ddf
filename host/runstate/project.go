package runstate

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/agenthost/agenthost/abi/record"
)

// History returns a thread's settled conversation: the messages of its
// terminal runs in the order the runs ended, each run's inputs followed by
// its output (tool exchanges, then the answer). Runs that were canceled, and
// runs that were absorbed (their inputs belong to the run that absorbed
// them), contribute nothing of their own.
//
// runs must hold every run that history refers to; history is the thread's
// messages in any order. A message a run names that is missing from history
// is an error: the store is inconsistent.
func History(runs []record.Run, history []record.Message) ([]record.Message, error) {
	ix := indexMessages(history)
	return settled(runs, ix, "")
}

// Prompt returns what the model sees for run runID: the settled history of
// the other runs (see History), then the run's own inputs, then the messages
// it took by injection, in the order taken. Nothing else reaches the prompt:
// in particular, no input of a queued run the run did not take.
func Prompt(runs []record.Run, history []record.Message, runID string, taken []record.Message) ([]record.Message, error) {
	i := slices.IndexFunc(runs, func(r record.Run) bool { return r.ID == runID })
	if i < 0 {
		return nil, fmt.Errorf("%w: run %s", ErrRunNotFound, runID)
	}
	ix := indexMessages(history)
	out, err := settled(runs, ix, runID)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, id := range runs[i].InputMessageIDs {
		m, ok := ix[id]
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

func indexMessages(history []record.Message) map[string]record.Message {
	ix := make(map[string]record.Message, len(history))
	for _, m := range history {
		ix[m.ID] = m
	}
	return ix
}

// settled projects the terminal runs other than except.
func settled(runs []record.Run, ix map[string]record.Message, except string) ([]record.Message, error) {
	var ended []record.Run
	for _, r := range runs {
		if r.ID == except || !IsTerminal(r.State) ||
			r.TerminalReason == record.ReasonAbsorbed || r.TerminalReason == record.ReasonCanceled {
			continue
		}
		ended = append(ended, r)
	}
	slices.SortFunc(ended, func(a, b record.Run) int {
		return cmp.Or(cmp.Compare(a.EndSeq, b.EndSeq), cmp.Compare(a.Seq, b.Seq))
	})
	outputs := map[string][]record.Message{}
	for _, m := range ix {
		if m.Role != record.RoleUser {
			outputs[m.RunID] = append(outputs[m.RunID], m)
		}
	}
	var out []record.Message
	for _, r := range ended {
		for _, id := range r.InputMessageIDs {
			m, ok := ix[id]
			if !ok {
				return nil, fmt.Errorf("%w: run %s names input %s, which is not in the history", ErrInvalid, r.ID, id)
			}
			out = append(out, m)
		}
		o := outputs[r.ID]
		slices.SortFunc(o, func(a, b record.Message) int { return cmp.Compare(a.Seq, b.Seq) })
		out = append(out, o...)
	}
	return out, nil
}

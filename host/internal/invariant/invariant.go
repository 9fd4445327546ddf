// Package invariant checks, from a store's durable records, the invariants
// of the runtime (docs/design.md#invariants) that the records alone can
// show: I2 and I3 (an absorbed run points at a completed run holding its
// inputs, ended in the same commit, with no answer of its own), I6 (at
// most one active run per thread; started runs end in seq order), I7 as
// far as a pair shows it, and that every terminal run has a reason and only
// completed runs an answer. The property test of the store layer and the
// runtime's simulation both check through it, adding what only they know
// (admissions, prompts). Records show only what the reducer wrote: that an
// absorber holds the absorbed inputs is true by construction here. Whether
// they reached its prompt and answer, and whether the absorbed runs were
// next in line, is judged from outside the reducer by the simulation's
// oracle (host/sim_oracle_test.go) and the property test's own account.
package invariant

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
)

// State is what a check reads.
type State struct {
	Runs     map[string]record.Run     // every run, by id
	Messages map[string]record.Message // the threads' messages, by id
}

// Load reads every run through the state index (checking that each listing
// holds only runs in that state) and the messages of the given threads.
func Load(ctx context.Context, s *store.Store, threads []string) (State, error) {
	st := State{Runs: map[string]record.Run{}, Messages: map[string]record.Message{}}
	for _, state := range record.RunStates {
		for r, err := range s.Runs(ctx, state) {
			if err != nil {
				return State{}, err
			}
			if r.State != state {
				return State{}, fmt.Errorf("listing %s runs returned run %s, which is %s", state, r.ID, r.State)
			}
			st.Runs[r.ID] = r
		}
	}
	for _, th := range threads {
		msgs, err := s.Messages(ctx, th)
		if err != nil {
			return State{}, err
		}
		for _, m := range msgs {
			st.Messages[m.ID] = m
		}
	}
	return st, nil
}

// Check returns the first violation found, naming its invariant, or nil.
func Check(st State) error {
	byThread := map[string][]record.Run{}
	for _, r := range st.Runs {
		byThread[r.ThreadID] = append(byThread[r.ThreadID], r)
	}
	for th, runs := range byThread {
		slices.SortFunc(runs, func(a, b record.Run) int { return cmp.Compare(a.Seq, b.Seq) })
		active := 0
		var ended []record.Run
		for _, r := range runs {
			if r.State == record.StateActive {
				active++
			}
			if runstate.IsTerminal(r.State) && r.TerminalReason != record.ReasonAbsorbed && r.TerminalReason != record.ReasonCanceled {
				ended = append(ended, r)
			}
		}
		if active > 1 {
			return fmt.Errorf("I6: thread %s has %d active runs", th, active)
		}
		for i := 1; i < len(ended); i++ {
			if ended[i].EndSeq < ended[i-1].EndSeq {
				return fmt.Errorf("I6: on thread %s run %s (seq %d) ended before %s (seq %d)", th, ended[i].ID, ended[i].Seq, ended[i-1].ID, ended[i-1].Seq)
			}
		}
	}
	for _, r := range st.Runs {
		_, answered := st.Messages[r.AssistantMessageID]
		switch {
		case r.State == record.StateSuperseded:
			into, ok := st.Runs[r.AbsorbedIntoRunID]
			if r.TerminalReason != record.ReasonAbsorbed || !ok || into.State != record.StateCompleted {
				return fmt.Errorf("I2/I3: superseded run %+v absorbed into %+v", r, into)
			}
			for _, in := range r.InputMessageIDs {
				if !slices.Contains(into.InputMessageIDs, in) {
					return fmt.Errorf("I2: %s's input %s is not among %s's inputs", r.ID, in, into.ID)
				}
			}
			if answered || r.AnswerSeq != 0 {
				return fmt.Errorf("I2: absorbed run %s has an answer of its own", r.ID)
			}
			if into.EndSeq != r.EndSeq {
				return fmt.Errorf("I7: absorbed run %s ended apart from %s, which absorbed it", r.ID, into.ID)
			}
		case r.State == record.StateCompleted:
			if !answered {
				return fmt.Errorf("completed run %s has no answer", r.ID)
			}
		case runstate.IsTerminal(r.State):
			if r.TerminalReason == "" {
				return fmt.Errorf("I1: run %s is %s without a reason", r.ID, r.State)
			}
			if answered {
				return fmt.Errorf("run %s ended %s with an answer", r.ID, r.TerminalReason)
			}
		}
	}
	return nil
}

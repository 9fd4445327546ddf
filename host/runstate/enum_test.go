package runstate_test

import (
	"testing"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
)

// TestEnumerations checks the state table: each state's membership in the
// active, recoverable and terminal enumerations, and that no state falls
// outside all three (the withdrawn design's first defect: an "absorbed"
// state that was none of them; docs/adr/0113-*.md).
func TestEnumerations(t *testing.T) {
	want := map[record.RunState]struct{ active, recoverable, recoverableOwnerGone, terminal bool }{
		record.StateQueued:      {false, true, true, false},
		record.StateActive:      {true, false, true, false},
		record.StateCompleted:   {false, false, false, true},
		record.StateFailed:      {false, false, false, true},
		record.StateInterrupted: {false, false, false, true},
		record.StateSuperseded:  {false, false, false, true},
	}
	if len(want) != len(record.RunStates) {
		t.Fatalf("table covers %d states, record defines %d", len(want), len(record.RunStates))
	}
	for _, st := range record.RunStates {
		w, ok := want[st]
		if !ok {
			t.Fatalf("state %s missing from the table", st)
		}
		got := [4]bool{runstate.IsActive(st), runstate.IsRecoverable(st, false), runstate.IsRecoverable(st, true), runstate.IsTerminal(st)}
		if got != [4]bool{w.active, w.recoverable, w.recoverableOwnerGone, w.terminal} {
			t.Errorf("%s: active/recoverable/recoverable(owner gone)/terminal = %v", st, got)
		}
		if !got[0] && !got[2] && !got[3] {
			t.Errorf("%s is in no enumeration", st)
		}
	}
	// An absorbed run is superseded: terminal, so every enumeration sees it.
	if !runstate.IsTerminal(record.StateSuperseded) {
		t.Error("superseded (absorbed) is not terminal")
	}
}

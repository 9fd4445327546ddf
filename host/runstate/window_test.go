package runstate_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
)

// windowThread builds a settled thread: runs ended one after another, some
// with a tool exchange, one failed, one canceled, one whose transcript
// places an input it took between its steps; then an active run R.
func windowThread() ([]record.Run, []record.Message) {
	var runs []record.Run
	var msgs []record.Message
	seq, ver := int64(0), int64(0)
	add := func(run string, role record.Role, content string, calls ...record.ToolCall) record.Message {
		seq++
		m := record.Message{ID: fmt.Sprintf("m%d", seq), ThreadID: "T", RunID: run, Seq: seq, Role: role, Content: content, ToolCalls: calls}
		if role == record.RoleTool {
			m.ToolCallID = "c-" + run
		}
		msgs = append(msgs, m)
		return m
	}
	for i := 1; i <= 12; i++ {
		id := fmt.Sprintf("R%02d", i)
		r := record.Run{ID: id, ThreadID: "T", Seq: int64(i), State: record.StateCompleted, TerminalReason: record.ReasonCompleted}
		in := add(id, record.RoleUser, "q"+id)
		r.InputMessageIDs = []string{in.ID}
		switch i % 4 {
		case 0: // failed: its input stays, no answer
			r.State, r.TerminalReason = record.StateFailed, record.ReasonFailed
		case 1: // canceled: contributes nothing
			r.State, r.TerminalReason = record.StateInterrupted, record.ReasonCanceled
		case 2: // a tool exchange
			call := add(id, record.RoleAssistant, "", record.ToolCall{ID: "c-" + id, Name: "lookup"})
			res := add(id, record.RoleTool, "ok")
			ans := add(id, record.RoleAssistant, "a"+id)
			r.AssistantMessageID = ans.ID
			_, _ = call, res
		case 3: // took the next run's input between its steps: transcript order
			call := add(id, record.RoleAssistant, "", record.ToolCall{ID: "c-" + id, Name: "lookup"})
			res := add(id, record.RoleTool, "ok")
			// An input admitted meanwhile, to a run this one absorbed.
			abs := add("X"+id, record.RoleUser, "more"+id)
			runs = append(runs, record.Run{ID: "X" + id, ThreadID: "T", Seq: int64(i), State: record.StateSuperseded,
				TerminalReason: record.ReasonAbsorbed, AbsorbedIntoRunID: id, InputMessageIDs: []string{abs.ID}})
			ans := add(id, record.RoleAssistant, "a"+id)
			r.InputMessageIDs = append(r.InputMessageIDs, abs.ID)
			r.AssistantMessageID = ans.ID
			r.TranscriptIDs = []string{in.ID, call.ID, res.ID, abs.ID, ans.ID}
		}
		ver++
		r.EndSeq = ver
		runs = append(runs, r)
	}
	in := add("R", record.RoleUser, "now")
	runs = append(runs, record.Run{ID: "R", ThreadID: "T", Seq: 13, State: record.StateActive, InputMessageIDs: []string{in.ID}})
	return runs, msgs
}

func TestTranscriptOrder(t *testing.T) {
	runs, msgs := windowThread()
	hist, err := runstate.History(runs, msgs)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(ms []record.Message) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}
	got := ids(hist)
	for _, r := range runs {
		if len(r.TranscriptIDs) == 0 {
			continue
		}
		i := slices.Index(got, r.TranscriptIDs[0])
		if i < 0 || !slices.Equal(got[i:i+len(r.TranscriptIDs)], r.TranscriptIDs) {
			t.Fatalf("run %s: history %v lacks its transcript %v in order", r.ID, got, r.TranscriptIDs)
		}
	}
}

// Every window of the history gives the end of the settled conversation,
// whole runs only, never a tool result without its call, and the run's own
// input last; the window from the first message is the whole prompt.
func TestPromptWindow(t *testing.T) {
	runs, msgs := windowThread()
	full, err := runstate.Prompt(runs, msgs, "R", nil)
	if err != nil {
		t.Fatal(err)
	}
	settledFull := full[:len(full)-1]
	for from := int64(1); from <= int64(len(msgs)); from++ {
		// The tail holds at least the window; more before it changes nothing.
		for _, lo := range []int64{from, 1} {
			got, err := runstate.PromptWindow(runs, msgs[lo-1:], from, "R", nil)
			if err != nil {
				t.Fatalf("from %d: %v", from, err)
			}
			if from == 1 && !slices.EqualFunc(got, full, func(a, b record.Message) bool { return a.ID == b.ID }) {
				t.Fatalf("from 1: %v, want %v", got, full)
			}
			if last := got[len(got)-1]; last.RunID != "R" {
				t.Fatalf("from %d: ends with %s, not the run's input", from, last.ID)
			}
			settled := got[:len(got)-1]
			if !slices.EqualFunc(settled, settledFull[len(settledFull)-len(settled):], func(a, b record.Message) bool { return a.ID == b.ID }) {
				t.Fatalf("from %d: %v is not the end of %v", from, settled, settledFull)
			}
			calls := map[string]bool{}
			for _, m := range settled {
				if m.Seq < from {
					t.Fatalf("from %d: message %s at %d is before the window", from, m.ID, m.Seq)
				}
				for _, c := range m.ToolCalls {
					calls[c.ID] = true
				}
				if m.Role == record.RoleTool && !calls[m.ToolCallID] {
					t.Fatalf("from %d: tool result %s without its call", from, m.ID)
				}
			}
		}
	}
	// A window after the run's own input still finds it in the tail.
	got, err := runstate.PromptWindow(runs, msgs, int64(len(msgs))+1, "R", nil)
	if err != nil || len(got) != 1 || got[0].RunID != "R" {
		t.Fatalf("empty window: %v, %v", got, err)
	}
}

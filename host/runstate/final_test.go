package runstate_test

import (
	"errors"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
)

// A completed run's terminal commit carries the answer's step record, set
// to the run and its attempt, at the commit's time if it has none; one that
// does not answer
// with it, or a run that does not complete, is refused.
func TestCommitTerminalFinalStep(t *testing.T) {
	now := time.Unix(1000, 0)
	snap := runstate.Snapshot{Thread: record.Thread{ID: "T"}}
	eff, err := runstate.Reduce(snap, runstate.Admit{ThreadID: "T", Content: "q", RunID: "R", InputMessageID: "in", AssistantMessageID: "ans", StartAs: "h1", Now: now})
	if err != nil || eff.Run == nil || eff.Run.State != record.StateActive {
		t.Fatalf("admit and start: %+v, %v", eff.Run, err)
	}
	snap = runstate.Snapshot{Thread: *eff.Thread, Open: []record.Run{*eff.Run}}
	final := func() *record.Step {
		return &record.Step{ID: "s1", Seq: 1, Kind: record.StepModel, Model: 0,
			Message: record.Message{ID: "ans", Role: record.RoleAssistant, Content: "the answer"}}
	}
	end := func(reason record.TerminalReason, answer string, f *record.Step) (runstate.Effects, error) {
		return runstate.Reduce(snap, runstate.CommitTerminal{ThreadID: "T", RunID: "R", Owner: "h1", Reason: reason, Answer: answer, Final: f, Now: now.Add(time.Second)})
	}
	eff, err = end(record.ReasonCompleted, "the answer", final())
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Steps) != 1 {
		t.Fatalf("steps %+v, want the answer's", eff.Steps)
	}
	st := eff.Steps[0]
	if st.ID != "s1" || st.RunID != "R" || st.ThreadID != "T" || st.Attempt != 1 || !st.CreatedAt.Equal(now.Add(time.Second)) || st.Message.Content != "the answer" {
		t.Fatalf("step %+v", st)
	}
	answered := final()
	answered.CreatedAt = now.Add(time.Millisecond) // when the model answered
	if eff, err := end(record.ReasonCompleted, "the answer", answered); err != nil || !eff.Steps[0].CreatedAt.Equal(answered.CreatedAt) {
		t.Fatalf("a step with its time: %+v, %v", eff.Steps, err)
	}
	if eff, err := end(record.ReasonCompleted, "the answer", nil); err != nil || len(eff.Steps) != 0 {
		t.Fatalf("without Final: %d steps, %v", len(eff.Steps), err)
	}
	bad := map[string]func(*record.Step){
		"another answer": func(s *record.Step) { s.Message.Content = "other" },
		"a tool step":    func(s *record.Step) { s.Kind = record.StepTool },
		"tool calls":     func(s *record.Step) { s.Message.ToolCalls = []record.ToolCall{{ID: "c", Name: "t"}} },
		"a take":         func(s *record.Step) { s.Taken = []record.Take{{RunID: "Q"}} },
		"no seq":         func(s *record.Step) { s.Seq = 0 },
		"no id":          func(s *record.Step) { s.ID = "" },
	}
	for name, change := range bad {
		f := final()
		change(f)
		if _, err := end(record.ReasonCompleted, "the answer", f); !errors.Is(err, runstate.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := end(record.ReasonFailed, "", final()); !errors.Is(err, runstate.ErrInvalid) {
		t.Errorf("a failed run with the answer's step: %v, want ErrInvalid", err)
	}
}

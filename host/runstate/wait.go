package runstate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"github.com/agenthost/agenthost/abi/record"
)

func wait(s Snapshot, m Wait) (Effects, error) {
	if m.ThreadID != s.Thread.ID {
		return Effects{}, fmt.Errorf("%w: wait for thread %s, snapshot of %s", ErrInvalid, m.ThreadID, s.Thread.ID)
	}
	if len(m.Asks) == 0 {
		return Effects{}, fmt.Errorf("%w: run %s waits for no call", ErrInvalid, m.RunID)
	}
	i := findOpen(s, m.RunID)
	if i < 0 {
		return Effects{}, fmt.Errorf("%w: run %s is not open on thread %s", ErrNotActive, m.RunID, s.Thread.ID)
	}
	run := s.Open[i]
	switch {
	case run.State != record.StateActive:
		return Effects{}, fmt.Errorf("%w: run %s is %s", ErrNotActive, m.RunID, run.State)
	case run.Owner != m.Owner || run.Attempt != m.Attempt:
		return Effects{}, fmt.Errorf("%w: run %s is attempt %d of %q, not attempt %d of %q", ErrNotOwner, m.RunID, run.Attempt, run.Owner, m.Attempt, m.Owner)
	case len(run.Pending) > 0 && slices.Equal(run.Pending, askIDs(m.Asks)):
		// This very wait landed already (its reply was lost): only this
		// owner at this attempt sets Pending, once per model step.
		r := cloneRun(run)
		return Effects{Run: &r}, nil
	case len(run.Pending) > 0:
		return Effects{}, fmt.Errorf("%w: run %s waits already for %d calls", ErrInvalid, m.RunID, len(run.Pending))
	}
	calls := map[string]bool{}
	var pending []string
	for k, st := range m.Asks {
		a := st.Ask
		switch {
		case st.Kind != record.StepAsk:
			return Effects{}, fmt.Errorf("%w: wait step %s is a %s step", ErrInvalid, st.ID, st.Kind)
		case st.RunID != run.ID || st.ThreadID != run.ThreadID:
			return Effects{}, fmt.Errorf("%w: ask step %s belongs to run %s", ErrInvalid, st.ID, st.RunID)
		case st.Attempt != run.Attempt:
			return Effects{}, fmt.Errorf("%w: ask step %s has attempt %d, the run's is %d", ErrInvalid, st.ID, st.Attempt, run.Attempt)
		case st.Seq <= 0 || k > 0 && st.Seq != m.Asks[k-1].Seq+1:
			return Effects{}, fmt.Errorf("%w: ask step %s has seq %d: the steps of a wait are consecutive", ErrInvalid, st.ID, st.Seq)
		case a.CallID == "" || a.Tool == "":
			return Effects{}, fmt.Errorf("%w: ask step %s names no call or no tool", ErrInvalid, st.ID)
		case calls[a.CallID]:
			return Effects{}, fmt.Errorf("%w: call %s is asked about twice", ErrInvalid, a.CallID)
		case a.Approvals < 1:
			return Effects{}, fmt.Errorf("%w: call %s needs %d approvals", ErrInvalid, a.CallID, a.Approvals)
		}
		if err := checkID("step id", st.ID); err != nil {
			return Effects{}, err
		}
		calls[a.CallID] = true
		pending = append(pending, a.CallID)
	}
	t := next(s)
	t.UpdatedAt = m.Now
	r := cloneRun(run)
	r.Pending = pending
	steps := make([]record.Step, len(m.Asks))
	for k, st := range m.Asks {
		steps[k] = record.CloneStep(st)
		steps[k].CreatedAt = m.Now
	}
	return Effects{Thread: &t, RunRecords: []record.Run{r}, Steps: steps, Run: &r}, nil
}

func askIDs(asks []record.Step) []string {
	ids := make([]string, len(asks))
	for i, a := range asks {
		ids[i] = a.Ask.CallID
	}
	return ids
}

// checkAnswer checks an answer's shape.
func checkAnswer(a record.Answer) error {
	if err := checkID("call id", a.CallID); err != nil {
		return err
	}
	if len(a.Key) > MaxKeyLen {
		return fmt.Errorf("%w: idempotency key longer than %d bytes", ErrInvalid, MaxKeyLen)
	}
	switch a.Action {
	case record.AnswerApprove:
		if a.Arguments != "" || a.Text != "" {
			return fmt.Errorf("%w: approve carries no arguments and no message", ErrInvalid)
		}
	case record.AnswerEdit:
		if a.Arguments == "" || a.Text != "" {
			return fmt.Errorf("%w: edit carries the new arguments, and no message", ErrInvalid)
		}
	case record.AnswerReject, record.AnswerRespond:
		if a.Text == "" || a.Arguments != "" {
			return fmt.Errorf("%w: %s carries a message, and no arguments", ErrInvalid, a.Action)
		}
	default:
		return fmt.Errorf("%w: unknown answer action %q (want approve, edit, reject or respond)", ErrInvalid, a.Action)
	}
	return nil
}

// sameAnswer reports whether two answers to a call say the same. Edit
// arguments are the same JSON value whatever their key order or spacing
// (numbers as written), so that an edit recorded in another form than a
// retry's still matches it.
func sameAnswer(a, b record.Answer) bool {
	return a.CallID == b.CallID && a.Action == b.Action && a.Text == b.Text &&
		(a.Arguments == b.Arguments || sameJSON(a.Arguments, b.Arguments))
}

// sameJSON reports whether a and b hold the same JSON value; text that is
// not JSON is the same only as itself.
func sameJSON(a, b string) bool {
	va, oka := decodeJSON(a)
	vb, okb := decodeJSON(b)
	return oka && okb && reflect.DeepEqual(va, vb)
}

func decodeJSON(s string) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() {
		return nil, false
	}
	return v, true
}

// Decided returns the answer that decided an asked call, from its answers
// in log order, and whether one has: the first that is not an approve, or
// the approve that made ask's Approvals. Answer refuses an edit to a call
// that needs more than one approval, so an edit decides only a call that
// one approval decides.
func Decided(ask record.Ask, answers []record.Answer) (record.Answer, bool) {
	approvals := 0
	for _, a := range answers {
		if a.Action != record.AnswerApprove {
			return a, true
		}
		approvals++
		if approvals >= max(ask.Approvals, 1) {
			return a, true
		}
	}
	return record.Answer{}, false
}

func answer(s Snapshot, m Answer) (Effects, error) {
	if m.ThreadID != s.Thread.ID {
		return Effects{}, fmt.Errorf("%w: answer for thread %s, snapshot of %s", ErrInvalid, m.ThreadID, s.Thread.ID)
	}
	a := m.Answer
	if err := checkAnswer(a); err != nil {
		return Effects{}, err
	}
	if m.Ask == nil {
		return Effects{}, fmt.Errorf("%w: run %s never asked about call %s", ErrCallNotFound, m.RunID, a.CallID)
	}
	ask := m.Ask.Ask
	if m.Ask.Kind != record.StepAsk || m.Ask.RunID != m.RunID || ask.CallID != a.CallID {
		return Effects{}, fmt.Errorf("%w: the ask given is not run %s's about call %s", ErrInvalid, m.RunID, a.CallID)
	}
	var prior []record.Answer
	for _, st := range m.Prior {
		if st.Kind != record.StepAnswer || st.RunID != m.RunID || st.Answer.CallID != a.CallID {
			return Effects{}, fmt.Errorf("%w: prior step %s is not an answer to run %s's call %s", ErrInvalid, st.ID, m.RunID, a.CallID)
		}
		prior = append(prior, st.Answer)
	}
	for _, st := range m.Earlier {
		if st.Kind != record.StepAnswer || st.RunID != m.RunID || st.Answer.CallID != a.CallID || st.Seq >= m.Ask.Seq {
			return Effects{}, fmt.Errorf("%w: earlier step %s is not an answer to run %s's call %s before its last ask", ErrInvalid, st.ID, m.RunID, a.CallID)
		}
	}
	// The same key again: the recorded answer, if it says the same. A key
	// an answer to an earlier call with the id took is that answer's: the
	// later call was not shown to whoever sent it.
	if a.Key != "" {
		if k := slices.IndexFunc(prior, func(p record.Answer) bool { return p.Key == a.Key }); k >= 0 {
			if !sameAnswer(prior[k], a) {
				return Effects{}, &AnsweredError{CallID: a.CallID, Recorded: prior[k], Reason: "was answered otherwise with key " + a.Key}
			}
			return duplicate(s, m.RunID, m.Prior[k]), nil
		}
		if k := slices.IndexFunc(m.Earlier, func(p record.Step) bool { return p.Answer.Key == a.Key }); k >= 0 {
			if !sameAnswer(m.Earlier[k].Answer, a) {
				return Effects{}, &AnsweredError{CallID: a.CallID, Recorded: m.Earlier[k].Answer, Reason: "was answered otherwise with key " + a.Key}
			}
			return duplicate(s, m.RunID, m.Earlier[k]), nil
		}
	}
	if d, ok := Decided(ask, prior); ok {
		if sameAnswer(d, a) {
			k := slices.IndexFunc(prior, func(p record.Answer) bool { return sameAnswer(p, d) && p.Key == d.Key })
			return duplicate(s, m.RunID, m.Prior[k]), nil
		}
		return Effects{}, &AnsweredError{CallID: a.CallID, Recorded: d, Reason: "was answered already"}
	}
	if a.Action == record.AnswerEdit && ask.Approvals > 1 {
		// An edit decides at once: it must not stand in for the other
		// approvals the policy asked for.
		return Effects{}, fmt.Errorf("%w: call %s needs %d approvals; an edit cannot be one of them: reject it and let the model ask again, or approve it as asked", ErrInvalid, a.CallID, ask.Approvals)
	}
	i := findOpen(s, m.RunID)
	if i < 0 {
		return Effects{}, fmt.Errorf("%w: run %s has ended", ErrNotWaiting, m.RunID)
	}
	run := s.Open[i]
	if !slices.Contains(run.Pending, a.CallID) {
		return Effects{}, fmt.Errorf("%w: run %s waits for no answer to call %s", ErrNotWaiting, m.RunID, a.CallID)
	}
	if a.Action == record.AnswerEdit && len(prior) > 0 {
		return Effects{}, &AnsweredError{CallID: a.CallID, Recorded: prior[len(prior)-1], Reason: "was approved as asked already; it can no longer be edited"}
	}
	if err := checkID("step id", m.StepID); err != nil {
		return Effects{}, err
	}
	if m.Seq <= 0 {
		return Effects{}, fmt.Errorf("%w: answer step of run %s has seq %d", ErrInvalid, m.RunID, m.Seq)
	}
	st := record.Step{ID: m.StepID, RunID: run.ID, ThreadID: run.ThreadID, Seq: m.Seq, Attempt: max(run.Attempt, 1),
		Model: m.Ask.Model, Kind: record.StepAnswer, Answer: a, CreatedAt: m.Now}
	r := cloneRun(run)
	_, decided := Decided(ask, append(prior, a))
	if decided {
		r.Pending = slices.DeleteFunc(r.Pending, func(id string) bool { return id == a.CallID })
		if len(r.Pending) == 0 {
			r.Pending = nil
		}
	}
	t := next(s)
	t.UpdatedAt = m.Now
	return Effects{
		Thread: &t, RunRecords: []record.Run{r}, Steps: []record.Step{st}, Run: &r,
		Answered: &AnswerResult{Step: st, Decided: decided, Resume: decided && len(r.Pending) == 0},
	}, nil
}

// duplicate reports a repeated answer: the recorded step, nothing written.
func duplicate(s Snapshot, runID string, st record.Step) Effects {
	eff := Effects{Answered: &AnswerResult{Step: record.CloneStep(st), Duplicate: true}}
	if i := findOpen(s, runID); i >= 0 {
		r := cloneRun(s.Open[i])
		eff.Run = &r
	}
	return eff
}

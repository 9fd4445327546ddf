package runstate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/agenthost/agenthost/abi/record"
)

// Limits on identifiers, checked by every mutation.
const (
	MaxIDLen  = 256 // thread, run, message and owner ids
	MaxKeyLen = 256 // idempotency keys
)

// Reduce applies m to s. It returns the effects to commit, or an error and no
// effects. It never modifies s.
func Reduce(s Snapshot, m Mutation) (Effects, error) {
	if err := checkSnapshot(s); err != nil {
		return Effects{}, err
	}
	switch m := m.(type) {
	case Admit:
		return admit(s, m)
	case Start:
		return start(s, m)
	case Take:
		return take(s, m)
	case Wait:
		return wait(s, m)
	case Answer:
		return answer(s, m)
	case CommitTerminal:
		return commitTerminal(s, m)
	case Recover:
		return recoverRun(s, m)
	case Cancel:
		return cancel(s, m)
	default:
		return Effects{}, fmt.Errorf("%w: unknown mutation %T", ErrInvalid, m)
	}
}

// ContentHash is the hash an idempotency record keeps of a submission.
func ContentHash(content string) string {
	h := sha256.Sum256([]byte(content))
	return hex.EncodeToString(h[:])
}

// The three enumerations over run states that every part of the system uses.
// Every state is in at least one of them: a state that is neither active,
// nor recoverable, nor terminal would leave its inputs unanswerable.

// IsActive reports whether a run in state st is being executed (listActive).
func IsActive(st record.RunState) bool { return st == record.StateActive }

// IsRecoverable reports whether a host must (re)execute a run in state st
// after a restart (scanRecoverable): queued runs, and active runs whose owner
// is gone.
func IsRecoverable(st record.RunState, ownerGone bool) bool {
	return st == record.StateQueued || (st == record.StateActive && ownerGone)
}

// IsTerminal reports whether a run in state st has ended.
func IsTerminal(st record.RunState) bool {
	switch st {
	case record.StateCompleted, record.StateFailed, record.StateInterrupted, record.StateSuperseded:
		return true
	}
	return false
}

func checkSnapshot(s Snapshot) error {
	if err := checkID("thread id", s.Thread.ID); err != nil {
		return err
	}
	if len(s.Open) != len(s.Thread.OpenRunIDs) {
		return fmt.Errorf("%w: snapshot has %d open runs, header lists %d", ErrInvalid, len(s.Open), len(s.Thread.OpenRunIDs))
	}
	active := 0
	for i, r := range s.Open {
		switch {
		case r.ID != s.Thread.OpenRunIDs[i]:
			return fmt.Errorf("%w: snapshot open run %d is %s, header lists %s", ErrInvalid, i, r.ID, s.Thread.OpenRunIDs[i])
		case r.ThreadID != s.Thread.ID:
			return fmt.Errorf("%w: open run %s belongs to thread %s", ErrInvalid, r.ID, r.ThreadID)
		case r.State != record.StateQueued && r.State != record.StateActive:
			return fmt.Errorf("%w: open run %s is %s", ErrInvalid, r.ID, r.State)
		case i > 0 && r.Seq <= s.Open[i-1].Seq:
			return fmt.Errorf("%w: open runs out of seq order at %s", ErrInvalid, r.ID)
		}
		if r.State == record.StateActive {
			active++
			if i != 0 {
				return fmt.Errorf("%w: active run %s is not at the head of thread %s", ErrInvalid, r.ID, s.Thread.ID)
			}
		}
	}
	if active > 1 {
		return fmt.Errorf("%w: thread %s has %d active runs", ErrInvalid, s.Thread.ID, active)
	}
	return nil
}

func checkID(what, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalid, what, MaxIDLen)
	}
	return nil
}

// activeRun returns the index of the thread's active run, or -1.
func activeRun(s Snapshot) int {
	return slices.IndexFunc(s.Open, func(r record.Run) bool { return r.State == record.StateActive })
}

// findOpen returns the index of run id among the open runs, or -1.
func findOpen(s Snapshot, id string) int {
	return slices.IndexFunc(s.Open, func(r record.Run) bool { return r.ID == id })
}

// next returns the thread header every write starts from.
func next(s Snapshot) record.Thread {
	t := s.Thread
	t.Version++
	t.NextRunSeq = max(t.NextRunSeq, 1)
	t.NextMessageSeq = max(t.NextMessageSeq, 1)
	t.OpenRunIDs = slices.Clone(t.OpenRunIDs)
	return t
}

func cloneRun(r record.Run) record.Run { return record.CloneRun(r) }

// release clears TakenBy on the open runs taker took, except those in
// closed: its takes end with it when it ends without absorbing them.
func release(s Snapshot, taker string, closed map[string]bool) (runs []record.Run, ids []string) {
	for _, r := range s.Open {
		if r.TakenBy == taker && r.State == record.StateQueued && !closed[r.ID] {
			r = cloneRun(r)
			r.TakenBy = ""
			runs = append(runs, r)
			ids = append(ids, r.ID)
		}
	}
	return runs, ids
}

func admit(s Snapshot, m Admit) (Effects, error) {
	if m.ThreadID != s.Thread.ID {
		return Effects{}, fmt.Errorf("%w: admission for thread %s, snapshot of %s", ErrInvalid, m.ThreadID, s.Thread.ID)
	}
	if len(m.Key) > MaxKeyLen {
		return Effects{}, fmt.Errorf("%w: idempotency key longer than %d bytes", ErrInvalid, MaxKeyLen)
	}
	hash := ContentHash(m.Content)
	if k := s.Idempotency; k != nil && m.Key != "" {
		if k.ThreadID != m.ThreadID || k.Key != m.Key {
			return Effects{}, fmt.Errorf("%w: snapshot holds key %q of thread %s", ErrInvalid, k.Key, k.ThreadID)
		}
		if k.ContentHash != hash {
			return Effects{}, fmt.Errorf("%w: key %q on thread %s was used for other content", ErrKeyReused, m.Key, m.ThreadID)
		}
		return Effects{Admission: &Admission{
			ThreadID: m.ThreadID, RunID: k.RunID, InputMessageID: k.InputMessageID, Duplicate: true,
		}}, nil
	}
	if err := checkID("input message id", m.InputMessageID); err != nil {
		return Effects{}, err
	}
	if m.StartAs != "" {
		if err := checkID("owner", m.StartAs); err != nil {
			return Effects{}, err
		}
	}

	adm := &Admission{ThreadID: m.ThreadID, InputMessageID: m.InputMessageID}
	act := activeRun(s)
	busy := len(s.Open) > 0
	var joinIdx = -1
	if busy {
		if m.Decision == nil {
			return Effects{}, fmt.Errorf("%w: thread %s is busy", ErrDecisionRequired, m.ThreadID)
		}
		d := *m.Decision
		if !d.Action.Valid() {
			return Effects{}, fmt.Errorf("%w: unknown policy action %q", ErrInvalid, d.Action)
		}
		if d.Action == ActionReject {
			return Effects{}, fmt.Errorf("%w: thread %s has a run in progress and the policy rejected the input", ErrBusy, m.ThreadID)
		}
		adm.Decision = &d
		if act >= 0 {
			adm.ActiveRunID = s.Open[act].ID
			switch d.Action {
			case ActionInterrupt:
				adm.InterruptRunID = adm.ActiveRunID
			case ActionInject:
				adm.Offer = true
			}
		}
		if d.CoalescePending {
			// Never into a run whose inputs the active run took: the take
			// was of exactly those inputs, and its run is to be absorbed
			// whole; the new input is answered next, by a run of its own.
			// Nor into a run that was started before (queued again by
			// recovery): it resumes from steps the model took without it.
			if last := len(s.Open) - 1; s.Open[last].State == record.StateQueued && s.Open[last].TakenBy == "" && s.Open[last].Attempt <= 1 {
				joinIdx = last
			}
		}
	}

	t := next(s)
	var run record.Run
	if joinIdx >= 0 {
		run = cloneRun(s.Open[joinIdx])
		run.InputMessageIDs = append(run.InputMessageIDs, m.InputMessageID)
		adm.Coalesced = true
	} else {
		if err := checkID("run id", m.RunID); err != nil {
			return Effects{}, err
		}
		if err := checkID("assistant message id", m.AssistantMessageID); err != nil {
			return Effects{}, err
		}
		run = record.Run{
			ID:                 m.RunID,
			ThreadID:           m.ThreadID,
			Seq:                t.NextRunSeq,
			State:              record.StateQueued,
			InputMessageIDs:    []string{m.InputMessageID},
			AssistantMessageID: m.AssistantMessageID,
			Attempt:            1,
			CreatedAt:          m.Now,
		}
		t.NextRunSeq++
		t.OpenRunIDs = append(t.OpenRunIDs, run.ID)
		if !busy && m.StartAs != "" {
			startAdmitted(&run, m.StartAs, m.Now)
		}
	}
	adm.RunID = run.ID
	msg := record.Message{
		ID:        m.InputMessageID,
		ThreadID:  m.ThreadID,
		RunID:     run.ID,
		Seq:       t.NextMessageSeq,
		Role:      record.RoleUser,
		Content:   m.Content,
		Hint:      m.Hint,
		Metadata:  m.Metadata,
		CreatedAt: m.Now,
	}
	t.NextMessageSeq++
	t.UpdatedAt = m.Now
	eff := Effects{
		Thread:           &t,
		RunRecords:       []record.Run{run},
		HistoryMutations: []HistoryMutation{{Op: HistoryAppend, Message: msg}},
		Run:              &run,
		Admission:        adm,
	}
	if m.Key != "" {
		eff.Idempotency = []record.Idempotency{{
			ThreadID: m.ThreadID, Key: m.Key, RunID: run.ID, InputMessageID: m.InputMessageID,
			ContentHash: hash, CreatedAt: m.Now,
		}}
	}
	return eff, nil
}

// startAdmitted makes the run an admission to an idle thread creates
// active under owner, as Start would on the snapshot the admission leaves:
// it is the head of the queue and nothing else is open. The two make one
// version step, and one commit.
func startAdmitted(run *record.Run, owner string, now time.Time) {
	run.State = record.StateActive
	run.Owner = owner
	run.StartedAt = now
}

func start(s Snapshot, m Start) (Effects, error) {
	if m.ThreadID != s.Thread.ID {
		return Effects{}, fmt.Errorf("%w: start for thread %s, snapshot of %s", ErrInvalid, m.ThreadID, s.Thread.ID)
	}
	if err := checkID("owner", m.Owner); err != nil {
		return Effects{}, err
	}
	if i := activeRun(s); i >= 0 {
		return Effects{}, fmt.Errorf("%w: run %s is active on thread %s", ErrThreadActive, s.Open[i].ID, m.ThreadID)
	}
	if len(s.Open) == 0 {
		return Effects{}, fmt.Errorf("%w: thread %s", ErrNothingQueued, m.ThreadID)
	}
	run := cloneRun(s.Open[0]) // with no active run, every open run is queued; the first is the head
	run.State = record.StateActive
	run.Owner = m.Owner
	run.StartedAt = m.Now
	t := next(s)
	t.UpdatedAt = m.Now
	return Effects{Thread: &t, RunRecords: []record.Run{run}, Run: &run}, nil
}

func commitTerminal(s Snapshot, m CommitTerminal) (Effects, error) {
	var state record.RunState
	switch m.Reason {
	case record.ReasonCompleted:
		state = record.StateCompleted
	case record.ReasonFailed:
		state = record.StateFailed
	case record.ReasonInterrupted:
		state = record.StateInterrupted
	default:
		return Effects{}, fmt.Errorf("%w: a run cannot end with reason %q", ErrInvalid, m.Reason)
	}
	if len(m.Absorb) > 0 && m.Reason != record.ReasonCompleted {
		return Effects{}, fmt.Errorf("%w: run %s ends %s and carries %d absorb entries", ErrAbsorbNotCompleted, m.RunID, m.Reason, len(m.Absorb))
	}
	if m.Reason != record.ReasonCompleted && (len(m.Steps) > 0 || m.Answer != "" || m.Final != nil) {
		return Effects{}, fmt.Errorf("%w: run %s ends %s and writes messages; only a completed run writes messages", ErrInvalid, m.RunID, m.Reason)
	}
	if m.ThreadID != s.Thread.ID {
		return Effects{}, fmt.Errorf("%w: commit for thread %s, snapshot of %s", ErrInvalid, m.ThreadID, s.Thread.ID)
	}
	i := findOpen(s, m.RunID)
	if i < 0 {
		return Effects{}, fmt.Errorf("%w: run %s is not open on thread %s", ErrNotActive, m.RunID, s.Thread.ID)
	}
	if s.Open[i].State != record.StateActive {
		return Effects{}, fmt.Errorf("%w: run %s is %s", ErrNotActive, m.RunID, s.Open[i].State)
	}
	if s.Open[i].Owner != m.Owner {
		return Effects{}, fmt.Errorf("%w: run %s is owned by %q, not %q", ErrNotOwner, m.RunID, s.Open[i].Owner, m.Owner)
	}
	if err := checkSteps(m.Steps); err != nil {
		return Effects{}, err
	}
	if f := m.Final; f != nil {
		if err := checkID("step id", f.ID); err != nil {
			return Effects{}, err
		}
		switch {
		case f.Seq <= 0:
			return Effects{}, fmt.Errorf("%w: final step of run %s has seq %d", ErrInvalid, m.RunID, f.Seq)
		case f.Kind != record.StepModel || len(f.Message.ToolCalls) > 0 || len(f.Taken) > 0:
			return Effects{}, fmt.Errorf("%w: final step of run %s must be a model step without tool calls", ErrInvalid, m.RunID)
		case f.Message.Content != m.Answer:
			return Effects{}, fmt.Errorf("%w: final step of run %s does not hold the answer", ErrInvalid, m.RunID)
		}
	}

	if m.Reason == record.ReasonCompleted && len(s.Open[i].Pending) > 0 {
		return Effects{}, fmt.Errorf("%w: run %s completes with %d tool calls waiting for an answer", ErrInvalid, m.RunID, len(s.Open[i].Pending))
	}
	t := next(s)
	run := cloneRun(s.Open[i])
	run.State = state
	run.TerminalReason = m.Reason
	run.Pending = nil
	run.Error = m.Error
	run.EndSeq = t.Version
	run.EndedAt = m.Now
	closed := map[string]bool{run.ID: true}

	// Absorb entries: keep a contiguous prefix of the queue, each naming the
	// next queued run with exactly its inputs; drop the rest.
	var absorbed []record.Run
	var dropped []DroppedAbsorb
	var kept []AbsorbEntry
	ownInputs := run.InputMessageIDs
	queue := s.Open[1:] // the active run heads the open runs (checkSnapshot); the rest queue behind it
	pos := 0
	for _, e := range orderEntries(m.Absorb, queue) {
		why := ""
		switch {
		case e.dup:
			why = "run is named by an earlier entry"
		case e.at < 0:
			why = "run is not queued on this thread"
		case e.at != pos:
			why = "run is not next in the queue"
		case !sameSet(e.entry.InputMessageIDs, queue[e.at].InputMessageIDs):
			why = "run's inputs changed since they were taken"
		case queue[e.at].TakenBy != "" && queue[e.at].TakenBy != run.ID:
			why = "run is taken by run " + queue[e.at].TakenBy
		case s.StepsKept && queue[e.at].TakenBy != run.ID:
			// The model was never shown what was not durably taken.
			why = "run was not taken by run " + run.ID
		}
		if why != "" {
			dropped = append(dropped, DroppedAbsorb{RunID: e.entry.RunID, Reason: why})
			continue
		}
		kept = append(kept, AbsorbEntry{RunID: e.entry.RunID, InputMessageIDs: queue[e.at].InputMessageIDs, At: e.entry.At})
		pos++
		a := cloneRun(queue[e.at])
		a.State = record.StateSuperseded
		a.TerminalReason = record.ReasonAbsorbed
		a.AbsorbedIntoRunID = run.ID
		a.EndSeq = t.Version
		a.EndedAt = m.Now
		run.InputMessageIDs = append(run.InputMessageIDs, a.InputMessageIDs...)
		closed[a.ID] = true
		absorbed = append(absorbed, a)
	}

	var hist []HistoryMutation
	if m.Reason == record.ReasonCompleted {
		for _, st := range m.Steps {
			st = cloneMessage(st)
			st.ThreadID, st.RunID, st.Seq, st.CreatedAt = run.ThreadID, run.ID, t.NextMessageSeq, m.Now
			t.NextMessageSeq++
			hist = append(hist, HistoryMutation{Op: HistoryAppend, Message: st})
		}
		hist = append(hist, HistoryMutation{Op: HistoryAppend, Message: record.Message{
			ID: run.AssistantMessageID, ThreadID: run.ThreadID, RunID: run.ID, Seq: t.NextMessageSeq,
			Role: record.RoleAssistant, Content: m.Answer, CreatedAt: m.Now,
		}})
		run.AnswerSeq = t.NextMessageSeq
		t.NextMessageSeq++
		if len(kept) > 0 {
			// Only when it is not the default order (inputs, then outputs).
			tr := transcript(ownInputs, m.Steps, kept, run.AssistantMessageID)
			def := slices.Clone(run.InputMessageIDs)
			for _, st := range m.Steps {
				def = append(def, st.ID)
			}
			if !slices.Equal(tr, append(def, run.AssistantMessageID)) {
				run.TranscriptIDs = tr
			}
		}
	}
	// The runs it took and did not absorb (all of them, unless it
	// completed) are ordinary queued runs again.
	released, releasedIDs := release(s, run.ID, closed)
	t.OpenRunIDs = slices.DeleteFunc(t.OpenRunIDs, func(id string) bool { return closed[id] })
	t.UpdatedAt = m.Now
	recs := append([]record.Run{run}, absorbed...)
	var steps []record.Step
	if f := m.Final; f != nil {
		st := *f
		st.Message, st.Taken = cloneMessage(f.Message), slices.Clone(f.Taken)
		st.RunID, st.ThreadID, st.Attempt = run.ID, run.ThreadID, run.Attempt
		if st.CreatedAt.IsZero() {
			st.CreatedAt = m.Now // else when the model answered
		}
		steps = []record.Step{st}
	}
	return Effects{
		Thread:           &t,
		RunRecords:       append(recs, released...),
		HistoryMutations: hist,
		Steps:            steps,
		Run:              &run,
		Dropped:          dropped,
		Released:         releasedIDs,
	}, nil
}

// transcript is the order the model saw a completed run's messages in: its
// own inputs, then its step messages with the inputs of each kept absorb
// entry before the step it was taken ahead of, then the answer.
func transcript(own []string, steps []record.Message, kept []AbsorbEntry, answer string) []string {
	slices.SortStableFunc(kept, func(a, b AbsorbEntry) int { return min(max(a.At, 0), len(steps)) - min(max(b.At, 0), len(steps)) })
	out := slices.Clone(own)
	k := 0
	for i := 0; i <= len(steps); i++ {
		for ; k < len(kept) && (kept[k].At <= i || i == len(steps)); k++ {
			out = append(out, kept[k].InputMessageIDs...)
		}
		if i < len(steps) {
			out = append(out, steps[i].ID)
		}
	}
	return append(out, answer)
}

type placedEntry struct {
	entry AbsorbEntry
	at    int  // position in the queue, -1 when the run is not queued
	dup   bool // a second entry for a run already named
}

// orderEntries places each entry in the queue and sorts them by position, so
// that entries are judged in queue order whatever order they came in. A second
// entry for the same run is placed nowhere, and dropped.
func orderEntries(entries []AbsorbEntry, queue []record.Run) []placedEntry {
	out := make([]placedEntry, 0, len(entries))
	seen := map[string]bool{}
	for _, e := range entries {
		p := placedEntry{entry: e, at: -1, dup: seen[e.RunID]}
		if !p.dup {
			p.at = slices.IndexFunc(queue, func(r record.Run) bool { return r.ID == e.RunID })
		}
		seen[e.RunID] = true
		out = append(out, p)
	}
	slices.SortStableFunc(out, func(a, b placedEntry) int {
		// Entries not in the queue sort last; they are dropped either way.
		ka, kb := a.at, b.at
		if ka < 0 {
			ka = len(queue)
		}
		if kb < 0 {
			kb = len(queue)
		}
		return ka - kb
	})
	return out
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	as, bs := slices.Clone(a), slices.Clone(b)
	slices.Sort(as)
	slices.Sort(bs)
	return slices.Equal(as, bs) && len(slices.Compact(as)) == len(a)
}

func cloneMessage(m record.Message) record.Message {
	m.ToolCalls = slices.Clone(m.ToolCalls)
	return m
}

// checkSteps checks that a completed run's step messages form a valid
// transcript: every tool call is answered by exactly one tool message, after
// it, and every tool message answers a call. A call id is unique within its
// model step (one assistant message), not within the run: a model may use
// an id again in a later step once the earlier call with it has its
// result, and a tool message answers the open call with its id. An id
// twice in one message, or asked for again while a call with it is
// unanswered, would leave a result without a call it surely answers.
func checkSteps(steps []record.Message) error {
	ids := map[string]bool{}
	open := map[string]bool{} // tool calls not yet answered
	for _, st := range steps {
		if err := checkID("step message id", st.ID); err != nil {
			return err
		}
		if ids[st.ID] {
			return fmt.Errorf("%w: step message %s appears twice", ErrInvalid, st.ID)
		}
		ids[st.ID] = true
		switch st.Role {
		case record.RoleAssistant:
			for k, c := range st.ToolCalls {
				switch {
				case c.ID == "" || c.Name == "":
					return fmt.Errorf("%w: tool call in message %s lacks an id or a name", ErrInvalid, st.ID)
				case slices.ContainsFunc(st.ToolCalls[:k], func(p record.ToolCall) bool { return p.ID == c.ID }):
					return fmt.Errorf("%w: tool call %s appears twice in message %s", ErrInvalid, c.ID, st.ID)
				case open[c.ID]:
					return fmt.Errorf("%w: tool call %s of message %s is asked for again before the earlier call with its id has a result", ErrInvalid, c.ID, st.ID)
				}
				open[c.ID] = true
			}
		case record.RoleTool:
			if !open[st.ToolCallID] {
				return fmt.Errorf("%w: tool message %s answers no pending call (%q)", ErrInvalid, st.ID, st.ToolCallID)
			}
			delete(open, st.ToolCallID)
		default:
			return fmt.Errorf("%w: step message %s has role %q", ErrInvalid, st.ID, st.Role)
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("%w: %d tool calls without a result", ErrInvalid, len(open))
	}
	return nil
}

func recoverRun(s Snapshot, m Recover) (Effects, error) {
	if m.MaxAttempts <= 0 {
		return Effects{}, fmt.Errorf("%w: max attempts %d must be positive", ErrInvalid, m.MaxAttempts)
	}
	if m.ThreadID != s.Thread.ID {
		return Effects{}, fmt.Errorf("%w: recovery for thread %s, snapshot of %s", ErrInvalid, m.ThreadID, s.Thread.ID)
	}
	i := findOpen(s, m.RunID)
	if i < 0 {
		return Effects{}, fmt.Errorf("%w: run %s is not open on thread %s", ErrRunTerminal, m.RunID, s.Thread.ID)
	}
	run := cloneRun(s.Open[i])
	if run.State == record.StateQueued {
		return Effects{Run: &run}, nil // queued runs need nothing
	}
	if run.Owner != m.DeadOwner {
		return Effects{}, fmt.Errorf("%w: run %s is owned by %q, not the gone owner %q", ErrNotOwner, run.ID, run.Owner, m.DeadOwner)
	}
	t := next(s)
	if len(run.Pending) > 0 && m.NewOwner != "" {
		if err := checkID("owner", m.NewOwner); err != nil {
			return Effects{}, err
		}
		run.Owner = m.NewOwner
		run.Attempt++
		run.WaitTakeovers++ // an attempt that executes nothing: MaxAttempts does not count it
		run.StartedAt = m.Now
		t.UpdatedAt = m.Now
		return Effects{Thread: &t, RunRecords: []record.Run{run}, Run: &run}, nil
	}
	if executed := run.Attempt - run.WaitTakeovers; executed >= m.MaxAttempts {
		run.State = record.StateFailed
		run.TerminalReason = record.ReasonFailed
		run.Error = fmt.Sprintf("abandoned after %d attempts: its host stopped each time before it ended", executed)
		run.Pending = nil
		run.EndSeq = t.Version
		run.EndedAt = m.Now
		t.OpenRunIDs = slices.DeleteFunc(t.OpenRunIDs, func(id string) bool { return id == run.ID })
		released, ids := release(s, run.ID, nil)
		t.UpdatedAt = m.Now
		return Effects{Thread: &t, RunRecords: append([]record.Run{run}, released...), Run: &run, Released: ids}, nil
	} else {
		// Its takes stay: it resumes with the inputs it durably took.
		run.State = record.StateQueued
		run.Attempt++
		run.Owner = ""
		run.StartedAt = time.Time{}
	}
	t.UpdatedAt = m.Now
	return Effects{Thread: &t, RunRecords: []record.Run{run}, Run: &run}, nil
}

func cancel(s Snapshot, m Cancel) (Effects, error) {
	if m.ThreadID != s.Thread.ID {
		return Effects{}, fmt.Errorf("%w: cancel for thread %s, snapshot of %s", ErrInvalid, m.ThreadID, s.Thread.ID)
	}
	i := findOpen(s, m.RunID)
	if i < 0 {
		return Effects{}, fmt.Errorf("%w: run %s is terminal", ErrNotQueued, m.RunID)
	}
	run := cloneRun(s.Open[i])
	switch {
	case run.State == record.StateActive && !m.Active:
		return Effects{}, fmt.Errorf("%w: run %s is %s", ErrNotQueued, m.RunID, run.State)
	case run.State != record.StateQueued && run.State != record.StateActive:
		return Effects{}, fmt.Errorf("%w: run %s is %s", ErrNotQueued, m.RunID, run.State)
	case run.TakenBy != "":
		// The active run took its inputs and may have shown them to the
		// model already: withdrawing them is cancelling that run.
		return Effects{}, &TakenError{RunID: run.ID, TakenBy: run.TakenBy}
	}
	// An active run ends here as a queued one does: the canceler writes its
	// terminal record (its executor, told through its context, writes
	// nothing more), with no messages, so its unfinished tool calls never
	// reach the history. Its owner is kept on the record for operators.
	t := next(s)
	run.State = record.StateInterrupted
	run.TerminalReason = record.ReasonCanceled
	run.Pending = nil
	run.EndSeq = t.Version
	run.EndedAt = m.Now
	t.OpenRunIDs = slices.DeleteFunc(t.OpenRunIDs, func(id string) bool { return id == run.ID })
	t.UpdatedAt = m.Now
	released, ids := release(s, run.ID, nil)
	return Effects{Thread: &t, RunRecords: append([]record.Run{run}, released...), Run: &run, Released: ids}, nil
}

func take(s Snapshot, m Take) (Effects, error) {
	if m.ThreadID != s.Thread.ID {
		return Effects{}, fmt.Errorf("%w: take for thread %s, snapshot of %s", ErrInvalid, m.ThreadID, s.Thread.ID)
	}
	if err := checkID("step id", m.StepID); err != nil {
		return Effects{}, err
	}
	switch {
	case m.Seq <= 0:
		return Effects{}, fmt.Errorf("%w: take step of run %s has seq %d", ErrInvalid, m.RunID, m.Seq)
	case len(m.Entries) == 0:
		return Effects{}, fmt.Errorf("%w: run %s takes nothing", ErrInvalid, m.RunID)
	}
	i := findOpen(s, m.RunID)
	if i < 0 {
		return Effects{}, fmt.Errorf("%w: run %s is not open on thread %s", ErrNotActive, m.RunID, s.Thread.ID)
	}
	run := s.Open[i]
	if run.State != record.StateActive {
		return Effects{}, fmt.Errorf("%w: run %s is %s", ErrNotActive, m.RunID, run.State)
	}
	if run.Owner != m.Owner {
		return Effects{}, fmt.Errorf("%w: run %s is owned by %q, not %q", ErrNotOwner, m.RunID, run.Owner, m.Owner)
	}
	// The queue behind the active run, past the runs it took before: those
	// are the prefix, and a new take continues it.
	queue := s.Open[1:]
	pos := 0
	for pos < len(queue) && queue[pos].TakenBy == run.ID {
		pos++
	}
	var taken []record.Run
	var entries []record.Take
	var dropped []DroppedAbsorb
	refusing := ""
	for _, e := range orderEntries(toAbsorb(m.Entries), queue) {
		why := refusing
		if why == "" {
			switch {
			case e.dup:
				why = "run is named by an earlier entry"
			case e.at < 0:
				why = "run is not queued on this thread"
			case queue[e.at].TakenBy == run.ID:
				why = "run is taken already"
			case queue[e.at].TakenBy != "":
				why = "run is taken by run " + queue[e.at].TakenBy
			case e.at != pos:
				why = "run is not next in the queue"
			case !sameSet(e.entry.InputMessageIDs, queue[e.at].InputMessageIDs):
				why = "run's inputs changed since they were offered"
			}
		}
		if why != "" {
			// A gap ends the prefix: nothing behind it is taken either.
			refusing = "an earlier entry was refused"
			dropped = append(dropped, DroppedAbsorb{RunID: e.entry.RunID, Reason: why})
			continue
		}
		pos++
		q := cloneRun(queue[e.at])
		q.TakenBy = run.ID
		taken = append(taken, q)
		entries = append(entries, record.Take{RunID: q.ID, InputMessageIDs: slices.Clone(q.InputMessageIDs)})
	}
	if len(taken) == 0 {
		return Effects{Dropped: dropped}, nil
	}
	t := next(s)
	t.UpdatedAt = m.Now
	st := record.Step{
		ID: m.StepID, RunID: run.ID, ThreadID: run.ThreadID, Seq: m.Seq, Attempt: run.Attempt,
		Model: m.Model, Kind: record.StepTake, Taken: entries, CreatedAt: m.Now,
	}
	r := cloneRun(run)
	return Effects{Thread: &t, RunRecords: taken, Steps: []record.Step{st}, Run: &r, Dropped: dropped}, nil
}

func toAbsorb(ts []record.Take) []AbsorbEntry {
	out := make([]AbsorbEntry, len(ts))
	for i, t := range ts {
		out[i] = AbsorbEntry{RunID: t.RunID, InputMessageIDs: t.InputMessageIDs}
	}
	return out
}

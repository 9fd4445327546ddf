package host_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/model"
)

// The simulation's oracle judges the runtime from the outside: from the
// batches that reached the store (in the order they were applied) and from
// what the model was shown and answered. It keeps its own model of every
// thread (which runs are open, in which order, how often each was started)
// and never calls the reducer, so a rule the reducer gets wrong is not
// checked by the same mistake.
//
// Rules checked, each named by the invariant it serves (docs/design.md):
//   - I2/I3: runs are absorbed only in a batch that completes the absorbing
//     run, which was active; every input of every absorbed run is in the
//     absorber's prompt (as the model was shown it) and in its answer.
//   - next in line: the absorbed runs are exactly a contiguous prefix of the queue
//     behind the absorber: no queued run was skipped.
//   - I6: a run starts only at the head of its thread's queue, and only
//     when no run of the thread is active.
//   - I1: a terminal run is never written again, so each input is answered
//     at most once; a cancel ends only a queued run; a completed run's
//     answer came from an execution by the run's owner.
//   - Recovery: a run is started at most MaxAttempts times, and a run
//     abandoned for its attempts was started that many times.
//   - I9: no model call is made for a model step whose message the run
//     committed, and no tool call is made once its result is committed.
//   - I10: every execution of one tool call carries the same key.
//   - I11: no completed run's answer holds an input of a run that ended
//     canceled. I11b: no input is in the answers of two completed runs
//     (with rules 3 and 6 this holds even across crashes: a run that took
//     an input either absorbs its run or does not answer).
type oracle struct {
	mu          sync.Mutex
	pending     []driver.Batch
	maxAttempts int

	runs   map[string]record.Run       // last written record of every run
	inputs map[string][]record.Message // run → the input messages admitted to it
	starts map[string]int
	bad    []string

	execs  execLog
	owners map[string]string // process epoch → the owner its runs execute under

	// Step records and calls, in one order (clock): what was committed
	// when, and what the model and the tools were asked when.
	clock      int64
	modelSteps map[string]int64          // run/step → when its model message was committed
	toolSteps  map[string]int64          // idempotency key → when its result was committed
	toolBy     map[string]string         // idempotency key → the epoch whose step commit wrote its result
	toolRuns   map[string]int            // epoch + " " + idempotency key → how often that process made the call
	gone       map[string]int64          // process epoch → when it was paused or killed and its successor took over
	lastCall   map[string]record.Message // run → its last committed model message
	finals     map[string]string         // run → the answer committed on its own as its last model step
	calls      []modelCall               // model calls not judged yet
	toolExecs  []toolExec                // tool executions not judged yet
	callKeys   map[string]string         // run/call id → the key its executions carried
	answeredBy map[string]string         // input content → the completed run whose answer holds it
	contentRun map[string]string         // input content → its run
	takeovers  map[string]int            // run → times a waiting run was taken over (attempt+1, no start)
	asked      map[string]bool           // idempotency key → the tool policy asked about the call
	decision   map[string]record.Answer  // idempotency key → the answer that decided it
	decidedAt  map[string]int64          // idempotency key → when
}

type modelCall struct {
	at         int64
	firstInput string // the run's first input: the model does not know the run's id
	step       int
	epoch      string // the process that made the call
}

type toolExec struct {
	at    int64
	call  model.Call
	epoch string // the process that made the call
	nth   int    // how many times that process had made it, this one included
}

func newOracle(maxAttempts int) *oracle {
	return &oracle{maxAttempts: maxAttempts, runs: map[string]record.Run{}, inputs: map[string][]record.Message{}, starts: map[string]int{}, owners: map[string]string{},
		modelSteps: map[string]int64{}, toolSteps: map[string]int64{}, toolBy: map[string]string{}, toolRuns: map[string]int{}, gone: map[string]int64{}, lastCall: map[string]record.Message{}, finals: map[string]string{},
		callKeys: map[string]string{}, answeredBy: map[string]string{}, contentRun: map[string]string{},
		takeovers: map[string]int{}, asked: map[string]bool{}, decision: map[string]record.Answer{}, decidedAt: map[string]int64{}}
}

// stepsApplied records step records the store underneath applied, committed
// by the process epoch ("" when not known); alone tells a step commit from
// the records of a batch (a terminal commit carries the answer's). The
// oracle's lock is held.
func (o *oracle) stepsApplied(epoch string, steps []record.Step, alone bool) {
	for _, st := range steps {
		o.clock++
		switch st.Kind {
		case record.StepModel:
			o.modelSteps[fmt.Sprintf("%s/%d", st.RunID, st.Model)] = o.clock
			o.lastCall[st.RunID] = st.Message
			// Only an answer committed before its terminal commit lets a
			// later execution end the run with it: the answer a terminal
			// batch carries must have been computed by the run's owner.
			if len(st.Message.ToolCalls) == 0 && alone {
				o.finals[st.RunID] = st.Message.Content
			}
		case record.StepTool:
			i := slices.IndexFunc(o.lastCall[st.RunID].ToolCalls, func(c record.ToolCall) bool { return c.ID == st.Message.ToolCallID })
			if i < 0 {
				o.failf("I12: run %s committed the result of tool call %s, which its last model step did not ask for", st.RunID, st.Message.ToolCallID)
				continue
			}
			key := model.Call{RunID: st.RunID, Step: st.Model, Index: i}.IdempotencyKey()
			o.toolSteps[key], o.toolBy[key] = o.clock, epoch
		case record.StepAsk, record.StepAnswer:
			id := st.Ask.CallID
			if st.Kind == record.StepAnswer {
				id = st.Answer.CallID
			}
			i := slices.IndexFunc(o.lastCall[st.RunID].ToolCalls, func(c record.ToolCall) bool { return c.ID == id })
			if i < 0 {
				o.failf("approval: run %s committed a %s step about tool call %s, which its last model step did not ask for", st.RunID, st.Kind, id)
				continue
			}
			key := model.Call{RunID: st.RunID, Step: st.Model, Index: i}.IdempotencyKey()
			switch {
			case st.Kind == record.StepAsk:
				o.asked[key] = true
			case !o.asked[key]:
				o.failf("approval: run %s committed an answer to tool call %s, never asked about", st.RunID, id)
			default:
				if _, ok := o.decision[key]; !ok { // approvals 1: the first answer decides
					o.decision[key], o.decidedAt[key] = st.Answer, o.clock
				}
			}
		}
	}
}

// stepBatchApplied is the fault wrapper's OnSteps callback for the process
// epoch.
func (o *oracle) stepBatchApplied(epoch string, b driver.StepBatch) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stepsApplied(epoch, b.Steps, true)
}

// modelCalled records that the model was asked for step of the run whose
// first input is firstInput.
func (o *oracle) modelCalled(firstInput string, step int, epoch string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.clock++
	o.calls = append(o.calls, modelCall{at: o.clock, firstInput: firstInput, step: step, epoch: epoch})
}

// toolCalled records an execution of a tool call by the process epoch.
func (o *oracle) toolCalled(epoch string, c model.Call) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.clock++
	k := epoch + " " + c.IdempotencyKey()
	o.toolRuns[k]++
	o.toolExecs = append(o.toolExecs, toolExec{at: o.clock, call: c, epoch: epoch, nth: o.toolRuns[k]})
}

// superseded records that the process epoch was paused or killed: its
// successor recovers its runs. What it goes on calling after that (a
// goroutine the simulation could not stop, or a process cut off from the
// store, which nothing in a store can fence off from the model) is not the
// recovered run's: I9 is about the calls of the runs that resume.
func (o *oracle) superseded(epoch string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.gone[epoch]; !ok {
		o.gone[epoch] = o.clock
	}
}

// late reports whether a call at clock at by epoch came after that process
// was superseded; the oracle's lock is held.
func (o *oracle) late(epoch string, at int64) bool {
	g, ok := o.gone[epoch]
	return ok && at > g
}

// judgeCalls judges the calls recorded since the last time (I9, I10).
func (o *oracle) judgeCalls() {
	o.mu.Lock()
	calls, execs := o.calls, o.toolExecs
	o.calls, o.toolExecs = nil, nil
	o.mu.Unlock()
	byFirst := map[string]string{}
	for _, r := range o.runs {
		if len(r.InputMessageIDs) > 0 {
			byFirst[r.InputMessageIDs[0]] = r.ID
		}
	}
	for _, c := range calls {
		run := byFirst[c.firstInput]
		o.mu.Lock()
		at, ok := o.modelSteps[fmt.Sprintf("%s/%d", run, c.step)]
		late := o.late(c.epoch, c.at)
		o.mu.Unlock()
		if ok && at < c.at && !late {
			o.failf("I9: run %s's model step %d was called again by process %s after its message was committed", run, c.step, c.epoch)
		}
	}
	for _, e := range execs {
		key := e.call.IdempotencyKey()
		o.mu.Lock()
		at, ok := o.toolSteps[key]
		by := o.toolBy[key]
		late := o.late(e.epoch, e.at)
		o.mu.Unlock()
		// The tool is told of a call when its goroutine gets to run, which
		// may be after the execution that made the call committed its
		// result (the run was interrupted, say, and stopped waiting): that
		// is the one call that result answers, not a second one. Any other
		// call seen after the result (by another process, or a second one
		// by the same) is made again.
		if ok && at < e.at && (e.epoch != by || e.nth > 1) && !late {
			o.failf("I9: tool call %s was made again (call %d of process %s) after its result was committed by process %s", key, e.nth, e.epoch, by)
		}
		o.mu.Lock()
		asked, d, dAt := o.asked[key], o.decision[key], o.decidedAt[key]
		o.mu.Unlock()
		switch {
		case !asked || late:
		case dAt == 0 || dAt > e.at:
			o.failf("approval: tool call %s was made (by process %s) before a person answered it", key, e.epoch)
		case d.Action == record.AnswerReject || d.Action == record.AnswerRespond:
			o.failf("approval: tool call %s was made (by process %s), though it was answered %s", key, e.epoch, d.Action)
		}
		id := e.call.RunID + "/" + e.call.ID
		if k, seen := o.callKeys[id]; seen && k != key {
			o.failf("I10: tool call %s was executed with key %s, and before with %s", id, key, k)
		}
		o.callKeys[id] = key
	}
}

// applied records a batch the store underneath applied; it is called under
// the fault wrapper's lock, from any goroutine.
func (o *oracle) applied(b driver.Batch) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending = append(o.pending, b)
	o.stepsApplied("", b.Steps, false)
}

// judge folds the batches applied since the last call into the model and
// returns the first violation found, or "".
func (o *oracle) judge() string {
	o.mu.Lock()
	bs := o.pending
	o.pending = nil
	o.mu.Unlock()
	for _, b := range bs {
		o.batch(b)
	}
	o.judgeCalls()
	if len(o.bad) > 0 {
		return o.bad[0]
	}
	return ""
}

func (o *oracle) failf(format string, args ...any) {
	o.bad = append(o.bad, fmt.Sprintf(format, args...))
}

// queue returns the open runs of a thread in seq order, as the model knows
// them before the batch being judged.
func (o *oracle) queue(thread string) []record.Run {
	var q []record.Run
	for _, r := range o.runs {
		if r.ThreadID == thread && (r.State == record.StateQueued || r.State == record.StateActive) {
			q = append(q, r)
		}
	}
	slices.SortFunc(q, func(a, b record.Run) int { return cmp.Compare(a.Seq, b.Seq) })
	return q
}

func isEnded(st record.RunState) bool {
	return st != record.StateQueued && st != record.StateActive
}

func (o *oracle) batch(b driver.Batch) {
	queue := o.queue(b.ThreadID)
	written := map[string]record.Run{}
	for _, r := range b.Runs {
		written[r.ID] = r
	}
	for _, m := range b.Messages {
		if m.Role == record.RoleUser {
			o.inputs[m.RunID] = append(o.inputs[m.RunID], m)
			o.contentRun[m.Content] = m.RunID
		}
	}
	var completed []record.Run
	var absorbed []record.Run
	for _, r := range b.Runs {
		prev, had := o.runs[r.ID]
		if r.ThreadID != b.ThreadID {
			o.failf("batch %s on thread %s writes run %s of thread %s", b.CommitID, b.ThreadID, r.ID, r.ThreadID)
		}
		switch {
		case had && isEnded(prev.State):
			o.failf("I1: run %s ended %s/%s is written again as %s/%s (batch %s)", r.ID, prev.State, prev.TerminalReason, r.State, r.TerminalReason, b.CommitID)
		case r.State == record.StateActive && (!had || prev.State == record.StateQueued):
			o.started(b, r, queue, written)
		case r.State == record.StateActive && prev.Owner == r.Owner && prev.Attempt == r.Attempt:
			// A wait or an answer: only its pending calls change.
		case r.State == record.StateActive && len(prev.Pending) > 0 && slices.Equal(prev.Pending, r.Pending) && r.Attempt == prev.Attempt+1:
			// A waiting run taken over by another process: still waiting,
			// and the takeover counted on the record.
			o.takeovers[r.ID]++
			if r.WaitTakeovers != prev.WaitTakeovers+1 {
				o.failf("recovery: run %s taken over while waiting has %d takeovers recorded, was %d", r.ID, r.WaitTakeovers, prev.WaitTakeovers)
			}
		case r.State == record.StateActive:
			o.failf("I6: run %s, already active under %s, is written active under %s", r.ID, prev.Owner, r.Owner)
		case r.State == record.StateQueued && had && prev.State == record.StateActive:
			// Recovery: back to the queue.
		case r.State == record.StateQueued:
		case !had:
			o.failf("I1: run %s is first written %s", r.ID, r.State)
		case r.TerminalReason == record.ReasonCanceled:
			if prev.State != record.StateQueued && prev.State != record.StateActive {
				o.failf("cancel: run %s was %s, not open, when it was canceled", r.ID, prev.State)
			}
			if prev.TakenBy != "" {
				o.failf("rule 5: run %s was canceled while run %s had taken its inputs", r.ID, prev.TakenBy)
			}
			for _, in := range o.inputs[r.ID] {
				if by, ok := o.answeredBy[in.Content]; ok {
					o.failf("I11: run %s was canceled, but its input %q is in the answer of run %s", r.ID, in.Content, by)
				}
			}
		case r.State == record.StateSuperseded:
			if prev.State != record.StateQueued {
				o.failf("I2: run %s was %s, not queued, when it was absorbed", r.ID, prev.State)
			}
			absorbed = append(absorbed, r)
		case prev.State != record.StateActive:
			o.failf("I1: run %s went from %s to %s/%s without running", r.ID, prev.State, r.State, r.TerminalReason)
		case strings.HasPrefix(r.Error, "abandoned after"):
			// Takeovers while it waited executed nothing: only its starts
			// count against its attempts.
			if o.starts[r.ID] < o.maxAttempts {
				o.failf("recovery: run %s abandoned after %d starts (and %d takeovers while waiting), %d allowed", r.ID, o.starts[r.ID], o.takeovers[r.ID], o.maxAttempts)
			}
		case r.State == record.StateCompleted:
			completed = append(completed, r)
		}
	}
	for _, r := range completed {
		o.answered(b, r)
	}
	if len(absorbed) > 0 {
		o.absorbed(b, queue, absorbed)
	}
	for _, r := range b.Runs {
		o.runs[r.ID] = r
	}
}

// started judges a start: the run heads its thread's queue and no other run
// of the thread is active.
func (o *oracle) started(b driver.Batch, r record.Run, queue []record.Run, written map[string]record.Run) {
	o.starts[r.ID]++
	if o.starts[r.ID] > o.maxAttempts {
		o.failf("recovery: run %s started %d times, %d allowed", r.ID, o.starts[r.ID], o.maxAttempts)
	}
	for _, q := range queue {
		if q.ID == r.ID {
			break
		}
		if w, ok := written[q.ID]; ok && isEnded(w.State) {
			continue
		}
		if q.State == record.StateActive {
			o.failf("I6: run %s started while run %s is active on thread %s", r.ID, q.ID, r.ThreadID)
		} else {
			o.failf("I6: run %s (seq %d) started ahead of queued run %s (seq %d)", r.ID, r.Seq, q.ID, q.Seq)
		}
	}
}

// answered judges a completed run's answer: it came from an execution by
// the run's owner, and holds the run's own inputs.
func (o *oracle) answered(b driver.Batch, r record.Run) {
	ans, ok := answerIn(b, r)
	if !ok {
		o.failf("I1: run %s completed without its answer in the same batch", r.ID)
		return
	}
	// The answer came from an execution by the run's owner, or, committed
	// on its own as the run's last model step, from an earlier one (the
	// run resumed with only its terminal commit left).
	o.mu.Lock()
	final, resumed := o.finals[r.ID]
	o.mu.Unlock()
	if _, epoch, _ := strings.Cut(ans, "\n@"); o.owners[epoch] != r.Owner && !(resumed && final == ans) {
		o.failf("owner: run %s, owned by %s, completed with an answer computed by %s", r.ID, r.Owner, epoch)
	}
	for _, part := range answerParts(ans) {
		run, ok := o.contentRun[part]
		if !ok {
			continue
		}
		if by, twice := o.answeredBy[part]; twice && by != r.ID {
			o.failf("I11b: input %q is in the answers of runs %s and %s", part, by, r.ID)
		}
		o.answeredBy[part] = r.ID
		if w, ok := o.runs[run]; ok && w.TerminalReason == record.ReasonCanceled {
			o.failf("I11: run %s's answer holds input %q of run %s, which ended canceled", r.ID, part, run)
		}
	}
	for _, in := range o.inputs[r.ID] {
		if !slices.Contains(answerParts(ans), in.Content) {
			o.failf("I1: run %s answered %q without its input %q", r.ID, ans, in.Content)
		}
	}
}

// absorbed judges the runs a batch absorbed.
func (o *oracle) absorbed(b driver.Batch, queue []record.Run, absorbed []record.Run) {
	var into record.Run
	for _, r := range b.Runs {
		if r.State == record.StateCompleted {
			into = r
		}
	}
	prevInto, had := o.runs[into.ID]
	if into.ID == "" || !had || prevInto.State != record.StateActive {
		for _, a := range absorbed {
			var end record.Run
			for _, r := range b.Runs {
				if r.ID == a.AbsorbedIntoRunID {
					end = r
				}
			}
			o.failf("I3: run %s absorbed into %s, which did not complete in that batch (it ended %s/%s)", a.ID, a.AbsorbedIntoRunID, end.State, end.TerminalReason)
		}
		return
	}
	slices.SortFunc(absorbed, func(a, b record.Run) int { return cmp.Compare(a.Seq, b.Seq) })
	// The queue behind the absorber, in order: the absorbed runs are its
	// first len(absorbed) runs.
	var behind []record.Run
	for _, q := range queue {
		if q.ID != into.ID && q.Seq > into.Seq {
			behind = append(behind, q)
		}
	}
	for i, a := range absorbed {
		if a.AbsorbedIntoRunID != into.ID {
			o.failf("I2: run %s absorbed into %s, but the batch completes %s", a.ID, a.AbsorbedIntoRunID, into.ID)
		}
		if i >= len(behind) || behind[i].ID != a.ID {
			skipped := "?"
			if i < len(behind) {
				skipped = behind[i].ID
			}
			o.failf("next in line: run %s absorbed %s, skipping queued run %s (not a contiguous prefix of the queue)", into.ID, a.ID, skipped)
		}
	}
	ans, _ := answerIn(b, into)
	for _, a := range absorbed {
		for _, in := range o.inputs[a.ID] {
			if !slices.Contains(answerParts(ans), in.Content) {
				o.failf("I2: run %s absorbed %s, but its answer %q lacks the absorbed input %q", into.ID, a.ID, ans, in.Content)
			}
			if !o.execs.shown(ans, in.ID) {
				o.failf("I2: run %s absorbed %s, but its input %s (%q) never reached the prompt of the execution that answered %q", into.ID, a.ID, in.ID, in.Content, ans)
			}
		}
	}
}

func answerIn(b driver.Batch, r record.Run) (string, bool) {
	for _, m := range b.Messages {
		if m.ID == r.AssistantMessageID {
			return m.Content, true
		}
	}
	return "", false
}

// answerParts splits an echo answer into the inputs it names, without the
// epoch the recording model adds.
func answerParts(ans string) []string {
	ans, _, _ = strings.Cut(ans, "\n@")
	return strings.Split(ans, " | ")
}

// execLog records what the model was shown for every answer it gave.
type execLog struct {
	mu      sync.Mutex
	prompts map[string][]map[string]bool // answer → the message ids of each prompt that gave it
}

func (l *execLog) add(answer string, msgs []record.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.prompts == nil {
		l.prompts = map[string][]map[string]bool{}
	}
	ids := map[string]bool{}
	for _, m := range msgs {
		ids[m.ID] = true
	}
	l.prompts[answer] = append(l.prompts[answer], ids)
}

// shown reports whether some prompt that gave answer held message id.
func (l *execLog) shown(answer, id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ids := range l.prompts[answer] {
		if ids[id] {
			return true
		}
	}
	return false
}

// recordingModel records every final answer with the prompt it came from,
// and tags the answer with the epoch of the runtime that computed it.
type recordingModel struct {
	m      model.Model
	log    *execLog
	epoch  string  // set by the runtime's first NewID("epoch"), before any step
	oracle *oracle // told of every call
}

// recordingTool is the lookup tool, telling the oracle of every execution
// and of the process that made it.
type recordingTool struct {
	oracle *oracle
	rec    *recordingModel // its epoch names the process
}

func (recordingTool) Spec() model.ToolSpec { return lookupTool{}.Spec() }
func (t recordingTool) Call(ctx context.Context, args string) (string, error) {
	if c, ok := model.CallFrom(ctx); ok {
		t.oracle.toolCalled(t.rec.epoch, c)
	}
	return "found", nil
}

func (r *recordingModel) Step(ctx context.Context, req model.Request, stream func(string)) (model.Response, error) {
	if r.oracle != nil && len(req.RunInputIDs) > 0 {
		r.oracle.modelCalled(req.RunInputIDs[0], req.Step, r.epoch)
	}
	resp, err := r.m.Step(ctx, req, stream)
	if err != nil || len(resp.ToolCalls) > 0 {
		return resp, err
	}
	resp.Content += "\n@" + r.epoch
	r.log.add(resp.Content, req.Messages)
	return resp, nil
}

package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/host/toolpolicy"
)

// errInterrupted is the cause set on a run's step context when a newer input
// asks it to stop.
var errInterrupted = errors.New("interrupted by a newer input")

// runExec is one run being executed by this process.
type runExec struct {
	mu      sync.Mutex
	run     record.Run
	ctx     context.Context         // done when the run is abandoned (Close gave up, or its lease died)
	abandon context.CancelFunc      // abandons the run
	stepCtx context.Context         // done too when the run is interrupted
	stop    context.CancelCauseFunc // interrupts the run
	steps   atomic.Int32            // model steps finished, for the policy
	// fresh: the run was started for the first time just now, so it has
	// no step records (rebuild has nothing to read).
	fresh bool
}

func (ex *runExec) init(base context.Context, run record.Run) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	ex.run = run
	ex.ctx, ex.abandon = context.WithCancel(base)
	ex.stepCtx, ex.stop = context.WithCancelCause(ex.ctx)
}

// abandonIf abandons the run if it executes under owner.
func (ex *runExec) abandonIf(owner string) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.abandon != nil && ex.run.Owner == owner {
		ex.abandon()
	}
}

func (ex *runExec) interrupt(runID string) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.stop != nil && ex.run.ID == runID {
		ex.stop(errInterrupted)
	}
}

func (ex *runExec) interrupted() bool {
	return errors.Is(context.Cause(ex.stepCtx), errInterrupted)
}

// cancel stops the run if it is runID, after its cancel was committed.
func (ex *runExec) cancel(runID string) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.stop != nil && ex.run.ID == runID {
		ex.stop(errCanceled)
	}
}

// canceled reports whether the run was canceled: its terminal record is
// written already, so the execution only stops.
func (ex *runExec) canceled() bool {
	return errors.Is(context.Cause(ex.stepCtx), errCanceled)
}

// execution is the state of one execution of a run.
type execution struct {
	rt    *Runtime
	ex    *runExec
	run   record.Run
	convo []record.Message // what the model has seen so far, in order
	// promptLen: how many of convo are the prompt the store gave, which may
	// share memory with its history cache and is never written.
	promptLen int
	steps     []record.Message // the run's tool exchanges, written if it completes
	// taken: per queued run, the inputs this run took from it, in the order
	// the runs were first taken from; takenAt: how many of steps the run had
	// when it took them (where the model saw them).
	taken     map[string][]string
	takenFrom []string
	takenAt   map[string]int
	seen      map[string]bool
	// durable: the store keeps step records. nextSeq is the Seq of the
	// run's next step record.
	durable bool
	nextSeq int64
	// resume is where a recovered run continues (see rebuild).
	resume resumePoint
	// asks and answers: the calls of model step asksStep the tool policy
	// said ask for, and the answers given to each, from the run's steps
	// (see rebuild). They are keyed by call id, which is unique within a
	// model step only: a model may use an id again in a later step, and
	// that call is asked about anew.
	asks     map[string]record.Ask
	answers  map[string][]record.Answer
	asksStep int
}

// stepAsks makes asks and answers those of model step step: empty when
// they were another step's.
func (e *execution) stepAsks(step int) {
	if e.asksStep != step {
		e.asks, e.answers, e.asksStep = map[string]record.Ask{}, map[string][]record.Answer{}, step
	}
}

// resumePoint is where an execution starts: at model step 0, or past the
// steps its earlier attempts committed.
type resumePoint struct {
	step int // the next model step to take
	// calls: the last committed model message asked for tool calls, and
	// answered holds those whose results were committed; the rest are made
	// (again, with the same keys) before step.
	call     *record.Message
	answered map[string]bool
	// final: the last committed model message is the answer; only the
	// terminal commit is left.
	final *record.Message
}

func itoa(n int) string { return strconv.Itoa(n) }

// execute runs ex's run to its terminal commit, or until it is abandoned.
func (rt *Runtime) execute(ex *runExec) {
	e := &execution{rt: rt, ex: ex, run: ex.run, taken: map[string][]string{}, takenAt: map[string]int{}, seen: map[string]bool{},
		durable: rt.st.StepsKept(), nextSeq: 1, asks: map[string]record.Ask{}, answers: map[string][]record.Answer{}}
	prompt, err := e.prompt()
	if err != nil {
		if ex.ctx.Err() == nil {
			e.fail(fmt.Errorf("building the prompt: %w", err))
		}
		return
	}
	e.convo, e.promptLen = prompt, len(prompt)
	for _, id := range e.run.InputMessageIDs {
		e.seen[id] = true
	}
	if e.durable && !ex.fresh {
		if err := e.rebuild(); err != nil {
			if ex.ctx.Err() == nil {
				e.fail(fmt.Errorf("resuming from the run's steps: %w", err))
			}
			return
		}
	}
	hooks := rt.cfg.PrepareStep
	if rt.reg != nil && e.durable {
		// Installed only when the policy can inject, and the store keeps
		// the takes: otherwise no boundary does any injection work.
		hooks = append(slices.Clip(hooks), model.PrepareStepFunc(e.injectionHook))
	}
	tools := map[string]model.Tool{}
	var names []string
	for _, t := range rt.cfg.Tools {
		tools[t.Spec().Name] = t
		names = append(names, t.Spec().Name)
	}
	if f := e.resume.final; f != nil {
		// The answer was committed as a step, the terminal commit was not.
		e.commit(runstate.CommitTerminal{Reason: record.ReasonCompleted, Answer: f.Content, Steps: e.steps, Absorb: e.absorb()})
		return
	}
	if len(e.run.Pending) > 0 {
		// A waiting run (this host took it over, or was told to interrupt
		// it): it stays waiting unless it is to stop.
		if ex.interrupted() {
			e.interruptWaiting()
			return
		}
		rt.armWaiting(ex.ctx, e.run, nil)
		return
	}
	if c := e.resume.call; c != nil && ex.interrupted() && e.asked(c) {
		// Interrupted as its last call was answered (an interrupt of the
		// waiting run whose first try met the answer): the calls without a
		// result are not run.
		e.interruptWaiting()
		return
	}
	if c := e.resume.call; c != nil {
		// Tool calls the model asked for before the crash (or before the
		// run waited) whose results were not committed: made (again, each
		// with its own key), or given the answer a person gave.
		if e.asked(c) {
			rt.stats.resumed.Add(1)
			rt.emit(e.run.ID, e.run.ThreadID, EventResumed, map[string]string{"attempt": itoa(e.run.Attempt)})
		}
		switch e.callTools(tools, e.resume.step-1, c, e.resume.answered) {
		case callsRefused:
			e.stopped()
			return
		case callsWaiting:
			return
		}
	}
	for step := e.resume.step; ; step++ {
		if ex.canceled() {
			rt.log.Info("run canceled while executing", "run", e.run.ID)
			return
		}
		if ex.interrupted() {
			e.commit(runstate.CommitTerminal{Reason: record.ReasonInterrupted, Error: errInterrupted.Error()})
			return
		}
		if step >= rt.cfg.MaxSteps {
			e.fail(fmt.Errorf("no final answer within %d steps", rt.cfg.MaxSteps))
			return
		}
		rt.emit(e.run.ID, e.run.ThreadID, EventStepStarted, map[string]string{"step": itoa(step)})
		settings := model.StepSettings{Step: step, System: rt.cfg.System, Messages: slices.Clone(e.convo), ActiveTools: slices.Clone(names), ToolChoice: "auto"}
		for _, h := range hooks {
			if settings, err = h.PrepareStep(ex.stepCtx, settings); err != nil {
				break
			}
		}
		if err != nil {
			e.stepError(fmt.Errorf("prepareStep: %w", err))
			return
		}
		req := model.Request{Step: step, System: settings.System, Messages: settings.Messages, ToolChoice: settings.ToolChoice, Params: settings.Params, RunInputIDs: e.inputIDs()}
		for _, n := range settings.ActiveTools {
			if t, ok := tools[n]; ok {
				req.Tools = append(req.Tools, t.Spec())
			}
		}
		resp, err := rt.cfg.Model.Step(ex.stepCtx, req, e.streamer(step))
		if err != nil {
			e.stepError(fmt.Errorf("model step %d: %w", step, err))
			return
		}
		ex.steps.Store(int32(step + 1))
		if id, dup := repeatedCallID(resp.ToolCalls); dup {
			// Ids are unique within a model step: a result could not be
			// told to answer one call of the two rather than the other.
			e.fail(fmt.Errorf("model step %d asked for two tool calls with the id %q", step, id))
			return
		}
		final := len(resp.ToolCalls) == 0
		id := e.run.AssistantMessageID
		if !final {
			id = rt.cfg.NewID("msg")
		}
		call := record.Message{ID: id, ThreadID: e.run.ThreadID, RunID: e.run.ID, Role: record.RoleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls}
		if final {
			// The answer's step record goes in the terminal commit: one
			// commit makes both durable, and nothing acts on the answer
			// before it (its step's end is told with it, see committed).
			e.commit(runstate.CommitTerminal{Reason: record.ReasonCompleted, Answer: resp.Content, Steps: e.steps, Absorb: e.absorb(),
				Final: e.stepRecord(step, record.StepModel, call)})
			return
		}
		// The model's message is durable before anything acts on it: a
		// recovered run does not call the model for this step again.
		if !e.commitStep(step, record.StepModel, &call) {
			e.stopped()
			return
		}
		rt.emit(e.run.ID, e.run.ThreadID, EventStepFinished, map[string]string{"step": itoa(step)})
		e.convo = append(e.convo, call)
		e.steps = append(e.steps, call)
		switch e.callTools(tools, step, &call, nil) {
		case callsRefused:
			e.stopped()
			return
		case callsWaiting:
			return
		}
	}
}

// repeatedCallID reports an id two of calls (one model step's) share.
func repeatedCallID(calls []record.ToolCall) (string, bool) {
	for i, c := range calls {
		if slices.ContainsFunc(calls[:i], func(p record.ToolCall) bool { return p.ID == c.ID }) {
			return c.ID, true
		}
	}
	return "", false
}

// The outcomes of callTools.
type callsOutcome int

const (
	callsDone    callsOutcome = iota // every call has its result (or the run stops: the loop's top says why)
	callsRefused                     // a step commit was refused: the run is no longer this execution's
	callsWaiting                     // the run waits for answers; the execution ends
)

// callTools makes the tool calls of model step step's message call, except
// those answered already, committing each result as soon as it is known.
// With a tool policy, each call not asked about before is decided first:
// allow makes it, deny commits the policy's message as its result, ask
// sets it aside; a call asked about before gets what a person answered
// (approve and edit make it, reject and respond commit the person's text).
// Once the others are done, the calls set aside make the run wait.
func (e *execution) callTools(tools map[string]model.Tool, step int, call *record.Message, answered map[string]bool) callsOutcome {
	var asks []record.Step
	e.stepAsks(step)
	for i, c := range call.ToolCalls {
		if answered[c.ID] {
			continue
		}
		if e.ex.stepCtx.Err() != nil {
			// Interrupted, canceled or abandoned: the loop's top says which.
			// The calls not made are not in the transcript: a run that does
			// not complete writes none of it to the history.
			return callsDone
		}
		mc := model.Call{RunID: e.run.ID, Step: step, Index: i, ID: c.ID}
		result, run := "", true
		if ask, ok := e.asks[c.ID]; ok {
			d, decided := runstate.Decided(ask, e.answers[c.ID])
			if !decided {
				return e.waitAgain()
			}
			switch d.Action {
			case record.AnswerEdit:
				c.Arguments = d.Arguments // the transcript's call shows it (see rebuild)
			case record.AnswerReject, record.AnswerRespond:
				result, run = d.Text, false
			}
		} else if e.rt.cfg.ToolPolicy != nil {
			switch d := e.decideTool(tools, mc, c); d.Verdict {
			case toolpolicy.Deny:
				result, run = d.Message, false
				e.rt.emit(e.run.ID, e.run.ThreadID, EventToolResult, map[string]string{"tool": c.Name, "call_id": c.ID, "error": "denied by the tool policy"})
			case toolpolicy.Ask:
				asks = append(asks, record.Step{Kind: record.StepAsk, Model: step, Ask: record.Ask{
					CallID: c.ID, Tool: c.Name, Server: toolServer(tools, c.Name), Arguments: c.Arguments,
					Prompt: d.Prompt, Approvals: max(d.Approvals, 1)}}) // its deadline is set as it is committed (wait)
				continue
			}
		}
		if run {
			result = e.callTool(tools, mc, c)
		}
		m := record.Message{ID: e.rt.cfg.NewID("msg"), ThreadID: e.run.ThreadID, RunID: e.run.ID, Role: record.RoleTool, ToolCallID: c.ID, Content: result}
		if e.ex.stepCtx.Err() != nil {
			// Interrupted, canceled or abandoned while the call was made:
			// what it returned is the run's stop, not the tool's answer, and
			// must not be committed as the call's result, or a recovered run
			// would take it for one and never make the call. The loop's top
			// ends the run.
			return callsDone
		}
		if !e.commitStep(step, record.StepTool, &m) {
			return callsRefused
		}
		e.convo = append(e.convo, m)
		e.steps = append(e.steps, m)
	}
	if len(asks) == 0 {
		return callsDone
	}
	return e.wait(asks)
}

// asked reports whether any call of the model message call was asked about.
func (e *execution) asked(call *record.Message) bool {
	return slices.ContainsFunc(call.ToolCalls, func(c record.ToolCall) bool { _, ok := e.asks[c.ID]; return ok })
}

// toolServer names the MCP server providing tool name, if any.
func toolServer(tools map[string]model.Tool, name string) string {
	if s, ok := tools[name].(interface{ Server() string }); ok {
		return s.Server()
	}
	return ""
}

// decideTool asks the tool policy about call c: its decision, or on a
// failure its fallback (counted and logged).
func (e *execution) decideTool(tools map[string]model.Tool, mc model.Call, c record.ToolCall) ToolDecision {
	rt := e.rt
	info := NewToolCallInfo(mc, c, e.run.ThreadID, toolServer(tools, c.Name))
	d, err := toolpolicy.Resolve(e.ex.stepCtx, rt.cfg.ToolPolicy, info, *rt.cfg.ToolPolicyFallback)
	if err != nil {
		rt.stats.toolPolicyFails.Add(1)
		rt.log.Warn("tool policy failed; using its fallback", "run", e.run.ID, "tool", c.Name, "call", c.ID, "fallback", d.Verdict, "err", err)
	}
	d = d.WithText(c.Name)
	if d.Verdict == toolpolicy.Ask && d.Approvals < 1 {
		d.Approvals = 1
	}
	rt.stats.toolDecisions.add(string(d.Verdict))
	return d
}

// wait commits the asks (their step ids and seqs set here) and the run's
// Pending in one versioned commit, and ends the execution: the run waits,
// and nothing holds a worker for it. A wait refused because the run moved
// on stops the execution like a refused step commit.
func (e *execution) wait(asks []record.Step) callsOutcome {
	rt := e.rt
	if e.ex.interrupted() {
		// Asked to stop before it waited: the calls set aside are not run.
		ids := make([]string, len(asks))
		for i, a := range asks {
			ids[i] = a.Ask.CallID
		}
		e.interruptCalls(asks[0].Model, ids)
		return callsWaiting
	}
	// The time limit runs from the wait, not from the model step: the
	// step's other calls, made first, may have taken long.
	deadline := rt.cfg.Now().Add(rt.cfg.ApprovalTimeout)
	for i := range asks {
		asks[i].ID, asks[i].RunID, asks[i].ThreadID = rt.cfg.NewID("step"), e.run.ID, e.run.ThreadID
		asks[i].Seq, asks[i].Attempt = e.nextSeq+int64(i), e.run.Attempt
		asks[i].Ask.Deadline = deadline
	}
	backoff := 50 * time.Millisecond
	unsure := false // an earlier try's outcome is unknown: it may have landed
	for {
		if e.ex.ctx.Err() != nil {
			return callsRefused
		}
		var run record.Run
		var err error
		if unsure {
			// Read the asks back before trying again: the wait may have
			// landed, and an answer after it (any host may commit one)
			// changed Pending, so that the same wait again would be
			// refused as another, and the run failed for it.
			run, err = e.waitLanded(asks)
			if errors.Is(err, errNotLanded) {
				run, err = rt.st.Wait(context.WithoutCancel(e.ex.ctx), e.run, asks)
			}
		} else {
			run, err = rt.st.Wait(context.WithoutCancel(e.ex.ctx), e.run, asks)
		}
		if err != nil && transient(err) {
			unsure = true
		}
		switch {
		case err == nil:
			e.nextSeq += int64(len(asks))
			rt.stats.stepCommits.Add(int64(len(asks)))
			ids := make([]string, len(asks))
			for i, st := range asks {
				e.emitStep(st)
				ids[i] = st.Ask.CallID
			}
			e.run = run
			rt.stats.waiting.Add(1)
			rt.emit(e.run.ID, e.run.ThreadID, EventWaiting, map[string]string{"call_ids": strings.Join(ids, ","), "step": itoa(asks[0].Model)})
			rt.log.Info("run waits for approval", "run", e.run.ID, "calls", ids)
			if !Waiting(run) {
				// Its reply was lost, and answers since decided every
				// call: the run is executed again once this execution
				// ends (this worker holds the thread; the kick, like the
				// answer's own, takes it again after).
				rt.coord.kick(e.run.ThreadID)
				return callsWaiting
			}
			rt.armWaiting(e.ex.ctx, run, asks)
			return callsWaiting
		case errors.Is(err, driver.ErrFenced), errors.Is(err, runstate.ErrNotActive), errors.Is(err, runstate.ErrNotOwner),
			errors.Is(err, driver.ErrVersionConflict):
			rt.log.Warn("the run's wait was refused: the run moved on", "run", e.run.ID, "err", err)
			return callsRefused
		case !transient(err):
			rt.log.Error("the run's wait was refused; failing the run", "run", e.run.ID, "err", err)
			e.fail(fmt.Errorf("committing the calls that wait for approval: %w", err))
			return callsWaiting
		}
		rt.stats.commitErrors.Add(1)
		rt.log.Warn("committing the run's wait failed; retrying", "run", e.run.ID, "err", err, "backoff", backoff)
		if !sleepCtx(e.ex.ctx, backoff) {
			return callsRefused
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// errNotLanded: a wait of unknown outcome is not in the run's log.
var errNotLanded = errors.New("the wait did not land")

// waitLanded settles a wait whose outcome was unknown by reading the run's
// log at the asks' Seq: landed, it returns the run as it is now (answers
// may have followed); not landed, errNotLanded; a read that fails, its
// error (the caller retries).
func (e *execution) waitLanded(asks []record.Step) (record.Run, error) {
	ctx := context.WithoutCancel(e.ex.ctx)
	applied, err := e.rt.st.StepsApplied(ctx, e.run.ID, asks)
	switch {
	case err != nil:
		return record.Run{}, fmt.Errorf("%w: reading back the run's wait: %w", store.ErrOutcomeUnknown, err)
	case !applied:
		return record.Run{}, errNotLanded
	}
	run, err := e.rt.st.GetRun(ctx, e.run.ID)
	switch {
	case err != nil:
		return record.Run{}, fmt.Errorf("%w: reading back the run's wait: %w", store.ErrOutcomeUnknown, err)
	case run.State != record.StateActive || run.Owner != e.run.Owner || run.Attempt != e.run.Attempt:
		return record.Run{}, fmt.Errorf("%w: run %s is %s, attempt %d of %q, since its wait", runstate.ErrNotActive, run.ID, run.State, run.Attempt, run.Owner)
	}
	return run, nil
}

// waitAgain ends an execution that found an asked call not decided yet
// though its run's record listed no pending call. A wait writes the asks
// and Pending in one commit, and only the answer that decides a call
// removes it, so this does not happen; should a store return such
// records, the run is left as it is rather than the call made unapproved.
func (e *execution) waitAgain() callsOutcome {
	e.rt.log.Warn("a resumed run found a call still waiting for its answer; it waits", "run", e.run.ID)
	return callsWaiting
}

// notRunResult is the tool result of a call a waiting run was stopped on.
const notRunResult = "The call was not run: the run was interrupted while the call waited for approval."

// interruptWaiting ends a waiting run that a newer input interrupts: each
// call of its last model step without a result (those pending, and those
// answered but not made yet) gets a result saying it was not run, then the
// run ends interrupted.
func (e *execution) interruptWaiting() {
	ids := e.run.Pending
	if c := e.resume.call; c != nil {
		ids = nil
		for _, tc := range c.ToolCalls {
			if !e.resume.answered[tc.ID] {
				ids = append(ids, tc.ID)
			}
		}
	}
	e.interruptCalls(max(e.resume.step-1, 0), ids)
}

// interruptCalls commits a not-run result for each of the calls, then the
// interrupted terminal record. A result refused (an answer any host may
// commit took its Seq; the step commits are not versioned with the
// thread) re-arms the interrupt: the worker executes the run again from
// its log as it is now, and stops it there.
func (e *execution) interruptCalls(step int, calls []string) {
	for _, id := range calls {
		m := record.Message{ID: e.rt.cfg.NewID("msg"), ThreadID: e.run.ThreadID, RunID: e.run.ID, Role: record.RoleTool, ToolCallID: id, Content: notRunResult}
		if !e.commitStep(step, record.StepTool, &m) {
			if e.ex.ctx.Err() == nil && !e.ex.canceled() {
				e.rt.log.Info("interrupting a waiting run: a result was refused; interrupting it again from its steps", "run", e.run.ID)
				// A pause first, so that a store that keeps refusing the
				// result is not asked again in a tight loop.
				if !sleepCtx(e.ex.ctx, interruptRetryPause) {
					e.stopped()
					return
				}
				e.rt.coord.rearmInterrupt(e.run.ThreadID, e.run.ID)
				return
			}
			e.stopped()
			return
		}
		e.steps = append(e.steps, m)
	}
	e.commit(runstate.CommitTerminal{Reason: record.ReasonInterrupted, Error: errInterrupted.Error()})
}

// interruptRetryPause is how long an interrupt whose not-run result was
// refused waits before it is tried again from the run's steps.
const interruptRetryPause = 100 * time.Millisecond

// unstorableResult replaces a tool result the store refused to keep (too
// large, or not storable): the model sees the call failed, and the call is
// not made again.
const unstorableResult = "error: the tool's result could not be stored (too large or invalid); it was not kept"

// stopped ends an execution whose step commit was refused: the run was
// canceled, recovered by another host, or this host lost it.
// Like a fenced terminal commit, it leaves the run to whoever has it now.
func (e *execution) stopped() {
	if e.ex.ctx.Err() == nil && !e.ex.canceled() {
		e.rt.log.Warn("run's step commit refused: the run moved on; this execution stops", "run", e.run.ID)
	}
}

// commitStep commits one step record of the run, retrying while the store
// is unavailable. It reports false when the record cannot be written: the
// run is no longer this execution's, or the execution was abandoned. Over
// a store that keeps no steps it writes nothing and reports true.
//
// A record the store refuses for what it holds (too large, invalid) is not
// left to be made again: a tool result is replaced by an error result the
// model sees (m is updated), and any other record fails the run.
func (e *execution) commitStep(step int, kind record.StepKind, m *record.Message) bool {
	if !e.durable {
		return true
	}
	st := *e.stepRecord(step, kind, *m)
	backoff := 50 * time.Millisecond
	for {
		if e.ex.ctx.Err() != nil {
			return false
		}
		err := e.rt.st.CommitSteps(context.WithoutCancel(e.ex.ctx), e.run, []record.Step{st})
		switch {
		case err == nil:
			e.nextSeq++
			e.rt.stats.stepCommits.Add(1)
			e.emitStep(st)
			return true
		case errors.Is(err, driver.ErrVersionConflict), errors.Is(err, driver.ErrFenced):
			e.rt.log.Warn("step commit refused", "run", e.run.ID, "seq", st.Seq, "err", err)
			return false
		case transient(err):
			// retried below
		case !errors.Is(err, driver.ErrTooLarge) && !errors.Is(err, driver.ErrInvalidArgument):
			e.rt.log.Warn("step commit refused", "run", e.run.ID, "seq", st.Seq, "err", err)
			return false
		case kind == record.StepTool && st.Message.Content != unstorableResult:
			e.rt.log.Error("tool result refused by the store; the model is told", "run", e.run.ID, "seq", st.Seq, "err", err)
			st.Message.Content = unstorableResult
			m.Content = unstorableResult
			continue
		default:
			e.rt.log.Error("step commit refused; failing the run", "run", e.run.ID, "seq", st.Seq, "err", err)
			e.fail(fmt.Errorf("committing step %d of the run: %w", st.Seq, err))
			return false
		}
		e.rt.stats.commitErrors.Add(1)
		e.rt.log.Warn("step commit failed; retrying", "run", e.run.ID, "err", err, "backoff", backoff)
		if !sleepCtx(e.ex.ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// stepRecord is the run's next step record, holding m; nil over a store
// that keeps no step records.
func (e *execution) stepRecord(step int, kind record.StepKind, m record.Message) *record.Step {
	if !e.durable {
		return nil
	}
	return &record.Step{ID: e.rt.cfg.NewID("step"), RunID: e.run.ID, ThreadID: e.run.ThreadID, Seq: e.nextSeq,
		Attempt: e.run.Attempt, Model: step, Kind: kind, Message: m, CreatedAt: e.rt.cfg.Now()}
}

// emitStep emits the event of a committed step record.
func (e *execution) emitStep(st record.Step) {
	e.rt.emit(e.run.ID, e.run.ThreadID, EventStepCommitted, map[string]string{"seq": strconv.FormatInt(st.Seq, 10), "kind": string(st.Kind), "step": itoa(st.Model)})
}

// rebuild reads the steps earlier attempts of the run committed and
// rebuilds its transcript from them: the inputs it took, at the boundary it
// took them, and the model and tool messages, in order. It sets where the
// execution resumes.
func (e *execution) rebuild() error {
	var steps []record.Step
	backoff := 50 * time.Millisecond
	for {
		var err error
		steps, err = e.rt.st.ReadSteps(e.ex.ctx, e.run.ID, 0, 0)
		if err == nil {
			break
		}
		if !transient(err) || e.ex.ctx.Err() != nil {
			return err
		}
		if !sleepCtx(e.ex.ctx, backoff) {
			return e.ex.ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	if len(steps) == 0 {
		return nil
	}
	// The inputs it took are those of open runs, at the history's end.
	var takenIDs []string
	for _, st := range steps {
		for _, tk := range st.Taken {
			takenIDs = append(takenIDs, tk.InputMessageIDs...)
		}
	}
	var byID map[string]record.Message
	var err error
	backoff = 50 * time.Millisecond
	for {
		byID, err = e.rt.st.MessagesByID(e.ex.ctx, e.run.ThreadID, -1, takenIDs)
		if err == nil || !transient(err) || e.ex.ctx.Err() != nil {
			break
		}
		e.rt.log.Warn("reading a resumed run's taken inputs failed; retrying", "run", e.run.ID, "err", err, "backoff", backoff)
		if !sleepCtx(e.ex.ctx, backoff) {
			return e.ex.ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	if err != nil {
		return err
	}
	for i, st := range steps {
		if st.Seq != int64(i+1) {
			return fmt.Errorf("run %s's step log has seq %d at position %d", e.run.ID, st.Seq, i+1)
		}
		switch st.Kind {
		case record.StepTake:
			for _, tk := range st.Taken {
				if _, ok := e.taken[tk.RunID]; !ok {
					e.takenFrom = append(e.takenFrom, tk.RunID)
					e.takenAt[tk.RunID] = len(e.steps)
				}
				e.taken[tk.RunID] = slices.Clone(tk.InputMessageIDs)
				for _, id := range tk.InputMessageIDs {
					m, ok := byID[id]
					if !ok {
						return fmt.Errorf("run %s took input %s, which is not in the history", e.run.ID, id)
					}
					if !e.seen[id] {
						e.seen[id] = true
						e.convo = append(e.convo, m)
					}
				}
			}
		case record.StepModel:
			m := st.Message
			e.resume = resumePoint{step: st.Model + 1}
			e.stepAsks(st.Model)
			if len(m.ToolCalls) == 0 {
				e.resume.final = &m
				continue
			}
			e.resume.call, e.resume.answered = &m, map[string]bool{}
			e.convo = append(e.convo, m)
			e.steps = append(e.steps, m)
		case record.StepAsk:
			if e.resume.call == nil || !slices.ContainsFunc(e.resume.call.ToolCalls, func(c record.ToolCall) bool { return c.ID == st.Ask.CallID }) {
				return fmt.Errorf("run %s's step %d asks about tool call %q, which its model step did not ask for", e.run.ID, st.Seq, st.Ask.CallID)
			}
			if st.Model != e.asksStep {
				return fmt.Errorf("run %s's step %d asks about tool call %q of model step %d after model step %d", e.run.ID, st.Seq, st.Ask.CallID, st.Model, e.asksStep)
			}
			e.asks[st.Ask.CallID] = st.Ask
		case record.StepAnswer:
			ask, ok := e.asks[st.Answer.CallID]
			if !ok {
				return fmt.Errorf("run %s's step %d answers tool call %q, which it did not ask about", e.run.ID, st.Seq, st.Answer.CallID)
			}
			e.answers[st.Answer.CallID] = append(e.answers[st.Answer.CallID], st.Answer)
			if d, ok := runstate.Decided(ask, e.answers[st.Answer.CallID]); ok && d.Action == record.AnswerEdit {
				e.editCall(d.CallID, d.Arguments)
			}
		case record.StepTool:
			if e.resume.call == nil || !slices.ContainsFunc(e.resume.call.ToolCalls, func(c record.ToolCall) bool { return c.ID == st.Message.ToolCallID }) {
				return fmt.Errorf("run %s's step %d answers tool call %q, which its model step did not ask for", e.run.ID, st.Seq, st.Message.ToolCallID)
			}
			e.resume.answered[st.Message.ToolCallID] = true
			e.convo = append(e.convo, st.Message)
			e.steps = append(e.steps, st.Message)
		}
	}
	if c := e.resume.call; c != nil && len(e.resume.answered) == len(c.ToolCalls) {
		e.resume.call = nil
	}
	e.nextSeq = int64(len(steps)) + 1
	e.ex.steps.Store(int32(e.resume.step))
	e.rt.stats.stepsResumed.Add(int64(len(steps)))
	e.rt.log.Info("run resumes from its steps", "run", e.run.ID, "attempt", e.run.Attempt, "steps", len(steps), "model_step", e.resume.step)
	return nil
}

// editCall makes the transcript's tool call callID (in the last model
// message, as the model and the history see it) show the arguments a
// person's edit made it run with. The model step record keeps what the
// model asked for; the answer record, the edit.
func (e *execution) editCall(callID, args string) {
	edit := func(msgs []record.Message) {
		for i := len(msgs) - 1; i >= 0; i-- {
			k := slices.IndexFunc(msgs[i].ToolCalls, func(c record.ToolCall) bool { return c.ID == callID })
			if msgs[i].Role != record.RoleAssistant || k < 0 {
				continue
			}
			calls := slices.Clone(msgs[i].ToolCalls)
			calls[k].Arguments = args
			msgs[i].ToolCalls = calls
			return
		}
	}
	// Only the run's own part: the call edited is this run's, and the
	// prompt's messages are shared with the store's cache.
	edit(e.convo[e.promptLen:])
	edit(e.steps)
}

// transient reports whether a failed commit may succeed if tried again.
func transient(err error) bool {
	return errors.Is(err, driver.ErrUnavailable) || errors.Is(err, store.ErrContention) ||
		errors.Is(err, store.ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded)
}

// prompt reads the run's prompt from the store, waiting out a store that is
// briefly unavailable (a driver being restarted) rather than failing the run
// for it.
func (e *execution) prompt() ([]record.Message, error) {
	backoff := 50 * time.Millisecond
	for {
		p, err := e.rt.st.Prompt(e.ex.ctx, e.run, nil)
		if err == nil || !transient(err) || e.ex.ctx.Err() != nil {
			return p, err
		}
		e.rt.log.Warn("reading the prompt failed; retrying", "run", e.run.ID, "err", err, "backoff", backoff)
		if !sleepCtx(e.ex.ctx, backoff) {
			return nil, e.ex.ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// sleepCtx waits d or until ctx is done; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// stepError ends the run after a failed step: abandoned runs commit nothing,
// interrupted runs end interrupted, the rest fail.
func (e *execution) stepError(err error) {
	switch {
	case e.ex.ctx.Err() != nil:
		return
	case e.ex.canceled():
		return // its cancel wrote the terminal record
	case e.ex.interrupted():
		e.commit(runstate.CommitTerminal{Reason: record.ReasonInterrupted, Error: errInterrupted.Error()})
	default:
		e.fail(err)
	}
}

func (e *execution) fail(err error) {
	e.commit(runstate.CommitTerminal{Reason: record.ReasonFailed, Error: err.Error()})
}

// injectionHook takes, at a step boundary, the offered inputs of the queued
// runs next in line: it commits the take (rule: durable before the model
// sees it), and only then adds what it took to the prompt. A take the
// store refuses takes nothing.
func (e *execution) injectionHook(ctx context.Context, s model.StepSettings) (model.StepSettings, error) {
	rt := e.rt
	rt.stats.injectBoundaries.Add(1)
	thread := e.run.ThreadID
	if !rt.reg.has(thread) {
		return s, nil
	}
	snap, err := rt.st.Thread(ctx, thread)
	if err != nil {
		rt.log.Warn("injection: reading the queue failed; taking nothing at this boundary", "run", e.run.ID, "err", err)
		return s, nil
	}
	if len(snap.Runs) == 0 || snap.Runs[0].ID != e.run.ID {
		return s, nil
	}
	// Only a contiguous prefix of the queue, past the runs taken before,
	// and only runs all of whose inputs were offered to this run:
	// absorption never skips a queued run, and never covers part of one.
	var entries []record.Take
	offered := map[string][]record.Message{}
	for _, q := range snap.Runs[1:] {
		if q.TakenBy == e.run.ID {
			continue
		}
		if q.TakenBy != "" {
			break
		}
		msgs, ok := rt.reg.lookup(thread, e.run.ID, q.InputMessageIDs)
		if !ok {
			break
		}
		entries = append(entries, record.Take{RunID: q.ID, InputMessageIDs: slices.Clone(q.InputMessageIDs)})
		offered[q.ID] = msgs
	}
	if len(entries) == 0 {
		return s, nil
	}
	stepID := rt.cfg.NewID("step")
	res, err := rt.st.Take(context.WithoutCancel(ctx), e.run, entries, stepID, e.nextSeq, s.Step)
	if err != nil {
		st, landed := e.takeLanded(stepID, err)
		if !landed {
			// Nothing taken; if the run moved on, the next commit says so.
			rt.log.Warn("injection: the take failed; taking nothing at this boundary", "run", e.run.ID, "err", err)
			return s, nil
		}
		rt.log.Warn("injection: the take's reply was lost; it landed", "run", e.run.ID, "err", err)
		res = store.TakeResult{Step: &st}
	}
	for _, d := range res.Refused {
		rt.log.Info("injection: take refused", "run", e.run.ID, "queued_run", d.RunID, "reason", d.Reason)
	}
	if res.Step == nil {
		return s, nil
	}
	e.nextSeq++
	rt.stats.stepCommits.Add(1)
	e.emitStep(*res.Step)
	for _, tk := range res.Step.Taken {
		if _, ok := e.taken[tk.RunID]; !ok {
			e.takenFrom = append(e.takenFrom, tk.RunID)
			e.takenAt[tk.RunID] = len(e.steps)
		}
		e.taken[tk.RunID] = tk.InputMessageIDs
		for _, m := range offered[tk.RunID] {
			if e.seen[m.ID] {
				continue
			}
			e.seen[m.ID] = true
			e.convo = append(e.convo, m)
			s.Messages = append(s.Messages, m)
			rt.emit(e.run.ID, thread, EventInputTaken, map[string]string{"input_message_id": m.ID, "from_run_id": tk.RunID})
		}
	}
	return s, nil
}

// takeLanded settles a take that failed with err: when its outcome may be
// unknown (a lost reply, a driver that failed after it was sent), it reads
// the run's step log at the take's Seq, retrying while the store does not
// answer, and reports the take's record if the take landed. Acting on a
// take believed lost that landed would have the run's next step refused
// for its Seq, and the run stop as if it had moved on.
func (e *execution) takeLanded(stepID string, err error) (record.Step, bool) {
	if !transient(err) {
		return record.Step{}, false // refused: nothing was written
	}
	backoff := 50 * time.Millisecond
	for {
		got, rerr := e.rt.st.ReadSteps(e.ex.ctx, e.run.ID, e.nextSeq-1, 1)
		if rerr == nil {
			if len(got) == 1 && got[0].ID == stepID && got[0].Kind == record.StepTake {
				return got[0], true
			}
			return record.Step{}, false
		}
		e.rt.log.Warn("injection: reading back a take of unknown outcome failed; retrying", "run", e.run.ID, "step", stepID, "err", rerr, "backoff", backoff)
		if !sleepCtx(e.ex.ctx, backoff) {
			return record.Step{}, false // abandoned: nothing more is done for the run here
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// inputIDs lists the messages the run answers: its own, then those taken.
func (e *execution) inputIDs() []string {
	ids := slices.Clone(e.run.InputMessageIDs)
	for _, id := range e.takenFrom {
		ids = append(ids, e.taken[id]...)
	}
	return ids
}

// absorb lists what the run took, for its completing commit.
func (e *execution) absorb() []runstate.AbsorbEntry {
	var out []runstate.AbsorbEntry
	for _, id := range e.takenFrom {
		out = append(out, runstate.AbsorbEntry{RunID: id, InputMessageIDs: e.taken[id], At: e.takenAt[id]})
	}
	return out
}

// commit writes the run's terminal record. An abandoned run commits nothing.
// Transient store errors are retried until the run is abandoned; a commit
// the reducer finds invalid is replaced by a failure.
func (e *execution) commit(c runstate.CommitTerminal) {
	rt := e.rt
	c.ThreadID, c.RunID, c.Owner = e.run.ThreadID, e.run.ID, e.run.Owner
	backoff := 50 * time.Millisecond
	unsure := false // an earlier try's outcome is unknown: it may have landed
	for {
		if e.ex.ctx.Err() != nil {
			return
		}
		done, dropped, err := rt.st.CommitTerminal(context.WithoutCancel(e.ex.ctx), c)
		if err != nil && unsure && (errors.Is(err, runstate.ErrNotActive) || errors.Is(err, runstate.ErrNotOwner)) {
			// The run ended: by the earlier try, or by something else.
			if done, dropped, ok := e.landed(c); ok {
				rt.log.Warn("terminal commit's reply was lost; it landed", "run", e.run.ID)
				e.committed(done, c, dropped)
				return
			}
		}
		if err != nil && transient(err) {
			unsure = true
		}
		switch {
		case err == nil:
			e.committed(done, c, dropped)
			return
		case errors.Is(err, driver.ErrFenced):
			// This host's lease died, or another host took the thread over:
			// the run is its new owner's to recover.
			rt.log.Warn("terminal commit fenced: the run is left to the thread's new owner", "run", e.run.ID, "err", err)
			return
		case errors.Is(err, runstate.ErrNotActive), errors.Is(err, runstate.ErrNotOwner):
			// Already ended (an earlier attempt whose reply was lost), or
			// recovered by another epoch, or canceled while its model
			// answered: nothing more to do here.
			if !e.ex.canceled() {
				rt.log.Warn("terminal commit refused: the run moved on", "run", e.run.ID, "err", err)
			}
			rt.settled(e.run.ID)
			return
		case !transient(err) && c.Reason == record.ReasonCompleted:
			rt.log.Error("terminal commit refused; failing the run", "run", e.run.ID, "err", err)
			c = runstate.CommitTerminal{ThreadID: c.ThreadID, RunID: c.RunID, Owner: c.Owner, Reason: record.ReasonFailed, Error: err.Error()}
			continue
		case !transient(err):
			// Do not leave the run active with no executor: queue it again
			// (or fail it, once it has used its attempts), as recovery would.
			rt.log.Error("terminal commit refused; queueing the run again", "run", e.run.ID, "err", err)
			if _, rerr := rt.st.Recover(context.WithoutCancel(e.ex.ctx), e.run, e.run.Owner, e.run.Owner); rerr != nil {
				rt.log.Error("queueing the run again failed; the next start recovers it", "run", e.run.ID, "err", rerr)
			}
			rt.settled(e.run.ID)
			return
		}
		rt.stats.commitErrors.Add(1)
		rt.log.Warn("terminal commit failed; retrying", "run", e.run.ID, "err", err, "backoff", backoff)
		if !sleepCtx(e.ex.ctx, backoff) {
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// landed reads the run back after a terminal commit c whose outcome was
// unknown was followed by a refusal because the run is no longer active,
// and reports whether c is what ended it: the run ended with c's reason
// under c's owner (a cancel ends it canceled; a recovery changes its
// owner). The absorb entries it kept are those whose runs it absorbed.
func (e *execution) landed(c runstate.CommitTerminal) (record.Run, []runstate.DroppedAbsorb, bool) {
	ctx := e.ex.ctx
	done, err := e.rt.st.GetRun(ctx, c.RunID)
	if err != nil || !IsTerminal(done.State) || done.TerminalReason != c.Reason || done.Owner != c.Owner || done.Attempt != e.run.Attempt {
		return record.Run{}, nil, false
	}
	var dropped []runstate.DroppedAbsorb
	for _, a := range c.Absorb {
		r, err := e.rt.st.GetRun(ctx, a.RunID)
		if err != nil || r.AbsorbedIntoRunID != done.ID {
			dropped = append(dropped, runstate.DroppedAbsorb{RunID: a.RunID, Reason: "not absorbed (read back after a lost reply)"})
		}
	}
	return done, dropped, true
}

func (e *execution) committed(done record.Run, c runstate.CommitTerminal, dropped []runstate.DroppedAbsorb) {
	rt := e.rt
	if f := c.Final; f != nil {
		// The answer's step record, written with the end. Its step ended
		// when the model answered: told now that the record is durable,
		// dated then, so that a stream gives it after the record's
		// step_committed (of the same time) and before the terminal event.
		rt.emitAt(f.CreatedAt, e.run.ID, e.run.ThreadID, EventStepFinished, map[string]string{"step": itoa(f.Model)})
		e.nextSeq++
		rt.stats.stepCommits.Add(1)
		e.emitStep(*f)
	}
	ids := []string{done.ID}
	for _, a := range c.Absorb {
		if slices.ContainsFunc(dropped, func(d runstate.DroppedAbsorb) bool { return d.RunID == a.RunID }) {
			continue
		}
		ids = append(ids, a.RunID)
		rt.stats.absorptions.Add(1)
		rt.stats.terminal.add(string(record.ReasonAbsorbed))
		rt.emit(a.RunID, done.ThreadID, EventAbsorbed, map[string]string{"into_run_id": done.ID})
	}
	for _, d := range dropped {
		rt.stats.droppedAbsorbs.Add(1)
		rt.log.Info("absorb entry dropped", "run", done.ID, "queued_run", d.RunID, "reason", d.Reason)
	}
	if rt.reg != nil && len(ids) > 1 {
		rt.reg.forget(done.ThreadID, ids[1:]...)
	}
	rt.stats.terminal.add(string(done.TerminalReason))
	rt.emit(done.ID, done.ThreadID, EventTerminal, map[string]string{"state": string(done.State), "reason": string(done.TerminalReason), "error": done.Error})
	rt.settled(ids...)
	rt.replySettled(done.ThreadID, ids...)
}

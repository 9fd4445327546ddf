package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
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
	steps []record.Message // the run's tool exchanges, written if it completes
	// taken: per queued run, the inputs this run took from it, in the order
	// the runs were first taken from.
	taken     map[string][]string
	takenFrom []string
	seen      map[string]bool
}

func itoa(n int) string { return strconv.Itoa(n) }

// execute runs ex's run to its terminal commit, or until it is abandoned.
func (rt *Runtime) execute(ex *runExec) {
	e := &execution{rt: rt, ex: ex, run: ex.run, taken: map[string][]string{}, seen: map[string]bool{}}
	prompt, err := e.prompt()
	if err != nil {
		if ex.ctx.Err() == nil {
			e.fail(fmt.Errorf("building the prompt: %w", err))
		}
		return
	}
	e.convo = prompt
	for _, id := range e.run.InputMessageIDs {
		e.seen[id] = true
	}
	hooks := rt.cfg.PrepareStep
	if rt.reg != nil {
		// Installed only when the policy can inject: otherwise no boundary
		// does any injection work.
		hooks = append(slices.Clip(hooks), model.PrepareStepFunc(e.injectionHook))
	}
	tools := map[string]model.Tool{}
	var names []string
	for _, t := range rt.cfg.Tools {
		tools[t.Spec().Name] = t
		names = append(names, t.Spec().Name)
	}
	for step := 0; ; step++ {
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
		rt.emit(e.run.ID, e.run.ThreadID, EventStepFinished, map[string]string{"step": itoa(step)})
		if len(resp.ToolCalls) == 0 {
			e.commit(runstate.CommitTerminal{Reason: record.ReasonCompleted, Answer: resp.Content, Steps: e.steps, Absorb: e.absorb()})
			return
		}
		call := record.Message{ID: rt.cfg.NewID("msg"), ThreadID: e.run.ThreadID, RunID: e.run.ID, Role: record.RoleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls}
		e.convo = append(e.convo, call)
		e.steps = append(e.steps, call)
		for i, c := range resp.ToolCalls {
			if ex.stepCtx.Err() != nil {
				break // interrupted, canceled or abandoned: the loop's top says which
			}
			m := record.Message{ID: rt.cfg.NewID("msg"), ThreadID: e.run.ThreadID, RunID: e.run.ID, Role: record.RoleTool, ToolCallID: c.ID,
				Content: e.callTool(tools, model.Call{RunID: e.run.ID, Step: step, Index: i, ID: c.ID}, c)}
			e.convo = append(e.convo, m)
			e.steps = append(e.steps, m)
		}
	}
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
// runs next in line, and adds those not yet taken to the prompt.
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
	// Only a contiguous prefix of the queue, and only runs all of whose
	// inputs were offered to this run: absorption never skips a queued run,
	// and never covers part of one.
	for _, q := range snap.Runs[1:] {
		msgs, ok := rt.reg.lookup(thread, e.run.ID, q.InputMessageIDs)
		if !ok {
			break
		}
		if _, ok := e.taken[q.ID]; !ok {
			e.takenFrom = append(e.takenFrom, q.ID)
		}
		e.taken[q.ID] = slices.Clone(q.InputMessageIDs)
		for _, m := range msgs {
			if e.seen[m.ID] {
				continue
			}
			e.seen[m.ID] = true
			e.convo = append(e.convo, m)
			s.Messages = append(s.Messages, m)
			rt.emit(e.run.ID, thread, EventInputTaken, map[string]string{"input_message_id": m.ID, "from_run_id": q.ID})
		}
	}
	return s, nil
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
		out = append(out, runstate.AbsorbEntry{RunID: id, InputMessageIDs: e.taken[id]})
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
	for {
		if e.ex.ctx.Err() != nil {
			return
		}
		done, dropped, err := rt.st.CommitTerminal(context.WithoutCancel(e.ex.ctx), c)
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
			// recovered by another epoch: nothing more to do here.
			rt.log.Warn("terminal commit refused: the run moved on", "run", e.run.ID, "err", err)
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

func (e *execution) committed(done record.Run, c runstate.CommitTerminal, dropped []runstate.DroppedAbsorb) {
	rt := e.rt
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

package host

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/model"
)

// DefaultToolTimeout bounds a tool call when neither Config.ToolTimeout nor
// the tool (model.TimeLimited) sets a limit.
const DefaultToolTimeout = 60 * time.Second

// errCanceled is the cause set on a run's step context when an operator
// cancels it while it executes (its terminal record is written already).
var errCanceled = errors.New("canceled")

// errToolTimeout is the cause of a tool call's context past its limit.
var errToolTimeout = errors.New("tool call time limit")

// streamer returns the function the model passes the step's text to as it
// streams: each piece goes out as an ephemeral delta event.
func (e *execution) streamer(step int) func(string) {
	s := strconv.Itoa(step)
	return func(delta string) {
		if delta != "" {
			e.rt.emit(e.run.ID, e.run.ThreadID, EventDelta, map[string]string{"step": s, "text": delta})
		}
	}
}

// callTool makes one tool call and returns what the model is told: the
// tool's answer, or an error text. A call past its time limit is abandoned
// (its context is canceled and the run does not wait for it) and answered
// with an error, so neither a hung tool nor one that ignores its context
// holds the run.
func (e *execution) callTool(tools map[string]model.Tool, call model.Call, c record.ToolCall) string {
	rt := e.rt
	key := call.IdempotencyKey()
	rt.emit(e.run.ID, e.run.ThreadID, EventToolCall, map[string]string{"tool": c.Name, "call_id": c.ID, "idempotency_key": key})
	out, errText := e.runTool(tools, call, c)
	rt.emit(e.run.ID, e.run.ThreadID, EventToolResult, map[string]string{"tool": c.Name, "call_id": c.ID, "error": errText})
	if errText != "" {
		return "error: " + errText
	}
	return out
}

func (e *execution) runTool(tools map[string]model.Tool, call model.Call, c record.ToolCall) (string, string) {
	t, ok := tools[c.Name]
	if !ok {
		return "", fmt.Sprintf("no tool named %q", c.Name)
	}
	limit := e.rt.cfg.ToolTimeout
	if tl, ok := t.(model.TimeLimited); ok && tl.Timeout() > 0 {
		limit = tl.Timeout()
	}
	ctx, cancel := context.WithTimeoutCause(model.WithCall(e.ex.stepCtx, call), limit, errToolTimeout)
	defer cancel()
	type answer struct {
		out string
		err error
	}
	// claim decides, once, whether the tool starts: the goroutine claims
	// it before calling the tool, or the run withdraws it when it stops
	// waiting first. A call withdrawn never starts: its result (the run
	// stopped) may be committed at once, and a tool started after that
	// would run a call the run's record says was not made (I9).
	const (
		pending = iota
		started
		withdrawn
	)
	var claim atomic.Int32
	done := make(chan answer, 1)
	go func() {
		if ctx.Err() != nil || !claim.CompareAndSwap(pending, started) {
			return
		}
		out, err := t.Call(ctx, c.Arguments)
		done <- answer{out, err}
	}()
	var a answer
	select {
	case a = <-done:
	case <-ctx.Done():
		a.err = ctx.Err()
		claim.CompareAndSwap(pending, withdrawn)
	}
	switch {
	case errors.Is(context.Cause(ctx), errToolTimeout):
		e.rt.log.Warn("tool call past its time limit", "run", e.run.ID, "tool", c.Name, "limit", limit)
		return "", fmt.Sprintf("tool %s did not answer within %s", c.Name, limit)
	case a.err != nil && e.ex.stepCtx.Err() != nil:
		return "", fmt.Sprintf("tool %s stopped: %v", c.Name, context.Cause(e.ex.stepCtx))
	case a.err != nil:
		return "", a.err.Error()
	}
	return a.out, ""
}

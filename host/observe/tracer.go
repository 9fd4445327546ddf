package observe

import (
	"context"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
)

// Attribute keys. The gen_ai.* ones are the OpenTelemetry GenAI semantic
// conventions'; the agenthost.* ones are this runtime's own.
const (
	AttrOperation      = attribute.Key("gen_ai.operation.name")
	AttrAgentName      = attribute.Key("gen_ai.agent.name")
	AttrConversationID = attribute.Key("gen_ai.conversation.id")
	AttrRequestModel   = attribute.Key("gen_ai.request.model")
	AttrTemperature    = attribute.Key("gen_ai.request.temperature")
	AttrTopP           = attribute.Key("gen_ai.request.top_p")
	AttrMaxTokens      = attribute.Key("gen_ai.request.max_tokens")
	AttrInputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	AttrOutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	AttrFinishReasons  = attribute.Key("gen_ai.response.finish_reasons")
	AttrToolName       = attribute.Key("gen_ai.tool.name")
	AttrToolCallID     = attribute.Key("gen_ai.tool.call.id")
	AttrToolType       = attribute.Key("gen_ai.tool.type")
	AttrErrorType      = attribute.Key("error.type")

	AttrRunID          = attribute.Key("agenthost.run.id")
	AttrThreadID       = attribute.Key("agenthost.thread.id")
	AttrAttempt        = attribute.Key("agenthost.run.attempt")
	AttrState          = attribute.Key("agenthost.run.state")
	AttrReason         = attribute.Key("agenthost.run.terminal_reason")
	AttrStep           = attribute.Key("agenthost.step")
	AttrDecision       = attribute.Key("agenthost.input_policy.decision")
	AttrAdmittedRunID  = attribute.Key("agenthost.admitted_run.id")
	AttrAbsorbedRunID  = attribute.Key("agenthost.absorbed_run.id")
	AttrInputMessageID = attribute.Key("agenthost.input_message.id")
	AttrFromRunID      = attribute.Key("agenthost.from_run.id")
	AttrIdempotencyKey = attribute.Key("agenthost.tool.idempotency_key")
)

// Span and span event names.
const (
	EventDecision    = "agenthost.input_policy.decision"
	EventAbsorbed    = "agenthost.absorbed"
	EventInputTaken  = "agenthost.input_taken"
	EventLeft        = "agenthost.run.left"
	SpanStep         = "agenthost.step"
	operationAgent   = "invoke_agent"
	operationChat    = "chat"
	operationTool    = "execute_tool"
	agentName        = "agenthost"
	maxPendingLinked = 10000
)

// Tracer makes the spans of runs: one per run ("invoke_agent agenthost"),
// its children one per step ("agenthost.step"), and theirs one per model
// call ("chat MODEL") and per tool call ("execute_tool TOOL"). It is the
// runtime's host.Observer (host.Config.Observer); Model and Tools make the
// call spans. The input policy's decisions and the absorptions are span
// events. A submission's trace context (its traceparent) is linked to the
// span of the run that answers it.
type Tracer struct {
	tr trace.Tracer

	mu      sync.Mutex
	runs    map[string]*runSpans    // runs executing here, by id
	threads map[string]string       // thread -> run executing here
	pending map[string][]trace.Link // submitters' traces of runs not started here yet
}

type runSpans struct {
	span     trace.Span
	step     trace.Span
	stepN    int
	terminal bool
}

// NewTracer returns a tracer making its spans with tp.
func NewTracer(tp trace.TracerProvider) *Tracer {
	return &Tracer{
		tr:      tp.Tracer("github.com/agenthost/agenthost/host/observe"),
		runs:    map[string]*runSpans{},
		threads: map[string]string{},
		pending: map[string][]trace.Link{},
	}
}

var _ host.Observer = (*Tracer)(nil)

type runKey struct{}

// Admitted records the input policy's decision as an event of the
// submission's span and of the thread's run executing here, and keeps the
// submission's trace context to link to the run that answers it.
func (t *Tracer) Admitted(ctx context.Context, threadID, runID, decision string) {
	attrs := trace.WithAttributes(AttrDecision.String(decision), AttrAdmittedRunID.String(runID), AttrThreadID.String(threadID))
	trace.SpanFromContext(ctx).AddEvent(EventDecision, attrs)
	t.mu.Lock()
	defer t.mu.Unlock()
	if active, ok := t.threads[threadID]; ok && active != runID {
		t.runs[active].span.AddEvent(EventDecision, attrs)
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	link := trace.Link{SpanContext: sc}
	if rs, ok := t.runs[runID]; ok {
		rs.span.AddLink(link)
		return
	}
	if len(t.pending) >= maxPendingLinked {
		clear(t.pending) // runs admitted long ago and never started here
	}
	t.pending[runID] = append(t.pending[runID], link)
}

// RunStarted starts the run's span.
func (t *Tracer) RunStarted(ctx context.Context, run record.Run) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	links := t.pending[run.ID]
	delete(t.pending, run.ID)
	ctx, span := t.tr.Start(ctx, operationAgent+" "+agentName,
		trace.WithNewRoot(), trace.WithLinks(links...),
		trace.WithAttributes(
			AttrOperation.String(operationAgent), AttrAgentName.String(agentName), AttrConversationID.String(run.ThreadID),
			AttrRunID.String(run.ID), AttrThreadID.String(run.ThreadID), AttrAttempt.Int(run.Attempt),
		))
	t.runs[run.ID] = &runSpans{span: span, stepN: -1}
	t.threads[run.ThreadID] = run.ID
	return context.WithValue(ctx, runKey{}, run.ID)
}

// RunEnded ends the run's span (and its last step's).
func (t *Tracer) RunEnded(ctx context.Context, run record.Run) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rs, ok := t.runs[run.ID]
	if !ok {
		return
	}
	delete(t.runs, run.ID)
	if t.threads[run.ThreadID] == run.ID {
		delete(t.threads, run.ThreadID)
	}
	if rs.step != nil {
		rs.step.End()
	}
	if !rs.terminal {
		// Abandoned (closing, a lost lease) or moved on (fenced): the
		// run's next execution, here or elsewhere, has its own span.
		rs.span.AddEvent(EventLeft)
	}
	rs.span.End()
}

// Event turns the runtime's events into step spans and span events.
func (t *Tracer) Event(e host.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch e.Type {
	case host.EventAbsorbed:
		into := e.Data["into_run_id"]
		if rs, ok := t.runs[into]; ok {
			rs.span.AddEvent(EventAbsorbed, trace.WithAttributes(AttrAbsorbedRunID.String(e.RunID)))
			for _, l := range t.pending[e.RunID] {
				rs.span.AddLink(l)
			}
		}
		delete(t.pending, e.RunID)
		return
	case host.EventTerminal:
		delete(t.pending, e.RunID)
	}
	rs, ok := t.runs[e.RunID]
	if !ok {
		return
	}
	switch e.Type {
	case host.EventStepStarted:
		n, _ := strconv.Atoi(e.Data["step"])
		if rs.step != nil {
			rs.step.End()
		}
		ctx := trace.ContextWithSpan(context.Background(), rs.span)
		_, rs.step = t.tr.Start(ctx, SpanStep, trace.WithAttributes(AttrStep.Int(n), AttrRunID.String(e.RunID)))
		rs.stepN = n
	case host.EventInputTaken:
		rs.span.AddEvent(EventInputTaken, trace.WithAttributes(AttrInputMessageID.String(e.Data["input_message_id"]), AttrFromRunID.String(e.Data["from_run_id"])))
	case host.EventTerminal:
		rs.terminal = true
		rs.span.SetAttributes(AttrState.String(e.Data["state"]), AttrReason.String(e.Data["reason"]))
		if e.Data["reason"] == string(record.ReasonFailed) {
			rs.span.SetStatus(codes.Error, e.Data["error"])
			if rs.step != nil {
				rs.step.SetStatus(codes.Error, e.Data["error"])
			}
		}
		if rs.step != nil {
			rs.step.End()
			rs.step = nil
		}
	}
}

// parent returns ctx carrying the span of the run's current step, if the
// run (ctx's, or runID) is executing here and in a step.
func (t *Tracer) parent(ctx context.Context, runID string, step int) context.Context {
	if runID == "" {
		runID, _ = ctx.Value(runKey{}).(string)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if rs, ok := t.runs[runID]; ok && rs.step != nil && (step < 0 || rs.stepN == step) {
		return trace.ContextWithSpan(ctx, rs.step)
	}
	return ctx
}

// modelCall starts a model call's span; end ends it.
func (t *Tracer) modelCall(ctx context.Context, name string, req model.Request) (context.Context, func(model.Response, error)) {
	if t == nil {
		return ctx, func(model.Response, error) {}
	}
	attrs := []attribute.KeyValue{AttrOperation.String(operationChat), AttrRequestModel.String(name), AttrStep.Int(req.Step)}
	if p := req.Params.Temperature; p != nil {
		attrs = append(attrs, AttrTemperature.Float64(*p))
	}
	if p := req.Params.TopP; p != nil {
		attrs = append(attrs, AttrTopP.Float64(*p))
	}
	if req.Params.MaxTokens > 0 {
		attrs = append(attrs, AttrMaxTokens.Int(req.Params.MaxTokens))
	}
	ctx, span := t.tr.Start(t.parent(ctx, "", req.Step), operationChat+" "+name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, func(resp model.Response, err error) {
		defer span.End()
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(AttrErrorType.String(errorType(ctx, err)))
			return
		}
		finish := "stop"
		if len(resp.ToolCalls) > 0 {
			finish = "tool_calls"
		}
		span.SetAttributes(AttrFinishReasons.StringSlice([]string{finish}))
		if resp.Usage.InputTokens > 0 || resp.Usage.OutputTokens > 0 {
			span.SetAttributes(AttrInputTokens.Int64(resp.Usage.InputTokens), AttrOutputTokens.Int64(resp.Usage.OutputTokens))
		}
	}
}

// toolCall starts a tool call's span; end ends it.
func (t *Tracer) toolCall(ctx context.Context, name string) (context.Context, func(error)) {
	if t == nil {
		return ctx, func(error) {}
	}
	attrs := []attribute.KeyValue{AttrOperation.String(operationTool), AttrToolName.String(name), AttrToolType.String("function")}
	runID, step := "", -1
	if c, ok := model.CallFrom(ctx); ok {
		runID, step = c.RunID, c.Step
		attrs = append(attrs, AttrToolCallID.String(c.ID), AttrIdempotencyKey.String(c.IdempotencyKey()), AttrStep.Int(c.Step))
	}
	ctx, span := t.tr.Start(t.parent(ctx, runID, step), operationTool+" "+name, trace.WithAttributes(attrs...))
	return ctx, func(err error) {
		defer span.End()
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(AttrErrorType.String(errorType(ctx, err)))
		}
	}
}

// errorType names a call's failure for error.type.
func errorType(ctx context.Context, err error) string {
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return "timeout"
	case ctx.Err() != nil:
		return "canceled"
	}
	return "error"
}

// Package model defines what the executor asks of a language model and of
// tools, the prepareStep hook through which a step's settings are rewritten,
// the scripted model used by tests and demos, and OpenAI, a model served by
// an OpenAI-compatible chat completions endpoint.
package model

import (
	"context"
	"strconv"
	"time"

	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/abi/record"
)

// Params are a step's model parameters, typed as the prepareStep ABI carries
// them: the model name, temperature, top_p, max_tokens and stop sequences.
// Absent values are the model's defaults. A Model sends every one it is
// given or fails the step naming the one it cannot send; none is dropped.
type Params = guestabi.ModelParams

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments, as JSON text.
	Parameters string
}

// Request is one model step.
type Request struct {
	// Step counts the run's model steps from 0.
	Step     int
	System   string
	Messages []record.Message
	Tools    []ToolSpec
	// ToolChoice is "auto" (default), "none", "required", or a tool name.
	ToolChoice string
	// Params are the step's model parameters.
	Params Params
	// RunInputIDs are the ids of the messages this run answers: its own
	// inputs, then those it took by injection.
	RunInputIDs []string
}

// Response is what a model step produced: tool calls to make, or, when there
// are none, the final answer in Content.
type Response struct {
	Content   string
	ToolCalls []record.ToolCall
	// Usage is the tokens the step used, when the model reports them.
	Usage Usage
}

// Usage counts a model step's tokens; zero when the model did not say.
type Usage struct {
	InputTokens, OutputTokens int64
}

// Model runs one step. stream, when not nil, receives text as it is
// produced. Implementations must be safe for concurrent use.
type Model interface {
	Step(ctx context.Context, req Request, stream func(delta string)) (Response, error)
}

// Tool is something a model may call.
type Tool interface {
	Spec() ToolSpec
	// Call runs the tool with the model's arguments (JSON text). An error is
	// reported to the model as the tool's result; it does not fail the run.
	// The call's context carries its Call (CallFrom) and the call's time
	// limit.
	Call(ctx context.Context, arguments string) (string, error)
}

// TimeLimited is a Tool with its own time limit per call. The executor
// bounds the calls of other tools by its default limit.
type TimeLimited interface {
	Tool
	Timeout() time.Duration
}

// Call identifies one tool call of a run.
type Call struct {
	RunID string
	// Step is the model step that asked for the call, from 0; Index is the
	// call's place among that step's calls, from 0.
	Step, Index int
	// ID is the model's id of the call.
	ID string
}

// IdempotencyKey is the call's stable key, "runID/stepN/callIndex": the same
// every time this call is made, so a tool with side effects can do them
// once.
func (c Call) IdempotencyKey() string {
	return c.RunID + "/step" + strconv.Itoa(c.Step) + "/" + strconv.Itoa(c.Index)
}

type callKey struct{}

// WithCall returns ctx carrying the tool call c.
func WithCall(ctx context.Context, c Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// CallFrom returns the tool call ctx carries, if any.
func CallFrom(ctx context.Context) (Call, bool) {
	c, ok := ctx.Value(callKey{}).(Call)
	return c, ok
}

// StepSettings are a step's settings as prepareStep hooks see and rewrite
// them.
type StepSettings struct {
	Step        int
	System      string
	Messages    []record.Message
	ActiveTools []string // names of the tools the model may call this step
	ToolChoice  string
	Params      Params
}

// PrepareStep rewrites a step's settings at a step boundary. Hooks run in
// order, each seeing the previous one's result.
type PrepareStep interface {
	PrepareStep(ctx context.Context, s StepSettings) (StepSettings, error)
}

// PrepareStepFunc adapts a function to PrepareStep.
type PrepareStepFunc func(ctx context.Context, s StepSettings) (StepSettings, error)

// PrepareStep implements PrepareStep.
func (f PrepareStepFunc) PrepareStep(ctx context.Context, s StepSettings) (StepSettings, error) {
	return f(ctx, s)
}

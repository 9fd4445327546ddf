// Package model defines what the executor asks of a language model and of
// tools, the prepareStep hook through which a step's settings are rewritten,
// the scripted model used by tests and demos, and OpenAI, a model served by
// an OpenAI-compatible chat completions endpoint.
package model

import (
	"context"

	"github.com/agenthost/agenthost/abi/record"
)

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
	// Params are model parameters (temperature, max_tokens, ...), as text.
	Params map[string]string
	// RunInputIDs are the ids of the messages this run answers: its own
	// inputs, then those it took by injection.
	RunInputIDs []string
}

// Response is what a model step produced: tool calls to make, or, when there
// are none, the final answer in Content.
type Response struct {
	Content   string
	ToolCalls []record.ToolCall
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
	Call(ctx context.Context, arguments string) (string, error)
}

// StepSettings are a step's settings as prepareStep hooks see and rewrite
// them.
type StepSettings struct {
	Step        int
	System      string
	Messages    []record.Message
	ActiveTools []string // names of the tools the model may call this step
	ToolChoice  string
	Params      map[string]string
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

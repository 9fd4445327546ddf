package step

import (
	"context"

	"github.com/agenthost/agenthost/abi/guestabi"
)

type (
	// Request is the step about to run and its current settings.
	Request = guestabi.StepRequest
	// Settings are what a hook may change.
	Settings = guestabi.StepSettings
	// Result holds the new settings and the messages to add for this step.
	Result = guestabi.StepResult
	// Message is a prompt message.
	Message = guestabi.Message
	// ModelParams are a step's model parameters.
	ModelParams = guestabi.ModelParams
)

// Hook rewrites a step's settings. Result.Settings replace the request's
// settings wholesale; Result.AppendMessages are added after the request's
// messages for this step. Implementations must be safe for concurrent use.
type Hook interface {
	PrepareStep(ctx context.Context, req Request) (Result, error)
}

// HookFunc adapts a function to Hook.
type HookFunc func(ctx context.Context, req Request) (Result, error)

// PrepareStep implements Hook.
func (f HookFunc) PrepareStep(ctx context.Context, req Request) (Result, error) { return f(ctx, req) }

// Unchanged returns the result that leaves a step as it is.
func Unchanged(req Request) Result { return Result{StepSettings: req.StepSettings} }

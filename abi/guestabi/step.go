package guestabi

// StepRequest is the prepareStep request, sent to the guest as JSON: the step
// about to run and its current settings.
type StepRequest struct {
	// Step is the number of the step about to run, from 1.
	Step int `json:"step"`
	// Messages are the messages the step will send, in order.
	Messages []Message `json:"messages"`
	StepSettings
}

// StepSettings are the settings of a step that a prepareStep hook may change.
type StepSettings struct {
	// System is the system prompt.
	System string `json:"system"`
	// ActiveTools names the tools the model may call; empty for none.
	ActiveTools []string `json:"activeTools"`
	// ToolChoice is "auto", "none", "required", or the name of a tool.
	ToolChoice string `json:"toolChoice"`
	// Model holds the model parameters.
	Model ModelParams `json:"model"`
}

// ModelParams are the model parameters of a step. Absent values are the
// provider's defaults.
type ModelParams struct {
	Model       string   `json:"model,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"topP,omitempty"`
	MaxTokens   int      `json:"maxTokens,omitempty"`
	Stop        []string `json:"stop,omitempty"`
}

// Message is one message of a step's prompt.
type Message struct {
	// Role is "system", "user", "assistant" or "tool".
	Role    string `json:"role"`
	Content string `json:"content"`
}

// StepResult is what a prepareStep hook returns, as JSON. The host applies it
// onto the request's settings: a member absent from the JSON leaves that
// setting as it was, a member present replaces it (so "activeTools": []
// removes every tool). AppendMessages are added after the request's
// messages, for this step only.
type StepResult struct {
	StepSettings
	AppendMessages []Message `json:"appendMessages,omitempty"`
}

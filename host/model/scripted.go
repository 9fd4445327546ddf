package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agenthost/agenthost/abi/record"
)

// Script drives the scripted model: step i of every run plays Steps[i] (the
// last one again when a run has more steps than the script).
//
// In JSON:
//
//	{"steps": [
//	  {"delay": "200ms", "tool": {"name": "search", "arguments": "{\"q\":\"x\"}"}},
//	  {"delay": "50ms", "answer": "echo"}
//	]}
type Script struct {
	Steps []ScriptStep `json:"steps"`
	// When plays other steps for runs whose first own input (the first of
	// Request.RunInputIDs) contains a case's Input: the first matching case
	// wins, Steps is the default.
	When []ScriptCase `json:"when,omitempty"`
}

// ScriptCase is a script for the runs whose first input contains Input.
type ScriptCase struct {
	Input string       `json:"input"`
	Steps []ScriptStep `json:"steps"`
}

// ScriptStep is one scripted model step. Exactly one of Tool, Fail and
// Answer applies, in that order; an empty step answers "echo".
type ScriptStep struct {
	// Delay is how long the step takes (a Go duration).
	Delay Duration `json:"delay,omitempty"`
	// Tool makes the step call a tool.
	Tool *ScriptTool `json:"tool,omitempty"`
	// Fail makes the step fail with this message.
	Fail string `json:"fail,omitempty"`
	// Answer is the final answer. "echo" (or empty) answers with the user
	// messages of the prompt that come after its last assistant answer (an
	// assistant message that only calls tools does not count), joined by
	// " | ", so a test reads from the answer exactly which inputs the model
	// saw.
	Answer string `json:"answer,omitempty"`
}

// ScriptTool is a scripted tool call.
type ScriptTool struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments,omitempty"`
}

// Duration is a time.Duration written as a Go duration string in JSON.
type Duration time.Duration

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"150ms\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("negative duration %s", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// ErrScripted is the error a scripted failure wraps.
var ErrScripted = errors.New("scripted model failure")

// Scripted is a model that plays a Script.
type Scripted struct {
	script Script
	// Sleep waits for d or until ctx is done; tests may replace it.
	Sleep func(ctx context.Context, d time.Duration) error
}

// NewScripted returns a model playing s. An empty script answers "echo" at
// once.
func NewScripted(s Script) (*Scripted, error) {
	check := func(steps []ScriptStep) error {
		for i, st := range steps {
			if st.Tool != nil && st.Tool.Name == "" {
				return fmt.Errorf("script step %d: tool call without a name", i)
			}
		}
		return nil
	}
	if err := check(s.Steps); err != nil {
		return nil, err
	}
	for _, c := range s.When {
		if c.Input == "" {
			return nil, errors.New("script case with an empty input")
		}
		if err := check(c.Steps); err != nil {
			return nil, fmt.Errorf("script case %q: %w", c.Input, err)
		}
	}
	return &Scripted{script: s, Sleep: sleep}, nil
}

// LoadScript reads a Script from a JSON file.
func LoadScript(path string) (Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Script{}, err
	}
	var s Script
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Script{}, fmt.Errorf("script %s: %w", path, err)
	}
	return s, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Step implements Model.
func (m *Scripted) Step(ctx context.Context, req Request, stream func(string)) (Response, error) {
	steps := m.script.Steps
	if len(m.script.When) > 0 {
		first := firstOwnInput(req)
		for _, c := range m.script.When {
			if strings.Contains(first, c.Input) {
				steps = c.Steps
				break
			}
		}
	}
	st := ScriptStep{}
	if n := len(steps); n > 0 {
		st = steps[min(req.Step, n-1)]
	}
	if err := m.Sleep(ctx, time.Duration(st.Delay)); err != nil {
		return Response{}, err
	}
	switch {
	case st.Tool != nil && req.ToolChoice != "none":
		return Response{ToolCalls: []record.ToolCall{{
			ID: fmt.Sprintf("call_%d", req.Step), Name: st.Tool.Name, Arguments: st.Tool.Arguments,
		}}}, nil
	case st.Fail != "":
		return Response{}, fmt.Errorf("%w: %s", ErrScripted, st.Fail)
	}
	answer := st.Answer
	if answer == "" || answer == "echo" {
		answer = Echo(req.Messages)
	}
	if stream != nil {
		stream(answer)
	}
	return Response{Content: answer}, nil
}

// firstOwnInput is the content of the run's first own input.
func firstOwnInput(req Request) string {
	if len(req.RunInputIDs) == 0 {
		return ""
	}
	for _, m := range req.Messages {
		if m.ID == req.RunInputIDs[0] {
			return m.Content
		}
	}
	return ""
}

// Echo joins the user messages after the last assistant answer with " | ".
// Assistant messages that only call tools do not count as answers.
func Echo(msgs []record.Message) string {
	var parts []string
	for _, m := range msgs {
		switch m.Role {
		case record.RoleAssistant:
			if len(m.ToolCalls) == 0 {
				parts = parts[:0]
			}
		case record.RoleUser:
			parts = append(parts, m.Content)
		}
	}
	return strings.Join(parts, " | ")
}

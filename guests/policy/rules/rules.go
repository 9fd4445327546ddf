// Package rules holds the decision logic of the standard guests as plain Go,
// so that the guests, their native twins in benchmarks, and their tests share
// one definition. The C refine guest (guests/policy/refine-c) implements
// Refine byte for byte the same way.
package rules

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agenthost/agenthost/abi/guestabi"
)

// PolicyConfig is the configuration blob of the standard inputPolicy guests,
// as JSON: {"coalescePending": true}. An empty blob is the zero config.
type PolicyConfig struct {
	CoalescePending bool `json:"coalescePending"`
}

// ParsePolicyConfig parses a PolicyConfig, strictly.
func ParsePolicyConfig(b []byte) (PolicyConfig, error) {
	var c PolicyConfig
	return c, parse(b, &c)
}

func parse(b []byte, v any) error {
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// Refine decides the refine policy's action from the submitter's hint and
// the new input's text:
//
//   - hint "refine" (any case) -> inject; hint "redirect" -> interrupt;
//   - otherwise the text, compared in ASCII lower case: the word "stop" or
//     "cancel" anywhere -> interrupt;
//   - a text starting with the word "actually" or "also", or containing
//     "bullet point", "shorter", "more concise" or "more detail" -> inject;
//   - anything else -> queue.
func Refine(hint, content string) string {
	switch {
	case equalFold(hint, "refine"):
		return guestabi.ActionInject
	case equalFold(hint, "redirect"):
		return guestabi.ActionInterrupt
	}
	t := strings.TrimLeft(content, " \t\r\n")
	if hasWord(t, "stop") || hasWord(t, "cancel") {
		return guestabi.ActionInterrupt
	}
	if startsWithWord(t, "actually") || startsWithWord(t, "also") ||
		hasFold(t, "bullet point") || hasFold(t, "shorter") ||
		hasFold(t, "more concise") || hasFold(t, "more detail") {
		return guestabi.ActionInject
	}
	return guestabi.ActionQueue
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func isLetter(c byte) bool { c = lower(c); return 'a' <= c && c <= 'z' }

func equalFold(s, lw string) bool {
	if len(s) != len(lw) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if lower(s[i]) != lw[i] {
			return false
		}
	}
	return true
}

// matchAt reports whether s[i:] starts with the lower-case needle lw.
func matchAt(s string, i int, lw string) bool {
	if len(s)-i < len(lw) {
		return false
	}
	for j := 0; j < len(lw); j++ {
		if lower(s[i+j]) != lw[j] {
			return false
		}
	}
	return true
}

func hasFold(s, lw string) bool {
	for i := 0; i+len(lw) <= len(s); i++ {
		if matchAt(s, i, lw) {
			return true
		}
	}
	return false
}

func wordAt(s string, i int, lw string) bool {
	if !matchAt(s, i, lw) {
		return false
	}
	if i > 0 && isLetter(s[i-1]) {
		return false
	}
	end := i + len(lw)
	return end == len(s) || !isLetter(s[end])
}

func hasWord(s, lw string) bool {
	for i := 0; i+len(lw) <= len(s); i++ {
		if wordAt(s, i, lw) {
			return true
		}
	}
	return false
}

func startsWithWord(s, lw string) bool { return wordAt(s, 0, lw) }

// StepBudgetConfig configures the step-budget guest: {"maxSteps": 5,
// "message": "..."}. MaxSteps must be at least 1.
type StepBudgetConfig struct {
	MaxSteps int    `json:"maxSteps"`
	Message  string `json:"message"`
}

// DefaultBudgetMessage is the instruction added once the budget is spent.
const DefaultBudgetMessage = "The step budget is spent: do not call tools; give your final answer now."

// ParseStepBudgetConfig parses and checks a StepBudgetConfig.
func ParseStepBudgetConfig(b []byte) (StepBudgetConfig, error) {
	c := StepBudgetConfig{MaxSteps: 5}
	if err := parse(b, &c); err != nil {
		return c, err
	}
	if c.MaxSteps < 1 {
		return c, fmt.Errorf("config: maxSteps must be at least 1, got %d", c.MaxSteps)
	}
	if c.Message == "" {
		c.Message = DefaultBudgetMessage
	}
	return c, nil
}

// StepBudget applies the budget: from step MaxSteps+1 on (after MaxSteps
// steps have run) no tool is active, the tool choice is "none", and a system
// message asks for the final answer. Earlier steps are left unchanged.
func StepBudget(c StepBudgetConfig, r *guestabi.StepRequest) guestabi.StepResult {
	res := guestabi.StepResult{StepSettings: r.StepSettings}
	if r.Step <= c.MaxSteps {
		return res
	}
	res.ActiveTools = []string{}
	res.ToolChoice = "none"
	res.AppendMessages = []guestabi.Message{{Role: "system", Content: c.Message}}
	return res
}

// SystemInstructionConfig configures the system-instruction guest:
// {"instruction": "..."}; the instruction must not be empty.
type SystemInstructionConfig struct {
	Instruction string `json:"instruction"`
}

// ParseSystemInstructionConfig parses and checks a SystemInstructionConfig.
func ParseSystemInstructionConfig(b []byte) (SystemInstructionConfig, error) {
	var c SystemInstructionConfig
	if err := parse(b, &c); err != nil {
		return c, err
	}
	if strings.TrimSpace(c.Instruction) == "" {
		return c, fmt.Errorf("config: instruction is required")
	}
	return c, nil
}

// SystemInstruction appends the instruction to the system prompt, separated
// by a blank line, at every step.
func SystemInstruction(c SystemInstructionConfig, r *guestabi.StepRequest) guestabi.StepResult {
	res := guestabi.StepResult{StepSettings: r.StepSettings}
	if res.System == "" {
		res.System = c.Instruction
	} else {
		res.System += "\n\n" + c.Instruction
	}
	return res
}

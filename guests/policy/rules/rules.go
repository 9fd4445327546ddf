package rules

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"strconv"
	"strings"

	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/sdk/guest"
)

// PolicyConfig is the configuration blob of the standard inputPolicy guests,
// as JSON: {"coalescePending": true}. An empty blob is the zero config.
type PolicyConfig struct {
	CoalescePending bool
}

// ParsePolicyConfig parses a PolicyConfig, strictly.
func ParsePolicyConfig(b []byte) (PolicyConfig, error) {
	var c PolicyConfig
	m, err := guest.ParseConfig(b, "coalescePending")
	if err == nil {
		c.CoalescePending, err = m.Bool("coalescePending")
	}
	return c, err
}

// Refine decides the refine policy's action from the submitter's hint and
// the new input's text:
//
//   - hint "refine" (any case) -> inject; hint "redirect" -> interrupt;
//   - otherwise the text, compared in ASCII lower case after leading white
//     space: the word "stop" or "cancel" anywhere -> interrupt;
//   - a text starting with the word "actually" or "also", or containing
//     "bullet point", "shorter", "more concise" or "more detail" -> inject;
//   - anything else -> queue.
//
// A word is a run of ASCII letters: "stopped" does not contain the word
// "stop", "actually," starts with the word "actually".
//
// The text is scanned 8 bytes at a time and looked at closely only where it
// holds the first letter of a phrase: under a per-call deadline, wazero pays a
// check on every loop iteration, so a guest's loops should be few.
func Refine(hint, content string) string {
	switch {
	case equalFold(hint, "refine"):
		return guestabi.ActionInject
	case equalFold(hint, "redirect"):
		return guestabi.ActionInterrupt
	}
	// Leading white space, without strings.TrimLeft's set construction.
	t := content
	for len(t) > 0 && (t[0] == ' ' || t[0] == '\t' || t[0] == '\r' || t[0] == '\n') {
		t = t[1:]
	}
	n := len(t)
	// The text padded with zeros to a multiple of 8, plus 16 bytes, so that
	// every 8-byte load is in bounds and reads zeros past the end.
	size := (n+7)&^7 + 16
	var small [256]byte
	var b []byte
	if size <= len(small) {
		b = small[:size]
	} else {
		b = make([]byte, size)
	}
	copy(b, t)
	seen := 0
	for base := 0; base < n; base += 8 {
		w := lower8(binary.LittleEndian.Uint64(b[base:]))
		cand := zeroBytes(w^(ones*'s')) | zeroBytes(w^(ones*'c')) |
			zeroBytes(w^(ones*'b')) | zeroBytes(w^(ones*'m'))
		for cand != 0 {
			i := base + bits.TrailingZeros64(cand)/8
			cand &= cand - 1
			if i >= n {
				break
			}
			// The phrases that start at b[i], checked here rather than in
			// a function: under closure checks a Go function entry costs
			// an exit from the compiled code.
			// The start of a word is checked last: most candidates fail
			// before it.
			w := lower8(binary.LittleEndian.Uint64(b[i:]))
			switch byte(w) {
			case 's':
				if w&mask(4) == litStop && wordEnd(b, i, 4, n) && (i == 0 || !isLetter(b[i-1])) {
					seen |= seenStop
				} else if w&mask(7) == litShorter {
					seen |= seenRefine
				}
			case 'c':
				if w&mask(6) == litCancel && wordEnd(b, i, 6, n) && (i == 0 || !isLetter(b[i-1])) {
					seen |= seenStop
				}
			case 'b':
				if w == litBulletP && lower8(binary.LittleEndian.Uint64(b[i+8:]))&mask(4) == litOint {
					seen |= seenRefine
				}
			case 'm':
				next := lower8(binary.LittleEndian.Uint64(b[i+8:]))
				if w == litMoreCon && next&mask(4) == litCise || w == litMoreDet && next&mask(3) == litAil {
					seen |= seenRefine
				}
			}
		}
		if seen&seenStop != 0 {
			return guestabi.ActionInterrupt
		}
	}
	if seen&seenRefine != 0 {
		return guestabi.ActionInject
	}
	w := lower8(binary.LittleEndian.Uint64(b))
	if w == litActually && wordEnd(b, 0, 8, n) || w&mask(4) == litAlso && wordEnd(b, 0, 4, n) {
		return guestabi.ActionInject
	}
	return guestabi.ActionQueue
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080

	seenRefine = 1
	seenStop   = 2
)

// lower8 lower-cases the ASCII letters among 8 bytes.
func lower8(x uint64) uint64 {
	h := x &^ highs
	geA := h + ones*(0x80-'A')
	gtZ := h + ones*(0x80-'Z'-1)
	return x | (geA&^gtZ&^x&highs)>>2
}

// zeroBytes has the high bit set in the lowest byte of x that is 0 (and
// maybe in bytes above it; callers use the lowest set bit first).
func zeroBytes(x uint64) uint64 { return (x - ones) &^ x & highs }

// lit packs up to 8 bytes little endian.
func lit(s string) uint64 {
	var v uint64
	for i := len(s) - 1; i >= 0; i-- {
		v = v<<8 | uint64(s[i])
	}
	return v
}

func mask(n int) uint64 { return 1<<(8*n) - 1 }

var (
	litStop, litShorter, litCancel = lit("stop"), lit("shorter"), lit("cancel")
	litBulletP, litOint            = lit("bullet p"), lit("oint")
	litMoreCon, litCise            = lit("more con"), lit("cise")
	litMoreDet, litAil             = lit("more det"), lit("ail")
	litActually, litAlso           = lit("actually"), lit("also")
)

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func isLetter(c byte) bool { c = lower(c); return 'a' <= c && c <= 'z' }

// wordEnd reports whether the phrase of length l at i ends a word.
func wordEnd(b []byte, i, l, n int) bool { return i+l >= n || !isLetter(b[i+l]) }

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

// StepBudgetConfig configures the step-budget guest: {"maxSteps": 5,
// "message": "..."}. MaxSteps must be at least 1.
type StepBudgetConfig struct {
	MaxSteps int
	Message  string
}

// DefaultBudgetMessage is the instruction added once the budget is spent.
const DefaultBudgetMessage = "The step budget is spent: do not call tools; give your final answer now."

// ParseStepBudgetConfig parses and checks a StepBudgetConfig.
func ParseStepBudgetConfig(b []byte) (StepBudgetConfig, error) {
	c := StepBudgetConfig{MaxSteps: 5}
	m, err := guest.ParseConfig(b, "maxSteps", "message")
	if err == nil {
		c.MaxSteps, err = m.Int("maxSteps", 5)
	}
	if err == nil {
		c.Message, err = m.String("message")
	}
	if err != nil {
		return c, err
	}
	if c.MaxSteps < 1 {
		return c, errors.New("config: maxSteps must be at least 1, got " + strconv.Itoa(c.MaxSteps))
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
	Instruction string
}

// ParseSystemInstructionConfig parses and checks a SystemInstructionConfig.
func ParseSystemInstructionConfig(b []byte) (SystemInstructionConfig, error) {
	var c SystemInstructionConfig
	m, err := guest.ParseConfig(b, "instruction")
	if err == nil {
		c.Instruction, err = m.String("instruction")
	}
	if err != nil {
		return c, err
	}
	if strings.TrimSpace(c.Instruction) == "" {
		return c, errors.New("config: instruction is required")
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

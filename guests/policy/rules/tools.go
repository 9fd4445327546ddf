package rules

import (
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/internal/jsonlite"
)

// ToolApprovalConfig configures the tool-approval guest:
//
//	{"rules": [{"match": "*delete*", "decision": "ask", "prompt": "..."},
//	           {"match": "payments_refund", "when": {"arg": "amount", "gt": 100},
//	            "decision": "ask", "approvals": 2},
//	           {"match": "shell_*", "decision": "deny", "message": "..."}],
//	 "default": "allow"}
//
// The first rule that matches a call decides; no rule: Default.
type ToolApprovalConfig struct {
	Rules   []ToolRule
	Default string // guestabi.ToolAllow, ToolDeny or ToolAsk
}

// ToolRule is one rule of a ToolApprovalConfig.
type ToolRule struct {
	// Match is a glob over the whole tool name: * any run of characters, ?
	// one character, [abc] or [a-z] (or [!a-z]) one of a class, \ escapes.
	Match string
	// When, if set, must also hold.
	When *ToolCondition
	// Decision is what the rule decides; Prompt (ask), Message (deny) and
	// Approvals (ask, 1 to guestabi.MaxApprovals) go with it.
	Decision  string
	Prompt    string
	Message   string
	Approvals int
}

// ToolCondition compares a top-level member of the call's arguments, which
// must be a number, with Value: Op is "gt", "gte", "lt", "lte" or "eq". It
// does not hold when the arguments are not a JSON object or the member is
// absent or not a number.
type ToolCondition struct {
	Arg   string
	Op    string
	Value float64
}

// MaxToolRules bounds the rules of a ToolApprovalConfig.
const MaxToolRules = 1000

// ParseToolApprovalConfig parses and checks a ToolApprovalConfig, strictly:
// an unknown member, a bad glob, a decision other than allow, deny or ask, a
// prompt without ask, a message without deny, approvals out of range all
// fail. An empty blob allows every call.
func ParseToolApprovalConfig(b []byte) (ToolApprovalConfig, error) {
	c := ToolApprovalConfig{Default: guestabi.ToolAllow}
	m, err := jsonlite.Object(b, "rules", "default")
	if err != nil {
		return c, errors.New("config: " + err.Error())
	}
	if d, err := jsonlite.String(m, "default"); err != nil {
		return c, errors.New("config: " + err.Error())
	} else if d != "" {
		if guestabi.ToolDecisionCode(d) == 0 {
			return c, errors.New("config: default " + strconv.Quote(d) + ": want allow, deny or ask")
		}
		c.Default = d
	}
	raw, ok := m["rules"].([]any)
	if m["rules"] != nil && !ok {
		return c, errors.New("config: rules must be an array")
	}
	if len(raw) > MaxToolRules {
		return c, errors.New("config: more than " + strconv.Itoa(MaxToolRules) + " rules")
	}
	for i, r := range raw {
		rule, err := parseToolRule(r)
		if err != nil {
			return c, errors.New("config: rule " + strconv.Itoa(i+1) + ": " + err.Error())
		}
		c.Rules = append(c.Rules, rule)
	}
	return c, nil
}

func parseToolRule(v any) (ToolRule, error) {
	var r ToolRule
	m, ok := v.(map[string]any)
	if !ok {
		return r, errors.New("want an object")
	}
	for k := range m {
		switch k {
		case "match", "when", "decision", "prompt", "message", "approvals":
		default:
			return r, errors.New("unknown member " + strconv.Quote(k))
		}
	}
	var err error
	if r.Match, err = jsonlite.String(m, "match"); err != nil {
		return r, err
	}
	if r.Match == "" {
		return r, errors.New("match is required")
	}
	if err := validGlob(r.Match); err != nil {
		return r, errors.New("match " + strconv.Quote(r.Match) + ": " + err.Error())
	}
	if r.Decision, err = jsonlite.String(m, "decision"); err != nil {
		return r, err
	}
	if guestabi.ToolDecisionCode(r.Decision) == 0 {
		return r, errors.New("decision " + strconv.Quote(r.Decision) + ": want allow, deny or ask")
	}
	if r.Prompt, err = jsonlite.String(m, "prompt"); err != nil {
		return r, err
	}
	if r.Message, err = jsonlite.String(m, "message"); err != nil {
		return r, err
	}
	if r.Approvals, err = jsonlite.Int(m, "approvals", 0); err != nil {
		return r, err
	}
	if m["approvals"] != nil && (r.Approvals < 1 || r.Approvals > guestabi.MaxApprovals) {
		return r, errors.New("approvals must be 1 to " + strconv.Itoa(guestabi.MaxApprovals))
	}
	d := r.decision()
	if err := guestabi.ValidToolDecision(d); err != nil {
		switch {
		case r.Prompt != "" && r.Decision != guestabi.ToolAsk:
			return r, errors.New("prompt goes with decision ask")
		case r.Message != "" && r.Decision != guestabi.ToolDeny:
			return r, errors.New("message goes with decision deny")
		case r.Approvals != 0 && r.Decision != guestabi.ToolAsk:
			return r, errors.New("approvals go with decision ask")
		}
		return r, errors.New("prompt and message are at most " + strconv.Itoa(guestabi.MaxToolText) + " bytes")
	}
	if m["when"] != nil {
		w, err := parseToolCondition(m["when"])
		if err != nil {
			return r, errors.New("when: " + err.Error())
		}
		r.When = &w
	}
	return r, nil
}

func parseToolCondition(v any) (ToolCondition, error) {
	var c ToolCondition
	m, ok := v.(map[string]any)
	if !ok {
		return c, errors.New("want an object")
	}
	for k, x := range m {
		switch k {
		case "arg":
			s, ok := x.(string)
			if !ok || s == "" {
				return c, errors.New("arg must be a non-empty string")
			}
			c.Arg = s
		case "gt", "gte", "lt", "lte", "eq":
			f, ok := x.(float64)
			if !ok {
				return c, errors.New(k + " must be a number")
			}
			if c.Op != "" {
				return c, errors.New("want exactly one of gt, gte, lt, lte, eq")
			}
			c.Op, c.Value = k, f
		default:
			return c, errors.New("unknown member " + strconv.Quote(k))
		}
	}
	if c.Arg == "" {
		return c, errors.New("arg is required")
	}
	if c.Op == "" {
		return c, errors.New("want one of gt, gte, lt, lte, eq")
	}
	return c, nil
}

func (r *ToolRule) decision() guestabi.ToolDecision {
	return guestabi.ToolDecision{Decision: r.Decision, Prompt: r.Prompt, Message: r.Message, Approvals: r.Approvals}
}

// ToolApproval decides a tool call by c's rules: the first whose glob
// matches the tool name and whose condition, if any, holds; else c.Default.
// The arguments are parsed only when a matching rule has a condition.
func ToolApproval(c ToolApprovalConfig, r *guestabi.ToolRequest) guestabi.ToolDecision {
	var args map[string]any
	parsed := false
	for i := range c.Rules {
		rule := &c.Rules[i]
		if !Glob(rule.Match, r.Tool) {
			continue
		}
		if rule.When != nil {
			if !parsed {
				parsed = true
				if v, err := jsonlite.Parse([]byte(r.Arguments)); err == nil {
					args, _ = v.(map[string]any)
				}
			}
			if !rule.When.holds(args) {
				continue
			}
		}
		return rule.decision()
	}
	return guestabi.ToolDecision{Decision: c.Default}
}

func (w *ToolCondition) holds(args map[string]any) bool {
	x, ok := args[w.Arg].(float64)
	if !ok {
		return false
	}
	switch w.Op {
	case "gt":
		return x > w.Value
	case "gte":
		return x >= w.Value
	case "lt":
		return x < w.Value
	case "lte":
		return x <= w.Value
	case "eq":
		return x == w.Value
	}
	return false
}

// Glob reports whether name matches pattern as a whole: * matches any run
// of characters (none included), ? one character, [abc], [a-z] or [!a-z]
// one character of (or not of) a class, and \ makes the next character
// literal. A malformed pattern (validGlob) matches nothing.
func Glob(pattern, name string) bool {
	// One backtracking point suffices: on a mismatch, the last * takes one
	// more character. O(len(pattern)·len(name)).
	p, n := 0, 0
	starP, starN := -1, 0
	for n < len(name) {
		if p < len(pattern) {
			switch pattern[p] {
			case '*':
				starP, starN = p, n
				p++
				continue
			case '?':
				_, size := utf8.DecodeRuneInString(name[n:])
				p++
				n += size
				continue
			case '[':
				r, size := utf8.DecodeRuneInString(name[n:])
				if end, ok := matchClass(pattern, p, r); end > 0 {
					if ok {
						p = end
						n += size
						continue
					}
				} else {
					return false
				}
			default:
				lit, plen := literal(pattern, p)
				if plen < 0 {
					return false
				}
				if len(name)-n >= len(lit) && name[n:n+len(lit)] == lit {
					p += plen
					n += len(lit)
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		// Let the last * take one more character.
		_, size := utf8.DecodeRuneInString(name[starN:])
		starN += size
		p, n = starP+1, starN
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// literal returns the character at pattern[p] (after a \, the escaped one)
// and how many pattern bytes it takes; -1 for a trailing \.
func literal(pattern string, p int) (string, int) {
	if pattern[p] == '\\' {
		if p+1 == len(pattern) {
			return "", -1
		}
		_, size := utf8.DecodeRuneInString(pattern[p+1:])
		return pattern[p+1 : p+1+size], 1 + size
	}
	_, size := utf8.DecodeRuneInString(pattern[p:])
	return pattern[p : p+size], size
}

// matchClass matches r against the class starting at pattern[p] ('['). It
// returns the index after the class (0 if the class is malformed) and
// whether r is in it.
func matchClass(pattern string, p int, r rune) (int, bool) {
	i := p + 1
	negate := false
	if i < len(pattern) && (pattern[i] == '!' || pattern[i] == '^') {
		negate = true
		i++
	}
	in := false
	first := true
	for {
		if i >= len(pattern) {
			return 0, false
		}
		if pattern[i] == ']' && !first {
			return i + 1, in != negate
		}
		first = false
		lo, size := classChar(pattern, i)
		if size < 0 {
			return 0, false
		}
		i += size
		hi := lo
		if i+1 < len(pattern) && pattern[i] == '-' && pattern[i+1] != ']' {
			hi, size = classChar(pattern, i+1)
			if size < 0 || hi < lo {
				return 0, false
			}
			i += 1 + size
		}
		if lo <= r && r <= hi {
			in = true
		}
	}
}

func classChar(pattern string, i int) (rune, int) {
	if pattern[i] == '\\' {
		if i+1 == len(pattern) {
			return 0, -1
		}
		r, size := utf8.DecodeRuneInString(pattern[i+1:])
		return r, 1 + size
	}
	r, size := utf8.DecodeRuneInString(pattern[i:])
	return r, size
}

// validGlob reports what is wrong with a glob: an unclosed or empty class,
// a reversed range, a trailing \.
func validGlob(pattern string) error {
	for p := 0; p < len(pattern); {
		switch pattern[p] {
		case '[':
			end, _ := matchClass(pattern, p, 0)
			if end == 0 {
				return errors.New("malformed character class")
			}
			p = end
		case '\\':
			if p+1 == len(pattern) {
				return errors.New("trailing backslash")
			}
			_, size := utf8.DecodeRuneInString(pattern[p+1:])
			p += 1 + size
		default:
			p++
		}
	}
	return nil
}

package guestabi

import (
	"encoding/binary"
	"errors"
)

// ToolRequestLayout is the layout version in byte 0 of a toolPolicy
// request.
const ToolRequestLayout = 1

// ToolHeaderSize is the length of the fixed header of a toolPolicy request.
const ToolHeaderSize = 8

// Tool decision names, as ToolDecision.Decision holds them.
const (
	ToolAllow = "allow"
	ToolDeny  = "deny"
	ToolAsk   = "ask"
)

// Tool decision codes in byte 1 of a toolPolicy result body.
const (
	CodeToolAllow byte = 1
	CodeToolDeny  byte = 2
	CodeToolAsk   byte = 3
)

// Limits of a toolPolicy decision (SPEC §14.2).
const (
	// ToolDecisionHeaderSize is the length of a decision body before its
	// text: status, decision, approvals, reserved.
	ToolDecisionHeaderSize = 4
	// MaxToolText bounds the text of a decision (a deny message, an ask
	// prompt): the host keeps at most this many bytes of it, made safe by
	// SafeText.
	MaxToolText = 4096
	// MaxApprovals bounds the approvals an ask decision may require.
	MaxApprovals = 16
)

// ToolDecisionCode returns the binary code of a tool decision name, 0 if
// unknown.
func ToolDecisionCode(name string) byte {
	switch name {
	case ToolAllow:
		return CodeToolAllow
	case ToolDeny:
		return CodeToolDeny
	case ToolAsk:
		return CodeToolAsk
	}
	return 0
}

// ToolDecisionName returns the name of a binary tool decision code, "" if
// unknown.
func ToolDecisionName(code byte) string {
	switch code {
	case CodeToolAllow:
		return ToolAllow
	case CodeToolDeny:
		return ToolDeny
	case CodeToolAsk:
		return ToolAsk
	}
	return ""
}

// ToolRequest is the toolPolicy request: one tool call the model asked for,
// before it runs.
type ToolRequest struct {
	// Step is the number of the model step that asked for the call, from 1.
	Step uint32
	// Tool is the name of the tool, as the model called it.
	Tool string
	// Server is the name of the MCP server that provides the tool; empty
	// for a tool of the host's own.
	Server string
	// Arguments are the call's arguments: JSON text as the model produced
	// it, not validated.
	Arguments string
	// CallID is the model's id of the call; IdempotencyKey the host's
	// stable key for it, the one the tool receives.
	CallID         string
	IdempotencyKey string
	RunID          string
	ThreadID       string
}

// ToolDecision is a toolPolicy decision.
type ToolDecision struct {
	// Decision is ToolAllow, ToolDeny or ToolAsk.
	Decision string
	// Message, with ToolDeny, is what the model sees as the tool's result.
	Message string
	// Prompt, with ToolAsk, is the question put to the person who
	// approves.
	Prompt string
	// Approvals, with ToolAsk, is the number of approvals the call needs:
	// 1 to MaxApprovals; 0 means 1.
	Approvals int
}

// AppendToolRequest appends the binary encoding of r to dst.
func AppendToolRequest(dst []byte, r *ToolRequest) []byte {
	dst = append(dst, ToolRequestLayout, 0, 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, r.Step)
	for _, s := range [...]string{r.Tool, r.Server, r.Arguments, r.CallID, r.IdempotencyKey, r.RunID, r.ThreadID} {
		dst = appendStr(dst, s)
	}
	return dst
}

// DecodeToolRequest decodes a binary toolPolicy request into r. Strings are
// copied out of b.
func DecodeToolRequest(b []byte, r *ToolRequest) error {
	if len(b) < ToolHeaderSize || b[0] != ToolRequestLayout || b[1] != 0 || b[2] != 0 || b[3] != 0 {
		return ErrMalformed
	}
	d := decoder{b: b, off: ToolHeaderSize}
	*r = ToolRequest{Step: binary.LittleEndian.Uint32(b[4:])}
	for _, s := range [...]*string{&r.Tool, &r.Server, &r.Arguments, &r.CallID, &r.IdempotencyKey, &r.RunID, &r.ThreadID} {
		*s = d.str()
	}
	if d.bad || d.off != len(b) {
		return ErrMalformed
	}
	return nil
}

// ToolFields are the strings of a toolPolicy request in their order: tool,
// server, arguments, call id, idempotency key, run id, thread id.
type ToolFields [7][]byte

// ReadToolRequest reads a toolPolicy request without copying: the fields
// alias b. It checks the whole request as DecodeToolRequest does and returns
// the step.
func ReadToolRequest(b []byte, f *ToolFields) (uint32, error) {
	if len(b) < ToolHeaderSize || b[0] != ToolRequestLayout || b[1] != 0 || b[2] != 0 || b[3] != 0 {
		return 0, ErrMalformed
	}
	off := ToolHeaderSize
	for i := range f {
		if len(b)-off < 4 {
			return 0, ErrMalformed
		}
		n := binary.LittleEndian.Uint32(b[off:])
		off += 4
		if uint64(len(b)-off) < uint64(n) {
			return 0, ErrMalformed
		}
		f[i] = b[off : off+int(n) : off+int(n)]
		off += int(n)
	}
	if off != len(b) {
		return 0, ErrMalformed
	}
	return binary.LittleEndian.Uint32(b[4:]), nil
}

// ReadToolName returns the tool name of a toolPolicy request without
// copying: it aliases b. It checks the header and the name, not the rest.
func ReadToolName(b []byte) ([]byte, error) {
	if len(b) < ToolHeaderSize+4 || b[0] != ToolRequestLayout {
		return nil, ErrMalformed
	}
	n := binary.LittleEndian.Uint32(b[ToolHeaderSize:])
	off := ToolHeaderSize + 4
	if uint64(len(b)-off) < uint64(n) {
		return nil, ErrMalformed
	}
	return b[off : off+int(n) : off+int(n)], nil
}

// AppendToolDecision appends the result body of an OK toolPolicy decision:
// status, decision code, approvals, a reserved zero byte, then the deny
// message or the ask prompt. It does not check d (ValidToolDecision does).
func AppendToolDecision(dst []byte, d ToolDecision) []byte {
	var approvals byte
	if d.Decision == ToolAsk && d.Approvals > 0 && d.Approvals <= 255 {
		approvals = byte(d.Approvals)
	}
	dst = append(dst, StatusOK, ToolDecisionCode(d.Decision), approvals, 0)
	switch d.Decision {
	case ToolDeny:
		dst = append(dst, d.Message...)
	case ToolAsk:
		dst = append(dst, d.Prompt...)
	}
	return dst
}

// ValidToolDecision reports what is wrong with d, if anything: an unknown
// decision, approvals out of range or given without ask, a text longer
// than MaxToolText or given with allow.
func ValidToolDecision(d ToolDecision) error {
	if ToolDecisionCode(d.Decision) == 0 {
		return errors.New("guestabi: unknown tool decision " + `"` + SafeText([]byte(d.Decision), 32) + `"`)
	}
	if d.Approvals < 0 || d.Approvals > MaxApprovals {
		return errors.New("guestabi: approvals out of range (0 to 16)")
	}
	if d.Approvals != 0 && d.Decision != ToolAsk {
		return errors.New("guestabi: approvals given without ask")
	}
	if d.Decision != ToolDeny && d.Message != "" || d.Decision != ToolAsk && d.Prompt != "" {
		return errors.New("guestabi: a message goes with deny, a prompt with ask")
	}
	if len(d.Message) > MaxToolText || len(d.Prompt) > MaxToolText {
		return errors.New("guestabi: decision text longer than 4096 bytes")
	}
	return nil
}

// DecodeToolDecision decodes a toolPolicy result body (including its status
// byte). The text is made safe by SafeText and cut to fit in MaxToolText
// bytes, with a note of its full length. Approvals are normalised: an ask decision
// needs at least 1.
func DecodeToolDecision(b []byte) (ToolDecision, error) {
	p, err := DecodeResult(b)
	if err != nil {
		return ToolDecision{}, err
	}
	if len(p) < ToolDecisionHeaderSize-1 {
		return ToolDecision{}, errors.New("guestabi: tool decision shorter than 4 bytes")
	}
	d := ToolDecision{Decision: ToolDecisionName(p[0]), Approvals: int(p[1])}
	text := p[3:]
	switch {
	case d.Decision == "":
		return ToolDecision{}, errors.New("guestabi: unknown decision code in tool decision")
	case p[2] != 0:
		return ToolDecision{}, errors.New("guestabi: reserved byte set in tool decision")
	case d.Approvals > MaxApprovals:
		return ToolDecision{}, errors.New("guestabi: tool decision asks for more than 16 approvals")
	case d.Approvals != 0 && d.Decision != ToolAsk:
		return ToolDecision{}, errors.New("guestabi: approvals set in a tool decision other than ask")
	case len(text) > 0 && d.Decision == ToolAllow:
		return ToolDecision{}, errors.New("guestabi: text after an allow decision")
	}
	switch d.Decision {
	case ToolDeny:
		d.Message = safeToolText(text)
	case ToolAsk:
		d.Prompt = safeToolText(text)
		d.Approvals = max(d.Approvals, 1)
	}
	return d, nil
}

// safeToolText is SafeText within MaxToolText bytes, the note of the full
// length included.
func safeToolText(b []byte) string {
	s := SafeText(b, MaxToolText)
	if len(s) > MaxToolText {
		s = SafeText(b, MaxToolText-32)
	}
	return s
}

package guestabi

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
)

// PolicyRequestLayout is the layout version in byte 0 of a policy request.
const PolicyRequestLayout = 1

// Flags in byte 1 of a policy request.
const FlagActive = 1 << 0

// Flags in byte 2 of a binary decision.
const FlagCoalescePending = 1 << 0

// DecisionSize is the length of an OK decision body.
const DecisionSize = 4

// PolicyRequest is the inputPolicy request: the input that arrived and the
// state of its busy thread.
type PolicyRequest struct {
	ThreadID string
	Content  string
	Hint     string
	// Metadata is encoded as pairs in ascending key order.
	Metadata map[string]string
	Active   *Run
	Queued   []Run
}

// Run is a run of the busy thread.
type Run struct {
	RunID string
	Seq   int64
	// Steps is the number of model steps the run has finished.
	Steps uint32
	// Inputs are the contents of the run's inputs, in order.
	Inputs []string
}

// Decision is an inputPolicy decision.
type Decision struct {
	Action          string
	CoalescePending bool
}

// ErrMalformed reports bytes that do not follow the layout.
var ErrMalformed = errors.New("guestabi: malformed message")

// PolicyHeaderSize is the length of the fixed header of a policy request.
const PolicyHeaderSize = 16

// AppendPolicyRequest appends the binary encoding of r to dst.
func AppendPolicyRequest(dst []byte, r *PolicyRequest) []byte {
	var flags byte
	var steps uint32
	if r.Active != nil {
		flags |= FlagActive
		steps = r.Active.Steps
	}
	dst = append(dst, PolicyRequestLayout, flags, 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, steps)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Queued)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Metadata)))
	dst = appendStr(dst, r.ThreadID)
	dst = appendStr(dst, r.Content)
	dst = appendStr(dst, r.Hint)
	if n := len(r.Metadata); n > 0 {
		// The pairs are taken in one pass over the map (no lookups) into
		// an array on the stack when they are few, and those few sorted
		// by insertion.
		var few [8]pair
		pairs := few[:0]
		if n > len(few) {
			pairs = make([]pair, 0, n)
		}
		for k, v := range r.Metadata {
			pairs = append(pairs, pair{k, v})
		}
		if len(pairs) <= len(few) {
			for i := 1; i < len(pairs); i++ {
				for j := i; j > 0 && pairs[j].k < pairs[j-1].k; j-- {
					pairs[j], pairs[j-1] = pairs[j-1], pairs[j]
				}
			}
		} else {
			slices.SortFunc(pairs, func(a, b pair) int { return strings.Compare(a.k, b.k) })
		}
		for _, p := range pairs {
			dst = appendStr(dst, p.k)
			dst = appendStr(dst, p.v)
		}
	}
	if r.Active != nil {
		dst = appendRun(dst, r.Active)
	}
	for i := range r.Queued {
		dst = appendRun(dst, &r.Queued[i])
	}
	return dst
}

type pair struct{ k, v string }

func appendStr(dst []byte, s string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

func appendRun(dst []byte, r *Run) []byte {
	dst = appendStr(dst, r.RunID)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.Seq))
	dst = binary.LittleEndian.AppendUint32(dst, r.Steps)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Inputs)))
	for _, in := range r.Inputs {
		dst = appendStr(dst, in)
	}
	return dst
}

// DecodePolicyRequest decodes a binary policy request into r, replacing its
// contents. Strings are copied out of b.
func DecodePolicyRequest(b []byte, r *PolicyRequest) error {
	if len(b) < PolicyHeaderSize || b[0] != PolicyRequestLayout || b[1]&^FlagActive != 0 || b[2] != 0 || b[3] != 0 {
		return ErrMalformed
	}
	flags := b[1]
	steps := binary.LittleEndian.Uint32(b[4:])
	q := binary.LittleEndian.Uint32(b[8:])
	n := binary.LittleEndian.Uint32(b[12:])
	if flags&FlagActive == 0 && steps != 0 {
		return ErrMalformed
	}
	// Every pair takes at least 8 bytes, every run 20: refuse counts the
	// bytes cannot hold before allocating for them.
	if uint64(n)*8+uint64(q)*20 > uint64(len(b)) {
		return ErrMalformed
	}
	d := decoder{b: b, off: PolicyHeaderSize}
	r.ThreadID = d.str()
	r.Content = d.str()
	r.Hint = d.str()
	r.Metadata = nil
	if n > 0 {
		r.Metadata = make(map[string]string, n)
		prev := ""
		for i := range n {
			k := d.str()
			if i > 0 && k <= prev {
				return ErrMalformed // keys must be strictly ascending
			}
			prev = k
			r.Metadata[k] = d.str()
		}
	}
	r.Active = nil
	if flags&FlagActive != 0 {
		r.Active = new(Run)
		d.run(r.Active)
		if r.Active.Steps != steps {
			return ErrMalformed
		}
	}
	r.Queued = r.Queued[:0]
	for range q {
		var run Run
		d.run(&run)
		r.Queued = append(r.Queued, run)
	}
	if d.bad || d.off != len(b) {
		return ErrMalformed
	}
	return nil
}

// PolicyHeader is the fixed part of a policy request and the three strings
// that follow it, read without copying: the strings alias the request bytes.
type PolicyHeader struct {
	Active      bool
	ActiveSteps uint32
	Queued      uint32
	Metadata    uint32
	ThreadID    []byte
	Content     []byte
	Hint        []byte
}

// ReadPolicyHeader reads the header of a policy request without copying or
// allocating. It checks what it reads, not the rest of the request.
func ReadPolicyHeader(b []byte, h *PolicyHeader) error {
	if len(b) < PolicyHeaderSize || b[0] != PolicyRequestLayout {
		return ErrMalformed
	}
	// Straight-line code: in a guest, every loop iteration and call can cost
	// an interruption check in the host.
	rest := b[PolicyHeaderSize:]
	thread, rest, ok1 := cutStr(rest)
	content, rest, ok2 := cutStr(rest)
	hint, _, ok3 := cutStr(rest)
	if !ok1 || !ok2 || !ok3 {
		return ErrMalformed
	}
	h.Active = b[1]&FlagActive != 0
	h.ActiveSteps = binary.LittleEndian.Uint32(b[4:])
	h.Queued = binary.LittleEndian.Uint32(b[8:])
	h.Metadata = binary.LittleEndian.Uint32(b[12:])
	h.ThreadID, h.Content, h.Hint = thread, content, hint
	return nil
}

// cutStr splits a length-prefixed string off b; ok is false if it does not
// fit (and then rest is empty, so the next cut fails too).
func cutStr(b []byte) (s, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, nil, false
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	if uint64(len(b)-4) < n {
		return nil, nil, false
	}
	return b[4 : 4+n : 4+n], b[4+n:], true
}

type decoder struct {
	b   []byte
	off int
	bad bool
}

func (d *decoder) u32() uint32 {
	if d.bad || len(d.b)-d.off < 4 {
		d.bad = true
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v
}

func (d *decoder) u64() uint64 {
	if d.bad || len(d.b)-d.off < 8 {
		d.bad = true
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

func (d *decoder) str() string {
	n := d.u32()
	if d.bad || uint64(len(d.b)-d.off) < uint64(n) {
		d.bad = true
		return ""
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s
}

func (d *decoder) run(r *Run) {
	r.RunID = d.str()
	r.Seq = int64(d.u64())
	r.Steps = d.u32()
	n := d.u32()
	if uint64(n)*4 > uint64(len(d.b)) {
		d.bad = true
		return
	}
	r.Inputs = nil
	for range n {
		r.Inputs = append(r.Inputs, d.str())
	}
}

// AppendDecision appends the result body of an OK decision: status, action
// code, flags, a reserved zero byte.
func AppendDecision(dst []byte, d Decision) []byte {
	var flags byte
	if d.CoalescePending {
		flags |= FlagCoalescePending
	}
	return append(dst, StatusOK, ActionCode(d.Action), flags, 0)
}

// AppendError appends an error result body: StatusError and the message.
func AppendError(dst []byte, msg string) []byte {
	dst = append(dst, StatusError)
	return append(dst, msg...)
}

// GuestError is an error a guest reported with StatusError. Message is the
// guest's text made safe by SafeText, at most MaxErrorMessage bytes of it.
type GuestError struct{ Message string }

func (e *GuestError) Error() string { return "guest error: " + e.Message }

// DecodeResult splits a result body into its status and payload. A
// StatusError body is returned as a *GuestError.
func DecodeResult(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, errors.New("guestabi: empty result")
	}
	switch b[0] {
	case StatusOK:
		return b[1:], nil
	case StatusError:
		return nil, &GuestError{Message: SafeText(b[1:], MaxErrorMessage)}
	}
	return nil, errors.New("guestabi: unknown result status")
}

// DecodeDecision decodes a decision result body (including its status byte).
func DecodeDecision(b []byte) (Decision, error) {
	p, err := DecodeResult(b)
	if err != nil {
		return Decision{}, err
	}
	if len(p) != DecisionSize-1 {
		return Decision{}, errors.New("guestabi: decision must be 4 bytes")
	}
	name := ActionName(p[0])
	if name == "" {
		return Decision{}, errors.New("guestabi: unknown action code in decision")
	}
	if p[1]&^FlagCoalescePending != 0 || p[2] != 0 {
		return Decision{}, errors.New("guestabi: reserved bits set in decision")
	}
	return Decision{Action: name, CoalescePending: p[1]&FlagCoalescePending != 0}, nil
}

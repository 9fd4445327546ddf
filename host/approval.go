package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
)

// Runs that wait for a person (tool-call approval; docs/design.md#waiting
// runs, ADR 0136).
//
// When the tool policy says ask for a call, the executor commits the
// call's StepAsk record and the run's Pending list in one versioned commit
// (runstate.Wait) and returns: the run stays active, its thread busy, but
// nothing executes it. An answer (Runtime.Answer, from any host) is a
// versioned commit too (runstate.Answer); the one that empties Pending
// wakes the thread's owner, which executes the run again from its steps.

// DefaultApprovalTimeout is how long a call waits for an answer when
// Config.ApprovalTimeout is not set.
const DefaultApprovalTimeout = 24 * time.Hour

// The errors of Answer, besides ErrNotFound and ErrInvalid.
var (
	// ErrNotWaiting: the run is not waiting for an answer to the call (it
	// ended, or it is past the call).
	ErrNotWaiting = runstate.ErrNotWaiting
	// ErrAnswered: the call was answered otherwise already, or the key was
	// used for another answer. The error is an *AnsweredError.
	ErrAnswered = runstate.ErrAnswered
	// ErrCallNotFound: the run never asked about the call. It is also
	// ErrNotFound.
	ErrCallNotFound = runstate.ErrCallNotFound
)

// AnsweredError is the error of an answer refused with ErrAnswered; it
// holds the recorded answer.
type AnsweredError = runstate.AnsweredError

// Approval is a person's answer to a tool call a run waits on.
type Approval struct {
	// Action is approve (run the call as asked), edit (run it with
	// Arguments), reject (do not run it; the model sees Message as its
	// result) or respond (do not run it; Message is the person's answer in
	// the tool's place).
	Action record.AnswerAction
	// Arguments, with edit only, is the JSON object the call runs with.
	Arguments string
	// Message, with reject (optional: a text of the host's by default) or
	// respond (required), is the tool result the model sees.
	Message string
	// Key is the answer's idempotency key: the same answer with the same
	// key again returns the recorded one. Without a key an answer repeated
	// is recognized only once it has decided the call, so a call that
	// needs several approvals counts each keyless approve.
	Key string
}

// DefaultRejectMessage is what the model sees of a call rejected without a
// message.
const DefaultRejectMessage = "The call was not run: a person rejected it."

// MaxApprovalText bounds an answer's message and arguments.
const MaxApprovalText = 1 << 20

// answerRecord checks a and turns it into the answer to record.
func (a Approval) answerRecord(callID string) (record.Answer, error) {
	out := record.Answer{CallID: callID, Action: a.Action, Key: a.Key}
	if err := validID("call id", callID); err != nil {
		return out, err
	}
	if len(a.Key) > MaxKeyLen {
		return out, fmt.Errorf("%w: idempotency key longer than %d bytes", ErrInvalid, MaxKeyLen)
	}
	if len(a.Arguments) > MaxApprovalText || len(a.Message) > MaxApprovalText {
		return out, fmt.Errorf("%w: arguments or message longer than %d bytes", ErrInvalid, MaxApprovalText)
	}
	switch a.Action {
	case record.AnswerApprove:
		if a.Arguments != "" || a.Message != "" {
			return out, fmt.Errorf("%w: approve takes no arguments and no message (edit changes the arguments, reject and respond take a message)", ErrInvalid)
		}
	case record.AnswerEdit:
		if a.Message != "" {
			return out, fmt.Errorf("%w: edit takes arguments, not a message", ErrInvalid)
		}
		args, err := canonicalObject(a.Arguments)
		if err != nil {
			return out, err
		}
		out.Arguments = args
	case record.AnswerReject:
		if a.Arguments != "" {
			return out, fmt.Errorf("%w: reject takes a message, not arguments", ErrInvalid)
		}
		out.Text = a.Message
		if strings.TrimSpace(out.Text) == "" {
			out.Text = DefaultRejectMessage
		}
	case record.AnswerRespond:
		if a.Arguments != "" {
			return out, fmt.Errorf("%w: respond takes a message, not arguments", ErrInvalid)
		}
		if strings.TrimSpace(a.Message) == "" {
			return out, fmt.Errorf("%w: respond needs a message: the answer the model sees in the tool's place", ErrInvalid)
		}
		out.Text = a.Message
	default:
		return out, fmt.Errorf("%w: unknown action %q: want approve, edit, reject or respond", ErrInvalid, a.Action)
	}
	return out, nil
}

// canonicalObject checks that s is one JSON object and returns it in
// canonical form (compact, object keys sorted, numbers as written), so
// that the same edit sent twice compares equal whatever its spacing and
// key order.
//
// Input the canonical form would silently change is refused instead: a
// key repeated in one object (a decoder keeps the last, so the tool would
// run with a value the person may not have meant), text that is not
// valid UTF-8 and an escaped UTF-16 surrogate without its pair (a decoder
// replaces either with U+FFFD).
func canonicalObject(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%w: edit's arguments are not valid UTF-8", ErrInvalid)
	}
	if loneSurrogate(s) {
		return "", fmt.Errorf("%w: edit's arguments hold an escaped UTF-16 surrogate without its pair", ErrInvalid)
	}
	if err := uniqueKeys(s); err != nil {
		return "", err
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber() // numbers as written: no float rounding
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("%w: edit's arguments must be a JSON object: %v", ErrInvalid, err)
	}
	if _, ok := v.(map[string]any); !ok {
		return "", fmt.Errorf("%w: edit's arguments must be a JSON object, not %s", ErrInvalid, jsonKind(v))
	}
	if dec.More() {
		return "", fmt.Errorf("%w: edit's arguments hold more than one JSON value", ErrInvalid)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // maps encode with their keys sorted
		return "", fmt.Errorf("%w: edit's arguments: %v", ErrInvalid, err)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// loneSurrogate reports whether a string of the JSON text s holds a \u
// escape of a UTF-16 surrogate that is not the high half followed by the
// low half of a pair. Syntax errors are left to the decoder.
func loneSurrogate(s string) bool {
	inString := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\' && (i+1 >= len(s) || s[i+1] != 'u'):
			i++ // a one-character escape, \\ among them
		case c == '\\':
			r, ok := hex4(s[i+2:])
			if !ok {
				return false
			}
			i += 5 // the escape's last digit
			switch {
			case r >= 0xdc00 && r < 0xe000:
				return true // a low half first
			case r >= 0xd800 && r < 0xdc00:
				if i+6 >= len(s) || s[i+1] != '\\' || s[i+2] != 'u' {
					return true
				}
				if lo, ok := hex4(s[i+3:]); !ok || lo < 0xdc00 || lo >= 0xe000 {
					return true
				}
				i += 6
			}
		}
	}
	return false
}

// hex4 parses the four hex digits s begins with.
func hex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[:4]) {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// uniqueKeys walks the JSON text s token by token and refuses an object
// that names a key twice, at any depth. Syntax errors are left to the
// decoder that follows, which reports them in full.
func uniqueKeys(s string) error {
	type frame struct {
		keys      map[string]bool // nil for an array
		expectKey bool
	}
	var stack []frame
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // end of input, or a syntax error the decoder reports
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].keys != nil {
			if stack[top].expectKey {
				if key, ok := tok.(string); ok {
					if stack[top].keys[key] {
						return fmt.Errorf("%w: edit's arguments name the key %q twice in one object", ErrInvalid, key)
					}
					stack[top].keys[key] = true
					stack[top].expectKey = false
					continue
				}
			} else {
				stack[top].expectKey = true // this token is the key's value
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{keys: map[string]bool{}, expectKey: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "an object"
}

func validID(what, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalid, what, MaxIDLen)
	}
	return nil
}

// Answered is the outcome of Answer.
type Answered struct {
	// Run is the run as it is after the answer.
	Run record.Run
	// Step is the answer's step record (Kind record.StepAnswer; the answer
	// in Step.Answer, its time Step.CreatedAt); for a repeated answer, the
	// one recorded first.
	Step record.Step
	// Duplicate: the answer was given before (the same key, or the answer
	// that decided the call); nothing new was recorded.
	Duplicate bool
	// Decided: this answer decided the call (it leaves the pending calls);
	// an approve of a call that needs more approvals does not.
	Decided bool
	// Resumed: no call of the run is pending any more; its thread's owner
	// executes it again.
	Resumed bool
}

// Answer answers the pending tool call callID of run runID, which waits
// for it: the answer is committed (a StepAnswer record; any host of a
// shared store may commit it), and once no call of the run is pending any
// more, the host that owns the run's thread executes the run again from
// its steps.
//
// Errors: ErrNotFound (no such run, or the run never asked about callID:
// then also ErrCallNotFound), ErrNotWaiting (the run ended, or does not
// wait for that call), ErrAnswered (an *AnsweredError: the call was
// answered otherwise, or Key was used for another answer), ErrInvalid (a
// malformed approval), ErrNotSupported (a store that keeps no steps).
func (rt *Runtime) Answer(ctx context.Context, runID, callID string, a Approval) (Answered, error) {
	if err := validID("run id", runID); err != nil {
		return Answered{}, err
	}
	ans, err := a.answerRecord(callID)
	if err != nil {
		return Answered{}, err
	}
	return rt.answer(ctx, runID, ans)
}

func (rt *Runtime) answer(ctx context.Context, runID string, ans record.Answer) (Answered, error) {
	run, res, err := rt.st.Answer(ctx, runID, ans)
	switch {
	case errors.Is(err, store.ErrOutcomeUnknown):
		// The answer may have landed, and decided the last pending call:
		// then the run must be executed again, though this answer fails.
		if r, gerr := rt.st.GetRun(ctx, runID); gerr == nil && resumable(r) {
			rt.resumeWaiting(r)
		}
		return Answered{}, speak(err)
	case errors.Is(err, store.ErrNoSteps):
		return Answered{}, fmt.Errorf("%w: %v: runs never wait for approval", ErrNotSupported, err)
	case errors.Is(err, runstate.ErrCallNotFound):
		return Answered{}, &kindError{kind: ErrNotFound, err: err}
	case err != nil:
		return Answered{}, speak(err)
	}
	out := Answered{Run: run, Step: res.Step, Duplicate: res.Duplicate, Decided: res.Decided, Resumed: res.Resume}
	if res.Duplicate {
		// The first commit of this answer may have decided the last
		// pending call with its reply lost, so that nothing executes the
		// run: have it executed (a kick or notice is idempotent).
		if resumable(run) {
			rt.resumeWaiting(run)
		}
		return out, nil
	}
	rt.stats.answers.add(string(ans.Action))
	rt.emit(run.ID, run.ThreadID, EventApproval, map[string]string{"call_id": ans.CallID, "action": string(ans.Action), "decided": fmt.Sprint(res.Decided)})
	if res.Resume {
		rt.resumeWaiting(run)
	}
	return out, nil
}

// resumable reports whether run is active with no call pending: it is to
// be executed, by its owner.
func resumable(run record.Run) bool {
	return run.State == record.StateActive && len(run.Pending) == 0
}

// resumeWaiting has the run, whose last pending call was just answered,
// executed again: by this host if it owns the run (or the run's owner is
// gone: the poll recovers it), else by a notice to its owner.
func (rt *Runtime) resumeWaiting(run record.Run) {
	rt.waits.disarm(run.ID)
	if run.State != record.StateActive {
		rt.coord.kick(run.ThreadID)
		return
	}
	self := rt.lease.epoch.Load()
	switch o := leaseEpoch(run.Owner); {
	case o != 0 && o != self && rt.lease.isLive(o):
		rt.notify(driver.Notice{ThreadID: run.ThreadID, Owner: o})
	case run.Owner == rt.lease.owner():
		rt.coord.kick(run.ThreadID)
	default:
		rt.pollNow() // its owner is gone: recovery executes it
	}
}

// PendingApproval is a tool call a run waits on.
type PendingApproval struct {
	CallID string
	// Tool, Server and Arguments are the call as the model asked for it.
	Tool      string
	Server    string
	Arguments string
	// Prompt is the tool policy's text for the person.
	Prompt string
	// Approvals is how many approve answers the call needs; Approved how
	// many it has.
	Approvals int
	Approved  int
	// Step is the model step (from 0) that asked for the call.
	Step     int
	Deadline time.Time
}

// Waiting reports whether run waits for answers to tool calls: it is
// active with calls pending. (Its store state is active.)
func Waiting(run record.Run) bool {
	return run.State == record.StateActive && len(run.Pending) > 0
}

// PendingApprovals returns the tool calls run runID waits on, in the order
// asked; none when it is not waiting.
func (rt *Runtime) PendingApprovals(ctx context.Context, runID string) ([]PendingApproval, record.Run, error) {
	run, err := rt.st.GetRun(ctx, runID)
	if err != nil {
		return nil, record.Run{}, speak(err)
	}
	if len(run.Pending) == 0 || IsTerminal(run.State) {
		return nil, run, nil
	}
	steps, err := rt.st.ReadSteps(ctx, runID, 0, 0)
	if err != nil {
		return nil, run, speak(err)
	}
	return pendingOf(run, steps), run, nil
}

// pendingOf lists the pending calls of run from its steps.
func pendingOf(run record.Run, steps []record.Step) []PendingApproval {
	asks := map[string]record.Step{}
	approved := map[string]int{}
	for _, st := range steps {
		switch st.Kind {
		case record.StepAsk:
			// A call id used again in a later model step is asked anew.
			asks[st.Ask.CallID] = st
			approved[st.Ask.CallID] = 0
		case record.StepAnswer:
			if st.Answer.Action == record.AnswerApprove {
				approved[st.Answer.CallID]++
			}
		}
	}
	var out []PendingApproval
	for _, id := range run.Pending {
		st, ok := asks[id]
		if !ok {
			continue
		}
		a := st.Ask
		out = append(out, PendingApproval{CallID: id, Tool: a.Tool, Server: a.Server, Arguments: a.Arguments, Prompt: a.Prompt,
			Approvals: a.Approvals, Approved: approved[id], Step: st.Model, Deadline: a.Deadline})
	}
	return out
}

// waitTimers holds a timer per waiting run this host owns: at the earliest
// deadline of its pending calls it rejects those past theirs.
type waitTimers struct {
	mu     sync.Mutex
	timers map[string]*time.Timer
	delays map[string]time.Duration // runs whose last pass failed: the next retry's delay
	// waiting: runs of this host that waited, run id → thread id, for the
	// poll of a host sharing its store (kickStranded).
	waiting map[string]string
	closed  bool
}

// track records that run runID of threadID, a run this host owns, waits:
// the poll looks at it until it is executed again (kickStranded).
func (w *waitTimers) track(runID, threadID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if w.waiting == nil {
		w.waiting = map[string]string{}
	}
	w.waiting[runID] = threadID
}

// tracked returns the runs track recorded, run id → thread id.
func (w *waitTimers) tracked() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.waiting)
}

func (w *waitTimers) untrack(runID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waiting, runID)
}

// kickStranded executes again the runs of this host that waited and whose
// last call was answered, but that no worker executes: the notice that
// should have brought them back was lost (it is sent once, and not
// acknowledged). A run that still waits stays tracked; one that ended, or
// that another host owns now, is forgotten. It settles the interrupts this
// host remembers too (sweepInterrupts).
func (rt *Runtime) kickStranded(ctx context.Context) {
	rt.sweepInterrupts(ctx)
	for runID, threadID := range rt.waits.tracked() {
		if rt.coord.executing(threadID) != nil {
			continue // a worker has the thread: it executes the run, or will look again
		}
		run, err := rt.st.GetRun(ctx, runID)
		switch {
		case errors.Is(err, driver.ErrNotFound):
			rt.waits.untrack(runID)
			continue
		case err != nil:
			continue // the next poll looks again
		case run.State != record.StateActive || run.Owner != rt.lease.owner():
			rt.waits.untrack(runID)
		case len(run.Pending) == 0:
			rt.waits.untrack(runID)
			rt.log.Info("a run whose calls were answered was not executed again; executing it", "run", runID)
			rt.coord.kick(threadID)
		}
	}
}

// passOnInterrupt forgets the interrupt remembered for the thread's run
// runID, which lease o owns, and tells o to stop it when o is another live
// host (as of the poll's last refresh). An interrupt of a run whose owner
// is dead stays: this host may recover the run, and if another does, a
// later pass finds it live.
func (rt *Runtime) passOnInterrupt(thread, runID string, o int64) {
	if o == 0 || o == rt.lease.epoch.Load() || !rt.lease.isLive(o) {
		return
	}
	if rt.coord.takeStopWaiting(thread, runID) {
		rt.notify(driver.Notice{ThreadID: thread, Owner: o, InterruptRunID: runID})
	}
}

// sweepInterrupts settles the interrupts this host remembers for runs it
// does not execute (coordinator.stopWaiting): one of a run that ended is
// forgotten, one of a run another live host took is passed on to it, one
// of a run this host owns has its thread kicked (a worker stops the run).
func (rt *Runtime) sweepInterrupts(ctx context.Context) {
	for thread, runID := range rt.coord.stopsWaiting() {
		if rt.coord.executing(thread) != nil {
			continue // its worker takes it as it ends
		}
		run, err := rt.st.GetRun(ctx, runID)
		switch {
		case errors.Is(err, driver.ErrNotFound):
			rt.coord.takeStopWaiting(thread, runID)
		case err != nil:
			// the next poll looks again
		case run.State != record.StateActive && run.State != record.StateQueued:
			rt.coord.takeStopWaiting(thread, runID)
		case run.State == record.StateActive && run.Owner == rt.lease.owner():
			rt.coord.kick(thread)
		case run.State == record.StateActive:
			rt.passOnInterrupt(thread, runID, leaseEpoch(run.Owner))
		}
	}
}

// backoff returns the delay before run runID's next retry after a failed
// pass, and doubles the one after it (5 s up to a minute).
func (w *waitTimers) backoff(runID string) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.delays == nil {
		w.delays = map[string]time.Duration{}
	}
	d := max(w.delays[runID], 5*time.Second)
	w.delays[runID] = min(2*d, time.Minute)
	return d
}

// retried forgets run runID's retry delay: a pass succeeded.
func (w *waitTimers) retried(runID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.delays, runID)
}

func (w *waitTimers) arm(runID string, d time.Duration, f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if w.timers == nil {
		w.timers = map[string]*time.Timer{}
	}
	if t := w.timers[runID]; t != nil {
		t.Stop()
	}
	w.timers[runID] = time.AfterFunc(max(d, 0), f)
}

func (w *waitTimers) disarm(runID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t := w.timers[runID]; t != nil {
		t.Stop()
		delete(w.timers, runID)
	}
	delete(w.delays, runID)
}

func (w *waitTimers) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	w.waiting = nil
	for id, t := range w.timers {
		t.Stop()
		delete(w.timers, id)
	}
}

// timeoutKey is the idempotency key of the answer the time limit gives.
const timeoutKey = "agenthost:approval-timeout"

// armWaiting arms the deadline timer of run, a waiting run this host owns,
// from its steps (steps nil: read them).
func (rt *Runtime) armWaiting(ctx context.Context, run record.Run, steps []record.Step) {
	if !Waiting(run) {
		return
	}
	if !rt.lease.alone() {
		rt.waits.track(run.ID, run.ThreadID)
	}
	if steps == nil {
		var err error
		if steps, err = rt.st.ReadSteps(ctx, run.ID, 0, 0); err != nil {
			// Its deadline is found again shortly: expireWaiting reads the
			// run and its steps, and arms the timer again.
			rt.log.Warn("reading a waiting run's steps failed; trying again shortly", "run", run.ID, "err", err)
			rt.retryExpire(run.ID)
			return
		}
	}
	var first time.Time
	for _, p := range pendingOf(run, steps) {
		if first.IsZero() || p.Deadline.Before(first) {
			first = p.Deadline
		}
	}
	if first.IsZero() {
		return
	}
	id := run.ID
	rt.waits.arm(id, first.Sub(rt.cfg.Now()), func() { rt.expireWaiting(id) })
}

// expireWaiting rejects the pending calls of run runID past their deadline,
// then arms the timer for the rest. A store error arms it again after a
// growing delay (retryExpire): the time limit is never lost while this host
// runs.
func (rt *Runtime) expireWaiting(runID string) {
	ctx, cancel := context.WithTimeout(rt.baseCtx, time.Minute)
	defer cancel()
	pend, run, err := rt.PendingApprovals(ctx, runID)
	if err != nil {
		if rt.baseCtx.Err() == nil {
			rt.log.Warn("approval time limit: reading the run failed; trying again shortly", "run", runID, "err", err)
			rt.retryExpire(runID)
		}
		return
	}
	if !Waiting(run) || run.Owner != rt.lease.owner() {
		rt.waits.disarm(runID)
		if run.State == record.StateActive && run.Owner == rt.lease.owner() && rt.coord.executing(run.ThreadID) == nil {
			// Its last answer was committed, but the kick or notice that
			// executes it again was lost: it is stranded.
			rt.coord.kick(run.ThreadID)
		}
		return
	}
	now := rt.cfg.Now()
	for _, p := range pend {
		if p.Deadline.After(now) {
			continue
		}
		ans := record.Answer{CallID: p.CallID, Action: record.AnswerReject, Key: timeoutKey,
			Text: fmt.Sprintf("The call was not run: no answer within %s.", rt.cfg.ApprovalTimeout)}
		_, err := rt.answer(ctx, runID, ans)
		switch {
		case err == nil:
			rt.stats.approvalTimeouts.Add(1)
			rt.log.Info("tool call rejected: no answer within the time limit", "run", runID, "call", p.CallID, "limit", rt.cfg.ApprovalTimeout)
		case errors.Is(err, ErrAnswered) || errors.Is(err, ErrNotWaiting):
			// Answered in the meantime, or the run ended: nothing to reject.
		default:
			if rt.baseCtx.Err() == nil {
				rt.log.Warn("approval time limit: rejecting the call failed; trying again shortly", "run", runID, "call", p.CallID, "err", err)
				rt.retryExpire(runID)
			}
			return
		}
	}
	run, err = rt.st.GetRun(ctx, runID)
	switch {
	case err != nil:
		if rt.baseCtx.Err() == nil {
			rt.log.Warn("approval time limit: reading the run failed; trying again shortly", "run", runID, "err", err)
			rt.retryExpire(runID)
		}
	case Waiting(run):
		rt.waits.retried(runID)
		rt.armWaiting(ctx, run, nil)
	default:
		rt.waits.retried(runID)
	}
}

// retryExpire arms run runID's timer again after a store error: 5 s, then
// twice as long each time, up to a minute, until a pass succeeds.
func (rt *Runtime) retryExpire(runID string) {
	rt.waits.arm(runID, rt.waits.backoff(runID), func() { rt.expireWaiting(runID) })
}

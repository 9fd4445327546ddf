// Package record defines the durable records of agenthost: threads, runs,
// messages and idempotency records.
//
// These are plain data. They are what the host hands a store driver to keep
// and what a driver hands back; the rules that produce them live in the host's
// run-state reducer (package host/runstate), not here. A driver stores and
// indexes the fields it is told to (ids, thread, state, seq) and never needs
// to interpret them.
package record

import "time"

// RunState is the state of a run. The set is closed: a driver indexes runs by
// this value, and the host's enumerations (active, recoverable, terminal) are
// defined over exactly these six values.
type RunState string

// The run states.
const (
	StateQueued      RunState = "queued"      // admitted, waiting behind the thread's active run
	StateActive      RunState = "active"      // being executed by the host that owns it
	StateCompleted   RunState = "completed"   // answered
	StateFailed      RunState = "failed"      // ended with an error, no answer
	StateInterrupted RunState = "interrupted" // stopped on request, no answer
	StateSuperseded  RunState = "superseded"  // answered by another run (see TerminalReason)
)

// RunStates lists every run state, in a stable order.
var RunStates = []RunState{StateQueued, StateActive, StateCompleted, StateFailed, StateInterrupted, StateSuperseded}

// Valid reports whether s is one of the known run states.
func (s RunState) Valid() bool {
	switch s {
	case StateQueued, StateActive, StateCompleted, StateFailed, StateInterrupted, StateSuperseded:
		return true
	}
	return false
}

// TerminalReason says why a run became terminal. It is empty while the run is
// queued or active.
type TerminalReason string

// The terminal reasons.
const (
	ReasonCompleted   TerminalReason = "completed"   // state completed: the run answered its inputs
	ReasonFailed      TerminalReason = "failed"      // state failed: model, tool or recovery failure
	ReasonInterrupted TerminalReason = "interrupted" // state interrupted: a newer input asked it to stop
	ReasonCanceled    TerminalReason = "canceled"    // state interrupted: an operator canceled it while queued
	ReasonAbsorbed    TerminalReason = "absorbed"    // state superseded: its inputs were answered by AbsorbedIntoRunID
)

// Thread is a thread's header: the record whose Version every commit on the
// thread is conditional on.
type Thread struct {
	ID string
	// Version counts the commits on the thread. A thread that has never been
	// written has version 0; each commit sets it to the expected version + 1.
	Version int64
	// NextRunSeq is the seq the next admitted run gets.
	NextRunSeq int64
	// NextMessageSeq is the position the next appended message gets.
	NextMessageSeq int64
	// OpenRunIDs lists the thread's runs that are not terminal (queued or
	// active), in seq order. A driver returns these runs with the thread.
	OpenRunIDs []string
	// LastCommitID is the id of the batch that wrote this version, so a host
	// whose commit reply was lost can tell by reading whether it was applied.
	LastCommitID string
	// Owner is the lease epoch of the host that executes the thread's runs
	// when several hosts share the store (0: none). Only fenced commits
	// change it; see the driver package's Leaser.
	Owner     int64
	UpdatedAt time.Time
}

// Run is one attempt to answer one or more inputs of a thread.
type Run struct {
	ID       string
	ThreadID string
	// Seq orders the runs of a thread; runs start, and answer, in seq order.
	Seq   int64
	State RunState
	// TerminalReason is set when the run becomes terminal.
	TerminalReason TerminalReason
	// InputMessageIDs are the user messages this run answers: those admitted
	// with it, then those coalesced into it, then those it absorbed.
	InputMessageIDs []string
	// AssistantMessageID is reserved at admission. Only a completed run writes
	// a message with this id; for any other run it stays unused.
	AssistantMessageID string
	// AnswerSeq is the history position of the run's answer (the message
	// AssistantMessageID), 0 while it has none.
	AnswerSeq int64
	// AbsorbedIntoRunID points at the completed run that answered this run's
	// inputs; set only with TerminalReason absorbed.
	AbsorbedIntoRunID string
	// TakenBy names the active run that durably took this queued run's
	// inputs at a step boundary (see Step and StepTake). While it is set the
	// run cannot be canceled on its own and no input coalesces into it; it
	// is cleared when the taking run ends without completing.
	TakenBy string
	// TranscriptIDs is set on a completed run whose conversation is not its
	// inputs followed by its outputs: the ids of its messages in the order
	// the model saw them (its inputs, then model and tool messages, with the
	// inputs it took placed at the boundary that took them, then the
	// answer). Empty means inputs first, then outputs in history order.
	TranscriptIDs []string
	// Attempt counts executions: 1 at admission, +1 at every recovery.
	Attempt int
	// WaitTakeovers counts the recoveries that took the run over while it
	// waited for answers (each moved Attempt on too, to fence out the
	// former owner): they executed nothing. Attempt - WaitTakeovers is
	// the executions the run has had, which the host's MaxAttempts bounds.
	WaitTakeovers int
	// Owner is the host epoch executing the run while it is active.
	Owner string
	// Error describes why a failed run failed.
	Error string
	// Pending lists, in the order asked, the tool calls (by call id) that
	// wait for a person's answer: those the tool policy said ask for (a
	// StepAsk record each) and that no StepAnswer has decided yet. An
	// active run with Pending calls is waiting: no host executes it until
	// the last of them is answered (the store state stays active, and its
	// thread busy). Cleared when the run ends.
	Pending []string
	// EndSeq orders the terminal runs of a thread by when they ended: the
	// thread version of the commit that made the run terminal (0 before).
	EndSeq    int64
	CreatedAt time.Time
	StartedAt time.Time
	EndedAt   time.Time
}

// Role is the author of a message.
type Role string

// The message roles.
const (
	RoleUser      Role = "user"      // an accepted input
	RoleAssistant Role = "assistant" // a model step: an answer, or a request for tool calls
	RoleTool      Role = "tool"      // the result of one tool call
	// RoleSystem appears only in prompts (added by prepareStep hooks), never
	// in a thread's history.
	RoleSystem Role = "system"
)

// ToolCall is a model's request to call a tool.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON text, as the model produced it
}

// Message is one entry of a thread's history. History is append-only; Seq is
// the message's position in it.
type Message struct {
	ID       string
	ThreadID string
	// RunID is the run the message was written for: for an input, the run it
	// was admitted to; for model and tool output, the run that produced it.
	RunID   string
	Seq     int64
	Role    Role
	Content string
	// ToolCalls is set on an assistant message that asks for tools.
	ToolCalls []ToolCall
	// ToolCallID is set on a tool message: the call it answers.
	ToolCallID string
	// Hint is the submitter's hint to the input policy (user messages only).
	Hint string
	// Metadata is the submitter's metadata (user messages only).
	Metadata  map[string]string
	CreatedAt time.Time
}

// StepKind says what a step record holds.
type StepKind string

// The step kinds.
const (
	// StepModel: the model's message ending one model call (Message, role
	// assistant, with the tool calls it asked for, if any).
	StepModel StepKind = "model"
	// StepTool: the result of one tool call (Message, role tool).
	StepTool StepKind = "tool"
	// StepTake: inputs of queued runs taken by injection at a boundary
	// (Taken), before the model call that sees them.
	StepTake StepKind = "take"
	// StepAsk: a tool call of the model step that the tool policy said
	// ask for (Ask): it waits for a person's answer, and is not made
	// before one.
	StepAsk StepKind = "ask"
	// StepAnswer: a person's (or the time limit's) answer to an asked call
	// (Answer).
	StepAnswer StepKind = "answer"
)

// Valid reports whether k is one of the known step kinds.
func (k StepKind) Valid() bool {
	switch k {
	case StepModel, StepTool, StepTake, StepAsk, StepAnswer:
		return true
	}
	return false
}

// Ask is a tool call waiting for approval, as the tool policy asked for it.
type Ask struct {
	// CallID is the model's id of the call, unique in its model step (a
	// model may use an id again in a later step, which is asked about anew).
	CallID string
	// Tool and Server name the tool (Server: the MCP server providing it,
	// empty for a tool of the host's own); Arguments is the JSON text the
	// model produced.
	Tool      string
	Server    string
	Arguments string
	// Prompt is what the person approving is shown.
	Prompt string
	// Approvals is how many approve answers the call needs (1 or more).
	Approvals int
	// Deadline is when an unanswered call is rejected.
	Deadline time.Time
}

// AnswerAction is what a person decided about an asked call.
type AnswerAction string

// The answer actions.
const (
	// AnswerApprove: the call runs as the model asked.
	AnswerApprove AnswerAction = "approve"
	// AnswerEdit: the call runs with Answer.Arguments instead.
	AnswerEdit AnswerAction = "edit"
	// AnswerReject: the call does not run; the model sees Answer.Text as
	// the tool's result.
	AnswerReject AnswerAction = "reject"
	// AnswerRespond: the call does not run; Answer.Text is the person's
	// answer in the tool's place, the tool's result the model sees.
	AnswerRespond AnswerAction = "respond"
)

// Valid reports whether a is one of the answer actions.
func (a AnswerAction) Valid() bool {
	switch a {
	case AnswerApprove, AnswerEdit, AnswerReject, AnswerRespond:
		return true
	}
	return false
}

// Answer is one answer to an asked call.
type Answer struct {
	CallID string
	Action AnswerAction
	// Arguments, with edit, is the JSON text the call runs with.
	Arguments string
	// Text, with reject or respond, is the tool result the model sees.
	Text string
	// Key is the answer's idempotency key: the same answer with the same
	// key again is the recorded one.
	Key string
}

// Take is what one step record took from one queued run: all its inputs.
type Take struct {
	RunID           string
	InputMessageIDs []string
}

// Step is one durable record of a run's progress, written as soon as it is
// known, so that a recovered run continues from where it stopped instead of
// starting again. The steps of a run form a log: Seq is 1, 2, ... within
// the run, with no gap, and a step is never changed once written.
//
// Steps are not history: a thread's history holds a run's messages only
// once the run completes. A run that did not complete keeps its steps for
// inspection.
type Step struct {
	// ID is unique in the store, so that a host whose commit reply was lost
	// can tell by reading whether it was applied.
	ID       string
	RunID    string
	ThreadID string
	Seq      int64
	// Attempt is the run's attempt that wrote the step.
	Attempt int
	// Model is the model step (0, 1, ...) the record belongs to: its model
	// message, the results of the calls that message asked for, and the
	// inputs taken at the boundary before it.
	Model int
	Kind  StepKind
	// Message is set for StepModel and StepTool.
	Message Message
	// Taken is set for StepTake, in the order taken.
	Taken []Take
	// Ask is set for StepAsk, Answer for StepAnswer. The answer's time is
	// the step's CreatedAt.
	Ask       Ask
	Answer    Answer
	CreatedAt time.Time
}

// Idempotency binds a submission's idempotency key on a thread to the
// admission it produced.
type Idempotency struct {
	ThreadID       string
	Key            string
	RunID          string
	InputMessageID string
	// ContentHash is the hex SHA-256 of the submitted content: the same key
	// with other content is refused.
	ContentHash string
	CreatedAt   time.Time
}

package runstate

import (
	"time"

	"github.com/agenthost/agenthost/abi/record"
)

// Snapshot is what a mutation reads: a thread's header, its open runs (in the
// header's OpenRunIDs order), and for Admit the idempotency record of the
// admission's key, if there is one.
type Snapshot struct {
	Thread      record.Thread
	Open        []record.Run
	Idempotency *record.Idempotency
	// StepsKept: the store keeps step records (store protocol 2), so the
	// inputs a run answers besides its own are taken (Take) before the
	// model sees them, and a completing run absorbs only the queued runs
	// it took. Over a store without them (protocol 1) nothing is ever
	// taken, and absorption is judged on the queue alone.
	StepsKept bool
}

// Action is an input policy's answer for an input that arrives while its
// thread is busy.
type Action string

// The actions.
const (
	// ActionQueue: a new queued run waits behind the others.
	ActionQueue Action = "queue"
	// ActionInject: durably the same as queue; the host also offers the input
	// to the active run, which may take it at a step boundary and absorb its
	// run when it completes.
	ActionInject Action = "inject"
	// ActionInterrupt: queue, and ask the active run to stop.
	ActionInterrupt Action = "interrupt"
	// ActionReject: refuse the input with ErrBusy; nothing is written.
	ActionReject Action = "reject"
)

// Actions lists every action, in a stable order.
var Actions = []Action{ActionQueue, ActionInject, ActionInterrupt, ActionReject}

// Valid reports whether a is a known action.
func (a Action) Valid() bool {
	switch a {
	case ActionQueue, ActionInject, ActionInterrupt, ActionReject:
		return true
	}
	return false
}

// Decision is an input policy's decision.
type Decision struct {
	Action Action
	// CoalescePending makes the input join the last queued run instead of
	// getting a run of its own (for queue, inject and interrupt). Without a
	// queued run it has no effect.
	CoalescePending bool
}

// Mutation is one of Admit, Start, Take, Wait, Answer, CommitTerminal,
// Recover or Cancel.
type Mutation interface{ mutation() }

// Admit admits a submission.
type Admit struct {
	ThreadID string
	// Key is the idempotency key; empty for none.
	Key      string
	Content  string
	Hint     string
	Metadata map[string]string
	// Decision is the policy's decision. It is read only when the thread is
	// busy; when it is needed and nil, Reduce returns ErrDecisionRequired.
	Decision *Decision
	// Ids for the records a new admission writes. RunID and
	// AssistantMessageID go unused when the input joins an existing run.
	RunID              string
	InputMessageID     string
	AssistantMessageID string
	// StartAs, when set, starts the admitted run under this owner in the
	// admission's own effects if the thread is idle (no open run): the
	// effects of Admit then Start in one version step. On a busy thread, or
	// for a duplicate, it is ignored. The caller leaves it empty when the
	// thread belongs to another live owner.
	StartAs string
	Now     time.Time
}

// Start makes the head of a thread's queue active.
type Start struct {
	ThreadID string
	// Owner is the host epoch that will execute the run.
	Owner string
	Now   time.Time
}

// AbsorbEntry names a queued run whose inputs the committing run took at its
// step boundaries, and exactly those inputs.
type AbsorbEntry struct {
	RunID           string
	InputMessageIDs []string
	// At is where the model saw these inputs: before CommitTerminal.Steps[At]
	// (len(Steps) or more: after the last of them, before the answer). It
	// orders the completed run's TranscriptIDs.
	At int
}

// Take records that the active run takes, at a step boundary and before the
// model call that sees them, all the inputs of queued runs next in line. Each
// entry is checked like an absorb entry: the runs taken must be a contiguous
// prefix of the queue behind the active run (after the runs it took
// before), each named with exactly its current inputs and not taken by
// another run. The valid prefix is taken, the rest refused (Effects.Dropped);
// when nothing is valid, nothing is written.
//
// The taken runs get TakenBy = RunID, and a StepTake step record goes in the
// same commit. The thread's version moves: admission reads TakenBy.
type Take struct {
	ThreadID string
	RunID    string
	// Owner must be the run's owner.
	Owner   string
	Entries []record.Take
	// StepID, Seq and Model are the step record's (see record.Step): Seq is
	// the next of the run's step log.
	StepID string
	Seq    int64
	Model  int
	Now    time.Time
}

// CommitTerminal ends an active run.
type CommitTerminal struct {
	ThreadID string
	RunID    string
	// Owner must be the run's owner.
	Owner string
	// Reason is completed, failed or interrupted.
	Reason record.TerminalReason
	// Answer is the content of the assistant message a completed run writes
	// under its reserved AssistantMessageID.
	Answer string
	// Steps are the tool-call exchanges of a completed run (assistant
	// messages with ToolCalls and the tool messages answering them), written
	// before the answer. Ids are given; threads, runs and positions are set by
	// the reducer. Runs that do not complete write no messages at all, so the
	// next run's history never holds a tool call without its result.
	Steps []record.Message
	// Error is recorded on a failed run.
	Error string
	// Final, when set, is the step record of the model message that answers
	// (Kind model, no tool calls, the Answer as its content), appended to
	// the run's step log in this commit: the answer is made durable once,
	// with the run's end, rather than by a step commit of its own just
	// before it. Only with Reason completed; its Seq is the next of the
	// run's log (the driver checks it), and the reducer sets its run,
	// thread and attempt, and its time if it has none.
	Final *record.Step
	// Absorb lists the queued runs to absorb; only with Reason completed.
	Absorb []AbsorbEntry
	Now    time.Time
}

// Recover returns an active run whose owner is gone to the queue.
type Recover struct {
	ThreadID string
	RunID    string
	// DeadOwner is the owner the caller knows to be gone; a run owned by
	// anyone else is left alone (ErrNotOwner).
	DeadOwner string
	// MaxAttempts bounds executions: a run that has had this many fails.
	// The executions are Attempt - WaitTakeovers: the takeovers of a
	// waiting run are not counted, then or later.
	MaxAttempts int
	// NewOwner, when set, takes over a waiting run (active, with calls
	// Pending) instead: it stays active, owned by NewOwner, with attempt+1
	// (so its former owner's commits are refused) and WaitTakeovers+1, and
	// MaxAttempts does not apply: a waiting run does no work its host's
	// end could be blamed on, and once it executes again its takeovers do
	// not count against it either. Without it a waiting run is queued
	// again like any other.
	NewOwner string
	Now      time.Time
}

// Cancel ends a queued run, or with Active an active one, at an operator's
// request: the run ends interrupted with reason canceled and leaves the
// queue, writing no messages.
type Cancel struct {
	ThreadID string
	RunID    string
	// Active allows cancelling the active run; without it an active run is
	// refused (ErrNotQueued), as a caller that means a queued one expects.
	Active bool
	Now    time.Time
}

// Wait records that the active run's model step asked for tool calls the
// tool policy said ask for: each is a StepAsk step record (Asks, with their
// ids, Seq consecutive from the next of the run's log, and Model set), and
// the run's Pending lists their call ids. The run must be active under
// Owner at Attempt and not waiting already; waiting for exactly these
// calls, the wait landed before (a lost reply) and nothing is written. The
// thread's version moves, so an answer, an admission and a cancel
// serialize with it.
type Wait struct {
	ThreadID string
	RunID    string
	Owner    string
	Attempt  int
	Asks     []record.Step
	Now      time.Time
}

// Answer records one answer to a pending call of a waiting run (any host
// may commit it: it is not fenced by the run's owner). The run must be
// open with CallID in its Pending; the Answer step record (Seq: the next
// of the run's log) goes in the same commit. The call leaves Pending when
// it is decided: by reject, respond or edit, or by its Ask.Approvals-th
// approve (approvals count by distinct key). Pending empty, the run
// resumes (AnswerResult.Resume).
//
// The caller reads the run's step log and passes the call's Ask and the
// answers given to it before (Prior), in order: the reducer judges
// repetition and counting from them. An answer whose Key a prior answer
// has is a duplicate: the same answer again returns the recorded one and
// writes nothing; another is ErrAnswered. So is any answer to a call that
// is decided already, unless it repeats the deciding answer.
type Answer struct {
	ThreadID string
	RunID    string
	Answer   record.Answer
	// Ask is the call's StepAsk record; Prior the call's StepAnswer
	// records, in log order.
	Ask   *record.Step
	Prior []record.Step
	// Earlier are the StepAnswer records of earlier asks about a call with
	// the same id (a model may use an id again in a later step, ADR 0149),
	// in log order: an answer whose key is one of theirs is that earlier
	// answer sent again, not an answer to the later call.
	Earlier []record.Step
	// StepID and Seq are the answer's step record's.
	StepID string
	Seq    int64
	Now    time.Time
}

func (Wait) mutation()           {}
func (Answer) mutation()         {}
func (Admit) mutation()          {}
func (Start) mutation()          {}
func (Take) mutation()           {}
func (CommitTerminal) mutation() {}
func (Recover) mutation()        {}
func (Cancel) mutation()         {}

// HistoryOp is the kind of a history mutation.
type HistoryOp string

// HistoryAppend appends a message to its thread's history.
const HistoryAppend HistoryOp = "append"

// HistoryMutation is one change to a thread's history.
type HistoryMutation struct {
	Op      HistoryOp
	Message record.Message
}

// Effects is what a mutation writes, to be committed in one transaction
// conditional on the snapshot's thread version, plus what it reports.
type Effects struct {
	// Thread is the thread's new header (Version = snapshot version + 1), or
	// nil when the mutation writes nothing.
	Thread           *record.Thread
	RunRecords       []record.Run
	HistoryMutations []HistoryMutation
	Idempotency      []record.Idempotency
	// Steps are step records to append (Take's, and CommitTerminal's
	// Final).
	Steps []record.Step

	// Reported, not written.

	// Run is the run the mutation is about, as it is after the mutation:
	// the admitted (or joined) run, the started, ended, recovered or canceled
	// run.
	Run *record.Run
	// Admission describes the outcome of an Admit.
	Admission *Admission
	// Dropped lists the absorb entries a CommitTerminal dropped, or the
	// entries a Take refused.
	Dropped []DroppedAbsorb
	// Answered describes the outcome of an Answer.
	Answered *AnswerResult
	// Released lists the queued runs whose TakenBy this mutation cleared:
	// their taker ended without completing (or completed without absorbing
	// them), and they are ordinary queued runs again.
	Released []string
}

// Empty reports whether the effects write nothing.
func (e Effects) Empty() bool { return e.Thread == nil }

// Admission is the outcome of an Admit.
type Admission struct {
	ThreadID       string
	RunID          string
	InputMessageID string
	// Duplicate: the key was seen before with the same content; this is the
	// earlier admission and nothing was written.
	Duplicate bool
	// Decision is the policy decision applied, nil when the thread was idle or
	// the admission is a duplicate.
	Decision *Decision
	// Coalesced: the input joined an existing queued run.
	Coalesced bool
	// InterruptRunID is the active run the host must ask to stop.
	InterruptRunID string
	// Offer: the input was admitted with inject; the host offers it to the
	// active run (ActiveRunID), which may take it at a step boundary.
	Offer bool
	// ActiveRunID is the thread's active run at admission, if any.
	ActiveRunID string
}

// AnswerResult is the outcome of an Answer.
type AnswerResult struct {
	// Step is the answer's step record: the one written, or for a
	// duplicate the one recorded before.
	Step record.Step
	// Duplicate: the answer was given before with the same key; nothing
	// was written.
	Duplicate bool
	// Decided: the call left Pending (it runs, or gets its result, when
	// the run resumes). Resume: no call is pending any more.
	Decided bool
	Resume  bool
}

// DroppedAbsorb is an absorb entry that no longer held at commit time.
type DroppedAbsorb struct {
	RunID  string
	Reason string
}

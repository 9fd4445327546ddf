package host

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/runstate"
)

// EventType names what happened to a run.
type EventType string

// The event types, in the order a run emits them.
const (
	EventAdmitted      EventType = "admitted"       // the input was accepted (Data: decision, input_message_id)
	EventStarted       EventType = "started"        // the run became active (Data: attempt)
	EventStepStarted   EventType = "step_started"   // a model step began (Data: step)
	EventInputTaken    EventType = "input_taken"    // the run took an input by injection (Data: input_message_id, from_run_id)
	EventDelta         EventType = "delta"          // ephemeral: text of the step's answer as the model streams it (Data: step, text)
	EventToolCall      EventType = "tool_call"      // the model called a tool (Data: tool, call_id, idempotency_key)
	EventToolResult    EventType = "tool_result"    // a tool call ended (Data: tool, call_id, error: "" or what went wrong)
	EventStepFinished  EventType = "step_finished"  // a model step ended (Data: step)
	EventStepCommitted EventType = "step_committed" // a step record was committed (Data: seq, kind, step)
	EventWaiting       EventType = "waiting"        // the run waits for answers to tool calls (Data: call_ids, comma-separated; step)
	EventApproval      EventType = "approval"       // a waited-on call was answered (Data: call_id, action, decided)
	EventResumed       EventType = "resumed"        // a waiting run, all its calls answered, executes again (Data: attempt)
	EventTerminal      EventType = "terminal"       // the run ended (Data: state, reason, error)
	EventAbsorbed      EventType = "absorbed"       // the run was absorbed (Data: into_run_id)
)

// Event is one thing that happened to a run. As Events returns them, kept in
// memory by the process that saw them, Seq orders a run's events from 1;
// delta events are dropped deltaGrace after their run settled (the answer
// holds the text). As RunEvents returns them, derived from the run's
// committed records, Seq is the event's durable id (see eventSlots).
type Event struct {
	Seq      int64
	RunID    string
	ThreadID string
	Type     EventType
	Time     time.Time
	Data     map[string]string
}

// eventLog keeps the events of recent runs and wakes subscribers.
type eventLog struct {
	mu      sync.Mutex
	runs    map[string]*runEvents
	settled []string // runs whose terminal event was recorded, oldest first
	keep    int      // settled runs to keep events of
	compact []settledRun
}

// settledRun is a settled run whose deltas are still kept.
type settledRun struct {
	runID string
	at    time.Time
}

// deltaGrace is how long a settled run's delta events are kept: long
// enough for a client following the run to read them.
const deltaGrace = 30 * time.Second

type runEvents struct {
	events []Event // in Seq order, with gaps where deltas were dropped
	seq    int64   // the last Seq given
	// changed is closed on the next event. It is made only when since
	// hands it out: an event that no one waits for (most of a run's, a
	// step_committed among them) costs no channel.
	changed chan struct{}
}

func newEventLog(keep int) *eventLog {
	return &eventLog{runs: map[string]*runEvents{}, keep: keep}
}

func (l *eventLog) get(runID string) *runEvents {
	re := l.runs[runID]
	if re == nil {
		re = &runEvents{}
		l.runs[runID] = re
	}
	return re
}

func (l *eventLog) emit(now time.Time, runID, threadID string, typ EventType, data map[string]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.compact) > 0 && now.Sub(l.compact[0].at) >= deltaGrace {
		if re := l.runs[l.compact[0].runID]; re != nil {
			re.events = slices.DeleteFunc(re.events, func(e Event) bool { return e.Type == EventDelta })
		}
		l.compact = l.compact[1:]
	}
	re := l.get(runID)
	re.seq++
	re.events = append(re.events, Event{Seq: re.seq, RunID: runID, ThreadID: threadID, Type: typ, Time: now, Data: data})
	if re.changed != nil {
		close(re.changed)
		re.changed = nil
	}
	if typ == EventTerminal || typ == EventAbsorbed {
		l.compact = append(l.compact, settledRun{runID, now})
		l.settled = append(l.settled, runID)
		for len(l.settled) > l.keep {
			delete(l.runs, l.settled[0])
			l.settled = l.settled[1:]
		}
	}
}

// since returns the run's events after seq and a channel closed when more
// arrive.
func (l *eventLog) since(runID string, seq int64) ([]Event, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	re := l.get(runID)
	if seq < 0 {
		seq = 0
	}
	if re.changed == nil {
		re.changed = make(chan struct{})
	}
	i := sort.Search(len(re.events), func(i int) bool { return re.events[i].Seq > seq })
	if i == len(re.events) {
		return nil, re.changed
	}
	return append([]Event(nil), re.events[i:]...), re.changed
}

// Durable events. A run's durable events (admitted, started, step_committed,
// input_taken, tool_call, tool_result, terminal, absorbed) are derived from
// its committed records, not from what this process saw: any host of the
// store, before or after a restart, derives the same events with the same
// ids, so a client resumes with Last-Event-ID wherever it reconnects.
//
// The id of an event is its place in the run's records: the events of step
// record Seq s have ids s·eventSlots + k. In the slot of record s, k below
// startSlots is the start of attempt k (for every attempt whose first record
// is s, or, for an attempt that wrote none, the first record written after
// it); k = startSlots is step_committed, and the calls, takes or result the
// record holds follow. admitted is 1; the starts of attempts after the last
// record take the slot of the record that would come next, and the terminal
// event its last id (eventSlots−1). So two attempts that start before the
// same record have two ids, and ids only grow along the run.
const (
	eventSlots = 1 << 20
	startSlots = 1 << 10
)

// IsDurableEvent reports whether events of type typ are derived from the
// records (RunEvents); the others (step_started, delta, step_finished) are
// ephemeral, kept only by the process that saw them.
func IsDurableEvent(typ EventType) bool {
	switch typ {
	case EventStepStarted, EventDelta, EventStepFinished:
		return false
	}
	return true
}

// RunEvents returns the durable events of run runID with an id greater than
// after, in id order, derived from its record and step log, and the run's
// record. An id past the run's last event gives none: nothing is invented.
func (rt *Runtime) RunEvents(ctx context.Context, runID string, after int64) ([]Event, record.Run, error) {
	run, err := rt.st.GetRun(ctx, runID)
	if err != nil {
		return nil, record.Run{}, speak(err)
	}
	steps, err := rt.st.ReadSteps(ctx, runID, 0, 0)
	if err != nil {
		return nil, record.Run{}, speak(err)
	}
	var out []Event
	add := func(id int64, typ EventType, at time.Time, data map[string]string) {
		if id > after {
			out = append(out, Event{Seq: id, RunID: run.ID, ThreadID: run.ThreadID, Type: typ, Time: at, Data: data})
		}
	}
	first := ""
	if len(run.InputMessageIDs) > 0 {
		first = run.InputMessageIDs[0]
	}
	admitted := map[string]string{"input_message_id": first}
	if d, ok := rt.decisions.get(run.ID); ok {
		admitted["decision"] = d
	}
	add(1, EventAdmitted, run.CreatedAt, admitted)
	// Every attempt up to the last started one started (an attempt is the
	// run's execution after a recovery, which only an active run has).
	startedUpTo := run.Attempt
	if run.StartedAt.IsZero() {
		startedUpTo--
	}
	attempt := 0 // the last attempt whose start was placed
	starts := func(base int64, upTo int, at time.Time) {
		for ; attempt < min(upTo, startSlots-1); attempt++ {
			a := attempt + 1
			when := at // an attempt that wrote no record: at the latest then
			if a == run.Attempt && !run.StartedAt.IsZero() {
				when = run.StartedAt
			}
			add(base+int64(a), EventStarted, when, map[string]string{"attempt": strconv.Itoa(a)})
		}
	}
	toolNames := map[string]string{}
	last := int64(0)
	asks := map[string]record.Ask{}
	answers := map[string][]record.Answer{}
	var waitingFor []string // the asks of the current wait, in order
	for i, st := range steps {
		base := st.Seq * eventSlots
		last = st.Seq
		starts(base, st.Attempt, st.CreatedAt)
		step := strconv.Itoa(st.Model)
		add(base+startSlots, EventStepCommitted, st.CreatedAt, map[string]string{"seq": strconv.FormatInt(st.Seq, 10), "kind": string(st.Kind), "step": step})
		k := int64(startSlots + 1)
		switch st.Kind {
		case record.StepModel:
			for i, c := range st.Message.ToolCalls {
				toolNames[c.ID] = c.Name
				key := model.Call{RunID: run.ID, Step: st.Model, Index: i, ID: c.ID}.IdempotencyKey()
				add(base+k, EventToolCall, st.CreatedAt, map[string]string{"tool": c.Name, "call_id": c.ID, "idempotency_key": key, "step": step})
				k++
			}
		case record.StepTool:
			errText, _ := strings.CutPrefix(st.Message.Content, "error: ")
			if errText == st.Message.Content {
				errText = ""
			}
			add(base+k, EventToolResult, st.CreatedAt, map[string]string{"tool": toolNames[st.Message.ToolCallID], "call_id": st.Message.ToolCallID, "error": errText, "step": step})
		case record.StepTake:
			for _, tk := range st.Taken {
				for _, id := range tk.InputMessageIDs {
					add(base+k, EventInputTaken, st.CreatedAt, map[string]string{"input_message_id": id, "from_run_id": tk.RunID, "step": step})
					k++
				}
			}
		case record.StepAsk:
			// One waiting event per wait: at the last of its asks (they are
			// committed together).
			asks[st.Ask.CallID] = st.Ask
			answers[st.Ask.CallID] = nil // an id used again in a later model step is asked anew
			waitingFor = append(waitingFor, st.Ask.CallID)
			if i+1 == len(steps) || steps[i+1].Kind != record.StepAsk {
				add(base+k, EventWaiting, st.CreatedAt, map[string]string{"call_ids": strings.Join(waitingFor, ","), "step": step})
			}
		case record.StepAnswer:
			a := st.Answer
			answers[a.CallID] = append(answers[a.CallID], a)
			_, decided := runstate.Decided(asks[a.CallID], answers[a.CallID])
			add(base+k, EventApproval, st.CreatedAt, map[string]string{"call_id": a.CallID, "action": string(a.Action), "decided": strconv.FormatBool(decided)})
			k++
			all := decided
			for _, id := range waitingFor {
				if _, ok := runstate.Decided(asks[id], answers[id]); !ok {
					all = false
				}
			}
			if all {
				waitingFor = nil
				add(base+k, EventResumed, st.CreatedAt, map[string]string{"attempt": strconv.Itoa(st.Attempt)})
			}
		}
	}
	next := (last + 1) * eventSlots
	at := run.StartedAt
	if at.IsZero() {
		at = run.EndedAt
	}
	starts(next, startedUpTo, at)
	switch {
	case run.TerminalReason == record.ReasonAbsorbed:
		add(next+eventSlots-1, EventAbsorbed, run.EndedAt, map[string]string{"into_run_id": run.AbsorbedIntoRunID})
	case IsTerminal(run.State):
		add(next+eventSlots-1, EventTerminal, run.EndedAt, map[string]string{"state": string(run.State), "reason": string(run.TerminalReason), "error": run.Error})
	}
	return out, run, nil
}

// decisionLog keeps the input policy's decision for the most recent runs
// this process admitted, so that their admitted event carries it. The
// decision is not a record: after a restart, or on another host, the
// admitted event comes without it.
type decisionLog struct {
	mu    sync.Mutex
	byRun map[string]string
	order []string // admission order, for eviction
}

// maxDecisions bounds the decisions kept.
const maxDecisions = 1 << 16

func (d *decisionLog) note(runID, decision string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byRun == nil {
		d.byRun = map[string]string{}
	}
	if _, ok := d.byRun[runID]; !ok {
		d.order = append(d.order, runID)
	}
	d.byRun[runID] = decision
	for len(d.order) > maxDecisions {
		delete(d.byRun, d.order[0])
		d.order = d.order[1:]
	}
}

func (d *decisionLog) get(runID string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.byRun[runID]
	return v, ok
}

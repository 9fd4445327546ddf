package host

import (
	"slices"
	"sort"
	"sync"
	"time"
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
	EventTerminal      EventType = "terminal"       // the run ended (Data: state, reason, error)
	EventAbsorbed      EventType = "absorbed"       // the run was absorbed (Data: into_run_id)
)

// Event is one thing that happened to a run. Seq orders a run's events from 1.
// Events are kept in memory by the process that saw them; the run's durable
// record is the authority on its state. Delta events are ephemeral even
// there: they are dropped deltaGrace after their run settled (the answer
// holds the text), so a client resuming later sees none of them.
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
	events  []Event       // in Seq order, with gaps where deltas were dropped
	seq     int64         // the last Seq given
	changed chan struct{} // closed and replaced on every new event
}

func newEventLog(keep int) *eventLog {
	return &eventLog{runs: map[string]*runEvents{}, keep: keep}
}

func (l *eventLog) get(runID string) *runEvents {
	re := l.runs[runID]
	if re == nil {
		re = &runEvents{changed: make(chan struct{})}
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
	close(re.changed)
	re.changed = make(chan struct{})
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
	i := sort.Search(len(re.events), func(i int) bool { return re.events[i].Seq > seq })
	if i == len(re.events) {
		return nil, re.changed
	}
	return append([]Event(nil), re.events[i:]...), re.changed
}

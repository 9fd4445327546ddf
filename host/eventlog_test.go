package host

import (
	"testing"
	"time"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// The channel since hands out is closed by the next event, whether it was
// taken before the run's first event or after events no one waited for;
// the one handed out after that event is open again.
func TestEventLogChangedChannel(t *testing.T) {
	l := newEventLog(16)
	now := time.Now()
	evs, ch := l.since("r1", 0)
	if len(evs) != 0 || closed(ch) {
		t.Fatalf("before any event: %d events, closed %v", len(evs), closed(ch))
	}
	l.emit(now, "r1", "t1", EventStepCommitted, map[string]string{"seq": "1"})
	if !closed(ch) {
		t.Fatal("the first event did not close the channel taken before it")
	}
	// Events no one waits for in between.
	l.emit(now, "r1", "t1", EventStepCommitted, map[string]string{"seq": "2"})
	l.emit(now, "r1", "t1", EventStepCommitted, map[string]string{"seq": "3"})
	evs, ch2 := l.since("r1", 1)
	if len(evs) != 2 || evs[0].Seq != 2 || evs[1].Seq != 3 || closed(ch2) {
		t.Fatalf("after three events, since 1: %+v, closed %v", evs, closed(ch2))
	}
	if _, again := l.since("r1", 3); again != ch2 {
		t.Fatal("two waits with no event between got different channels")
	}
	l.emit(now, "r1", "t1", EventStepCommitted, map[string]string{"seq": "4"})
	if !closed(ch2) {
		t.Fatal("the fourth event did not close the channel taken before it")
	}
	if _, ch3 := l.since("r1", 4); closed(ch3) {
		t.Fatal("the channel taken after the last event is closed")
	}
}

package host_test

import (
	"context"
	"slices"
	"testing"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// durableEvents returns run's durable events after id after.
func durableEvents(t *testing.T, rt *host.Runtime, runID string, after int64) []host.Event {
	t.Helper()
	evs, _, err := rt.RunEvents(context.Background(), runID, after)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func startedAt(evs []host.Event) map[string]int64 {
	out := map[string]int64{}
	for _, e := range evs {
		if e.Type == host.EventStarted {
			out[e.Data["attempt"]] = e.Seq
		}
	}
	return out
}

// TestEventIDsAcrossAttempts: two attempts of a run that start before the
// same step record (the first wrote none) get two started events with two
// ids, on every host and after a restart; a client that saw the first
// resumes with its id and gets the second. The admitted event keeps its id;
// after a restart it no longer says the policy's decision, which is not on
// record (docs/http-api.md).
func TestEventIDsAcrossAttempts(t *testing.T) {
	d := memdriver.New()
	h := newHarness(t, d, hintPolicy{}, twoSteps)
	tA := h.submit("T", "a", "", "")
	h.waitEvent(tA.RunID, host.EventStepStarted, "step", "0")
	tB := h.submit("T", "b", "", "queue")
	first := durableEvents(t, h.rt, tA.RunID, 0)
	s1, ok := startedAt(first)["1"]
	if !ok {
		t.Fatalf("attempt 1 has no started event: %+v", first)
	}
	admB := durableEvents(t, h.rt, tB.RunID, 0)
	if len(admB) != 1 || admB[0].Type != host.EventAdmitted || admB[0].Data["decision"] != "queue" {
		t.Fatalf("B's events before the restart: %+v", admB)
	}
	h.closeNow() // attempt 1 wrote no step record

	h2 := newHarness(t, d, hintPolicy{}, twoSteps)
	h2.waitEvent(tA.RunID, host.EventStepStarted, "step", "0")
	all := durableEvents(t, h2.rt, tA.RunID, 0)
	starts := startedAt(all)
	if starts["1"] != s1 || starts["2"] == 0 || starts["2"] == s1 {
		t.Fatalf("started events after the restart %v; attempt 1 had id %d: two attempts need two ids", starts, s1)
	}
	// Resuming after attempt 1's start gives attempt 2's.
	rest := durableEvents(t, h2.rt, tA.RunID, s1)
	if len(rest) == 0 || rest[0].Type != host.EventStarted || rest[0].Data["attempt"] != "2" {
		t.Fatalf("resumed after attempt 1's start (%d): %+v", s1, rest)
	}
	h2.releaseN(4) // A's two steps, then B's
	h2.wait(tA.RunID)
	h2.wait(tB.RunID)
	all = durableEvents(t, h2.rt, tA.RunID, 0)
	var ids []int64
	for _, e := range all {
		ids = append(ids, e.Seq)
	}
	if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Fatalf("event ids %v are not unique and growing", ids)
	}
	if starts := startedAt(all); starts["1"] != s1 || starts["2"] == 0 {
		t.Fatalf("started events at the end %v", starts)
	}
	// Every resumption point gives exactly the events after it.
	for i, id := range ids {
		got := durableEvents(t, h2.rt, tA.RunID, id)
		if len(got) != len(all)-i-1 || (len(got) > 0 && got[0].Seq != all[i+1].Seq) {
			t.Fatalf("resumed after %d: %d events, want %d", id, len(got), len(all)-i-1)
		}
	}
	// The admitted event after the restart: the same id and input, no
	// decision (it is not on record).
	admB2 := durableEvents(t, h2.rt, tB.RunID, 0)
	if admB2[0].Type != host.EventAdmitted || admB2[0].Seq != admB[0].Seq || admB2[0].Data["input_message_id"] != tB.InputMessageID {
		t.Fatalf("B's admitted event after the restart: %+v, before %+v", admB2[0], admB[0])
	}
	if d, ok := admB2[0].Data["decision"]; ok {
		t.Fatalf("B's admitted event after the restart says decision %q, which is on no record", d)
	}
}

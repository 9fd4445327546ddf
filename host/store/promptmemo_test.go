package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// On a thread whose runs follow one another, a prompt is the end of the
// cached history itself, not a copy of the window: its cost is the run's
// own messages. Appending to it leaves the cache alone.
func TestPromptSharesTheCachedHistory(t *testing.T) {
	ctx := context.Background()
	d := memdriver.New()
	t.Cleanup(func() { d.Close(ctx) })
	const window = 12
	s := New(d, Options{HistoryWindow: window, PageSize: 4})
	shared := 0
	for i := range 40 {
		adm, err := s.Admit(ctx, Submission{ThreadID: "T", Content: fmt.Sprintf("q%d", i), StartAs: "h1"}, nil)
		if err != nil || adm.Started == nil {
			t.Fatalf("run %d: admission %+v, %v", i, adm, err)
		}
		run := *adm.Started
		p, err := s.Prompt(ctx, run, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(p); n == 0 || p[n-1].ID != run.InputMessageIDs[0] {
			t.Fatalf("run %d: prompt %v does not end with its input", i, p)
		}
		cached := s.hist.get("T")
		if &p[len(p)-1] == &cached[len(cached)-1] && cap(p) == len(p) {
			shared++
		}
		// What a caller appends does not reach the cache, nor the next prompt.
		_ = append(p, record.Message{ID: "appended"})
		steps := []record.Message{
			{ID: fmt.Sprintf("call%d", i), Role: record.RoleAssistant, ToolCalls: []record.ToolCall{{ID: fmt.Sprintf("c%d", i), Name: "lookup"}}},
			{ID: fmt.Sprintf("res%d", i), Role: record.RoleTool, ToolCallID: fmt.Sprintf("c%d", i), Content: "ok"},
		}
		if _, _, err := s.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: "T", RunID: run.ID, Owner: "h1", Reason: record.ReasonCompleted, Answer: fmt.Sprintf("a%d", i), Steps: steps}); err != nil {
			t.Fatal(err)
		}
		for _, m := range s.hist.get("T") {
			if m.ID == "appended" {
				t.Fatalf("run %d: a message appended to a prompt reached the cache", i)
			}
		}
	}
	if shared < 39 {
		t.Errorf("%d of 40 prompts shared the cached history, want all but the first", shared)
	}
}

// The memo's chains: a run that ends out of the order of its messages, or
// whose messages are not consecutive, ends the chain, and the prompt is
// then copied, the same as the window's projection (verifyMemo).
func TestMemoChains(t *testing.T) {
	msg := func(seq int64, run string, role record.Role) record.Message {
		return record.Message{ID: fmt.Sprintf("m%d", seq), Seq: seq, RunID: run, Role: role}
	}
	m := newThreadMemo(0, 0)
	add := func(id string, endSeq int64, msgs ...record.Message) {
		var inputs []string
		for _, x := range msgs {
			m.byID[x.ID] = x
			if x.Role == record.RoleUser {
				inputs = append(inputs, x.ID)
			}
		}
		o := &openRun{msgs: msgs}
		o.last = msgs[len(msgs)-1].Seq
		m.open[id] = o
		m.addEnded(record.Run{ID: id, EndSeq: endSeq, Seq: endSeq, State: record.StateCompleted, InputMessageIDs: inputs})
		delete(m.open, id)
	}
	add("r1", 1, msg(1, "r1", record.RoleUser), msg(2, "r1", record.RoleAssistant))
	add("r2", 2, msg(3, "r2", record.RoleUser), msg(4, "r2", record.RoleAssistant))
	if c := m.ended[1]; c.chain != m.ended[0].ord {
		t.Fatalf("r2 follows r1: chain %d, want %d", c.chain, m.ended[0].ord)
	}
	// r4's messages come before r3's in the history, but r4 ended first.
	add("r4", 3, msg(7, "r4", record.RoleUser), msg(8, "r4", record.RoleAssistant))
	if c := m.ended[2]; c.chain != c.ord {
		t.Fatalf("r4 does not follow r2: chain %d, want its own ord %d", c.chain, c.ord)
	}
	// r3 ends after r4, with an earlier EndSeq than a run added later.
	add("r3", 4, msg(5, "r3", record.RoleUser), msg(6, "r3", record.RoleAssistant))
	if c := m.ended[3]; c.chain != c.ord {
		t.Fatalf("r3 after r4: chain %d, want its own ord %d", c.chain, c.ord)
	}
	// A run put before the others (an earlier EndSeq) numbers them again.
	add("r0", 0, msg(9, "r0", record.RoleUser))
	for k := 1; k < len(m.ended); k++ {
		if m.ended[k].ord <= m.ended[k-1].ord {
			t.Fatalf("ords not increasing after an insertion: %+v", m.ended)
		}
	}
	if m.ended[0].id != "r0" || m.ended[2].chain != m.ended[1].ord {
		t.Fatalf("after the insertion: %+v", m.ended)
	}
	// r1 goes when the window passes its messages, from between r0 and
	// r2; r2 no longer follows what is before it.
	m.drop(3)
	var ids []string
	for _, c := range m.ended {
		ids = append(ids, c.id)
	}
	if fmt.Sprint(ids) != "[r0 r2 r4 r3]" || m.endedIDs["r1"] || !m.endedIDs["r2"] {
		t.Fatalf("after the window passed position 2: %v", ids)
	}
	if c := m.ended[1]; c.chain != c.ord {
		t.Fatalf("r2 after r0: chain %d, want its own ord %d", c.chain, c.ord)
	}
}

// The memo keeps as many threads as the history cache's budget allows at
// about twice the window each, so that a larger window does not multiply
// the host's memory.
func TestMemoBounded(t *testing.T) {
	ctx := context.Background()
	d := memdriver.New()
	t.Cleanup(func() { d.Close(ctx) })
	s := New(d, Options{HistoryWindow: 10, PageSize: 4, HistoryCacheMessages: 40})
	for i := range 30 {
		th := fmt.Sprintf("T%d", i%6)
		adm, err := s.Admit(ctx, Submission{ThreadID: th, Content: fmt.Sprintf("q%d", i), StartAs: "h1"}, nil)
		if err != nil || adm.Started == nil {
			t.Fatalf("run %d: admission %+v, %v", i, adm, err)
		}
		if _, err := s.Prompt(ctx, *adm.Started, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: th, RunID: adm.Started.ID, Owner: "h1", Reason: record.ReasonCompleted, Answer: "a"}); err != nil {
			t.Fatal(err)
		}
		held := 0
		s.memo.mu.Lock()
		for _, m := range s.memo.f.m {
			held += len(m.seqs)
			for _, c := range m.ended {
				held += len(c.msgs)
			}
		}
		threads := len(s.memo.f.m)
		s.memo.mu.Unlock()
		if threads > 2 || held > 40 {
			t.Fatalf("run %d: the memo keeps %d threads, %d messages; want at most 2 (40 / twice the window of 10), 40", i, threads, held)
		}
	}
	if got := New(d, Options{}).memo.f.max; got != 250 {
		t.Errorf("default: the memo keeps %d threads, want 250 (100,000 / 400)", got)
	}
}

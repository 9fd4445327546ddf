package store_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// countingDriver counts the messages and runs read.
type countingDriver struct {
	driver.Driver
	msgs, runs atomic.Int64
}

func (d *countingDriver) ReadHistory(ctx context.Context, thread string, after int64, limit int) ([]record.Message, error) {
	m, err := d.Driver.ReadHistory(ctx, thread, after, limit)
	d.msgs.Add(int64(len(m)))
	return m, err
}

func (d *countingDriver) GetRuns(ctx context.Context, ids []string) ([]record.Run, error) {
	d.runs.Add(int64(len(ids)))
	return d.Driver.GetRuns(ctx, ids)
}

// runOnce admits, starts and completes one run with a tool exchange; it
// returns the run as started and the prompt it was given.
func runOnce(t *testing.T, s *store.Store, thread string, i int) []record.Message {
	t.Helper()
	ctx := context.Background()
	mustAdmit(t, s, store.Submission{ThreadID: thread, Content: fmt.Sprintf("q%d", i)}, nil)
	run, err := s.Start(ctx, thread, "h1")
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Prompt(ctx, run, nil)
	if err != nil {
		t.Fatal(err)
	}
	steps := []record.Message{
		{ID: fmt.Sprintf("call%d", i), Role: record.RoleAssistant, ToolCalls: []record.ToolCall{{ID: fmt.Sprintf("c%d", i), Name: "lookup"}}},
		{ID: fmt.Sprintf("res%d", i), Role: record.RoleTool, ToolCallID: fmt.Sprintf("c%d", i), Content: "ok"},
	}
	if _, _, err := s.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: thread, RunID: run.ID, Owner: "h1", Reason: record.ReasonCompleted, Answer: fmt.Sprintf("a%d", i), Steps: steps}); err != nil {
		t.Fatal(err)
	}
	return p
}

// A run's prompt on a long thread is the end of the settled conversation,
// whole runs among the last HistoryWindow messages, and what the store reads
// for it does not grow with the thread, with the cache or without it.
func TestPromptWindowOnLongThread(t *testing.T) {
	ctx := context.Background()
	md := memdriver.New()
	t.Cleanup(func() { md.Close(ctx) })
	d := &countingDriver{Driver: md}
	const window, page = 40, 8
	opt := store.Options{HistoryWindow: window, PageSize: page, HistoryCacheMessages: 3 * window}
	s := store.New(d, opt)
	const n = 300 // 4 messages each: 1,200 messages
	for i := range n {
		p := runOnce(t, s, "T", i)
		if len(p) > window+1 {
			t.Fatalf("run %d: prompt of %d messages, window %d", i, len(p), window)
		}
	}
	// The cached path reads what is new only.
	before := d.msgs.Load()
	runOnce(t, s, "T", n)
	if got := d.msgs.Load() - before; got > 4 {
		t.Errorf("a run with the thread's end cached read %d messages", got)
	}
	// The uncached path (a new store layer) reads the window, not the thread.
	for _, fresh := range []*store.Store{store.New(d, opt), store.New(d, store.Options{HistoryWindow: window})} {
		before, beforeRuns := d.msgs.Load(), d.runs.Load()
		mustAdmit(t, fresh, store.Submission{ThreadID: "T", Content: "last"}, nil)
		run, err := fresh.Start(ctx, "T", "h1")
		if err != nil {
			t.Fatal(err)
		}
		p, err := fresh.Prompt(ctx, run, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.msgs.Load() - before; got > window+page {
			t.Errorf("a fresh store layer read %d messages for a prompt (window %d)", got, window)
		}
		if got := d.runs.Load() - beforeRuns; got > window {
			t.Errorf("a fresh store layer read %d runs for a prompt (window %d)", got, window)
		}
		hist, err := fresh.History(ctx, "T")
		if err != nil {
			t.Fatal(err)
		}
		settled := p[:len(p)-1]
		if len(settled) < window-8 || !slices.EqualFunc(settled, hist[len(hist)-len(settled):], func(a, b record.Message) bool { return a.ID == b.ID }) {
			t.Fatalf("prompt %d messages, not the end of the history of %d", len(settled), len(hist))
		}
		if settled[0].Role != record.RoleUser || p[len(p)-1].Content != "last" {
			t.Fatalf("prompt starts with %+v, ends with %+v", settled[0], p[len(p)-1])
		}
		if _, _, err := fresh.CommitTerminal(ctx, runstate.CommitTerminal{ThreadID: "T", RunID: run.ID, Owner: "h1", Reason: record.ReasonCompleted, Answer: "done"}); err != nil {
			t.Fatal(err)
		}
	}
}

// The history cache holds at most its budget of messages, however many
// threads and however long.
func TestHistoryCacheBounded(t *testing.T) {
	ctx := context.Background()
	md := memdriver.New()
	t.Cleanup(func() { md.Close(ctx) })
	d := &countingDriver{Driver: md}
	s := store.New(d, store.Options{HistoryWindow: 10, PageSize: 4, HistoryCacheMessages: 40})
	for i := range 60 {
		runOnce(t, s, fmt.Sprintf("T%d", i%6), i)
	}
	if got := s.CachedMessages(); got > 40 {
		t.Fatalf("history cache holds %d messages, budget 40", got)
	}
}

// An input policy's view of a busy thread reads the open runs' inputs at
// the end of its history, not the thread.
func TestMessagesByIDReadsTheEnd(t *testing.T) {
	ctx := context.Background()
	md := memdriver.New()
	t.Cleanup(func() { md.Close(ctx) })
	d := &countingDriver{Driver: md}
	const window, page = 20, 8
	s := store.New(d, store.Options{HistoryWindow: window, PageSize: page})
	for i := range 200 {
		runOnce(t, s, "T", i)
	}
	mustAdmit(t, s, store.Submission{ThreadID: "T", Content: "active"}, nil)
	active, err := s.Start(ctx, "T", "h1")
	if err != nil {
		t.Fatal(err)
	}
	q := mustAdmit(t, s, store.Submission{ThreadID: "T", Content: "queued"}, decideAlways(runstate.ActionQueue, false))
	var seen store.ThreadView
	fresh := store.New(d, store.Options{HistoryWindow: window, PageSize: page})
	mustAdmit(t, fresh, store.Submission{ThreadID: "T", Content: "third"}, func(_ context.Context, v store.ThreadView) (runstate.Decision, error) {
		seen = v
		return runstate.Decision{Action: runstate.ActionQueue}, nil
	})
	ids := append(slices.Clone(seen.Active.InputMessageIDs), seen.Queued[0].InputMessageIDs...)
	before := d.msgs.Load()
	got, err := fresh.MessagesByID(ctx, "T", seen.Thread.NextMessageSeq-1, ids)
	if err != nil {
		t.Fatal(err)
	}
	if got[active.InputMessageIDs[0]].Content != "active" || got[q.InputMessageID].Content != "queued" {
		t.Fatalf("got %+v", got)
	}
	if n := d.msgs.Load() - before; n > window+page {
		t.Errorf("read %d messages for the view (window %d)", n, window)
	}
	// An id not in the thread is absent, not an error.
	got, err = fresh.MessagesByID(ctx, "T", -1, []string{"msg_nowhere"})
	if err != nil || len(got) != 0 {
		t.Fatalf("unknown id: %+v, %v", got, err)
	}
}

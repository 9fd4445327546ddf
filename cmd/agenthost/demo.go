package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/policy"
)

// demoScript: a tool call, then the answer; each step takes a moment so the
// second input arrives while the first run works.
var demoScript = model.Script{Steps: []model.ScriptStep{
	{Delay: model.Duration(400 * time.Millisecond), Tool: &model.ScriptTool{Name: "read_thread", Arguments: `{"thread":"demo"}`}},
	{Delay: model.Duration(400 * time.Millisecond), Answer: "echo"},
}}

// readThreadTool stands in for a tool that reads the thread to summarise.
type readThreadTool struct{}

func (readThreadTool) Spec() model.ToolSpec {
	return model.ToolSpec{Name: "read_thread", Description: "reads a thread's messages"}
}
func (readThreadTool) Call(context.Context, string) (string, error) {
	return "12 messages about the launch plan", nil
}

// timeline prints a runtime's events as they happen. The goroutines that
// follow runs share it.
type timeline struct {
	w     io.Writer
	start time.Time

	mu    sync.Mutex
	names map[string]string // run id → A, B, …
}

func (tl *timeline) setName(runID, name string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.names[runID] = name
}

func (tl *timeline) name(runID string) string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if n, ok := tl.names[runID]; ok {
		return n
	}
	return runID
}

// say prints one line with the time since the start.
func (tl *timeline) say(format string, args ...any) {
	tl.print(fmt.Sprintf("%6.2fs  %s\n", time.Since(tl.start).Seconds(), fmt.Sprintf(format, args...)))
}

// print writes s; what several goroutines print never interleaves.
func (tl *timeline) print(s string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	io.WriteString(tl.w, s)
}

// follow prints the events of a run until ctx ends or the run settles.
func (tl *timeline) follow(ctx context.Context, rt *host.Runtime, runID string, done chan<- struct{}) {
	defer close(done)
	var seq int64
	for {
		evs, more := rt.Events(runID, seq)
		for _, e := range evs {
			seq = e.Seq
			n := tl.name(runID)
			switch e.Type {
			case host.EventStarted:
				tl.say("run %s started (attempt %s)", n, e.Data["attempt"])
			case host.EventStepStarted:
				tl.say("run %s: step boundary, step %s begins", n, e.Data["step"])
			case host.EventToolCall:
				tl.say("run %s: calls tool %s", n, e.Data["tool"])
			case host.EventInputTaken:
				tl.say("run %s: took input %s of run %s into its prompt (nothing written yet)", n, e.Data["input_message_id"], tl.name(e.Data["from_run_id"]))
			case host.EventTerminal:
				tl.say("run %s: terminal commit, %s", n, e.Data["reason"])
				return
			case host.EventAbsorbed:
				tl.say("run %s: absorbed in the same commit, pointer absorbed_into_run_id -> %s", n, tl.name(e.Data["into_run_id"]))
				return
			}
		}
		select {
		case <-more:
		case <-ctx.Done():
			return
		}
	}
}

// demo plays the absorbed-input story twice over the store opened by open:
// once straight through, once with a crash between the injection and the
// answer.
func demo(ctx context.Context, w io.Writer, d driver.Driver, pol policy.Policy, restart func() (driver.Driver, error)) error {
	m, err := model.NewScripted(demoScript)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	newRT := func(d driver.Driver) (*host.Runtime, error) {
		return host.New(ctx, host.Config{Driver: d, Policy: pol, Model: m, Tools: []model.Tool{readThreadTool{}}, Logger: quiet})
	}
	tl := &timeline{w: w, start: time.Now(), names: map[string]string{}}
	first, second := "summarise this thread", "actually, in bullet points"

	tl.print(fmt.Sprintf("Part 1: a refinement arrives while the first run works (policy %s)\n\n", pol.Manifest().Name))
	rt, err := newRT(d)
	if err != nil {
		return err
	}
	tA, tB, err := playTwoInputs(ctx, tl, rt, "demo-1", first, second)
	if err != nil {
		return err
	}
	rA, err := rt.Wait(ctx, tA.RunID)
	if err != nil {
		return err
	}
	rB, err := rt.Wait(ctx, tB.RunID)
	if err != nil {
		return err
	}
	tl.say("ticket of A resolves: answered by %s: %q", tl.name(rA.AnsweredByRunID), answerOf(rA))
	tl.say("ticket of B resolves: answered by %s: %q", tl.name(rB.AnsweredByRunID), answerOf(rB))
	if rA.Answer == nil || rB.Answer == nil || rA.Answer.ID != rB.Answer.ID {
		return errors.New("the two tickets did not resolve to the same answer")
	}
	b, _ := rt.Run(ctx, tB.RunID)
	tl.say("run B is %s/%s, absorbed_into_run_id=%s, no answer of its own", b.State, b.TerminalReason, tl.name(b.AbsorbedIntoRunID))

	tl.print("\nPart 2: the host stops after the injection, before the answer\n\n")
	tA, tB, err = playTwoInputs(ctx, tl, rt, "demo-2", first, second)
	if err != nil {
		return err
	}
	crash, cancel := context.WithCancel(ctx)
	cancel()
	rep, err := rt.Close(crash)
	if err != nil {
		return err
	}
	tl.say("host stopped: settled=%v, left for recovery: active %v, queued %v", rep.Settled, names(tl, rep.Abandoned), names(tl, rep.Queued))
	a, _ := rt.Run(ctx, tA.RunID)
	b, _ = rt.Run(ctx, tB.RunID)
	tl.say("durable state: A %s with inputs %d, B %s: no absorption was committed", a.State, len(a.InputMessageIDs), b.State)
	if d, err = restart(); err != nil {
		return err
	}
	rt, err = newRT(d)
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())
	tl.say("host restarted: epoch %s recovered %d run(s)", rt.Epoch(), rt.Stats().Recovered)
	for _, tk := range []*host.Ticket{tA, tB} {
		done := make(chan struct{})
		go tl.follow(ctx, rt, tk.RunID, done)
		res, err := rt.Wait(ctx, tk.RunID)
		<-done
		if err != nil {
			return err
		}
		if res.Answer == nil {
			return fmt.Errorf("run %s was left without an answer", tl.name(tk.RunID))
		}
		tl.say("ticket of %s resolves: answered by %s: %q", tl.name(tk.RunID), tl.name(res.AnsweredByRunID), res.Answer.Content)
	}
	tl.print("\nNothing accepted was lost: every input has an answer.\n")
	return nil
}

// playTwoInputs submits the first input, and the second one while the first
// run is in its first step; it returns once the first run took the second.
func playTwoInputs(ctx context.Context, tl *timeline, rt *host.Runtime, thread, first, second string) (*host.Ticket, *host.Ticket, error) {
	tA, err := rt.Submit(ctx, thread, first, host.SubmitOptions{IdempotencyKey: thread + "-a"})
	if err != nil {
		return nil, nil, err
	}
	tl.setName(tA.RunID, "A")
	tl.say("submitted %q on thread %s: run A admitted (idle thread, no policy asked)", first, thread)
	doneA := make(chan struct{})
	go tl.follow(ctx, rt, tA.RunID, doneA)
	if err := waitEvent(ctx, rt, tA.RunID, host.EventStepStarted); err != nil {
		return nil, nil, err
	}
	tB, err := rt.Submit(ctx, thread, second, host.SubmitOptions{IdempotencyKey: thread + "-b"})
	if err != nil {
		return nil, nil, err
	}
	tl.setName(tB.RunID, "B")
	evs, _ := rt.Events(tB.RunID, 0)
	decision := "?"
	if len(evs) > 0 {
		decision = evs[0].Data["decision"]
	}
	tl.say("submitted %q: run B admitted durably as a queued run; policy decided %s", second, decision)
	doneB := make(chan struct{})
	go tl.follow(ctx, rt, tB.RunID, doneB)
	if err := waitEvent(ctx, rt, tA.RunID, host.EventInputTaken); err != nil {
		return nil, nil, fmt.Errorf("run A never took the second input: %w", err)
	}
	go func() { <-doneA; <-doneB }()
	return tA, tB, nil
}

func waitEvent(ctx context.Context, rt *host.Runtime, runID string, typ host.EventType) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var seq int64
	for {
		evs, more := rt.Events(runID, seq)
		for _, e := range evs {
			seq = e.Seq
			if e.Type == typ {
				return nil
			}
		}
		select {
		case <-more:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s of run %s: %w", typ, runID, ctx.Err())
		}
	}
}

func answerOf(r host.Result) string {
	if r.Answer == nil {
		return ""
	}
	return r.Answer.Content
}

func names(tl *timeline, ids []string) string {
	var out []string
	for _, id := range ids {
		out = append(out, tl.name(id))
	}
	return "[" + strings.Join(out, " ") + "]"
}

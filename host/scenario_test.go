package host_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
)

// The scenarios S1-S14 are described in docs/design.md#scenarios.

func forEachDriver(t *testing.T, fn func(t *testing.T, d driver.Driver)) {
	for _, name := range sortedKeys(driverFactories) {
		mk := driverFactories[name]
		t.Run(name, func(t *testing.T) {
			d := mk(t)
			fn(t, d)
		})
	}
}

// startS1 plays the start of S1: a is in its first step when b arrives with
// inject, and A takes b at its next boundary.
func startS1(h *harness) (tA, tB *host.Ticket) {
	h.needSteps()
	tA = h.submit("T", "summarise this thread", "ka", "")
	h.inFirstModelStep() // step 0's boundary has passed
	tB = h.submit("T", "actually, in bullet points", "kb", "inject")
	h.release() // step 0 calls the tool; at the boundary A takes b
	h.waitEvent(tA.RunID, host.EventInputTaken, "input_message_id", tB.InputMessageID)
	return tA, tB
}

func TestS1AbsorbedIntoCompletingRun(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver.Driver) {
		h := newHarness(t, d, hintPolicy{}, twoSteps)
		tA, tB := startS1(h)
		h.release() // step 1 answers
		rA, rB := h.wait(tA.RunID), h.wait(tB.RunID)
		want := "summarise this thread | actually, in bullet points"
		if answer(rA) != want || answer(rB) != want || rB.AnsweredByRunID != tA.RunID {
			t.Fatalf("A: %+v\nB: %+v", rA, rB)
		}
		a, b := h.run(tA.RunID), h.run(tB.RunID)
		if a.State != record.StateCompleted || !slices.Equal(a.InputMessageIDs, []string{tA.InputMessageID, tB.InputMessageID}) {
			t.Fatalf("A = %+v", a)
		}
		if b.State != record.StateSuperseded || b.TerminalReason != record.ReasonAbsorbed || b.AbsorbedIntoRunID != a.ID || h.hasMessage("T", b.AssistantMessageID) {
			t.Fatalf("B = %+v", b)
		}
		// Thread history: what the model saw, in that order: a, A's tool
		// exchange, b (taken at the boundary after it), and the answer.
		hist, _ := h.rt.History(context.Background(), "T")
		var got []string
		for _, m := range hist {
			got = append(got, string(m.Role)+":"+m.ID)
		}
		wantHist := []string{"user:" + tA.InputMessageID, "assistant:" + hist[1].ID, "tool:" + hist[2].ID, "user:" + tB.InputMessageID, "assistant:" + a.AssistantMessageID}
		if !slices.Equal(got, wantHist) {
			t.Fatalf("history %v, want %v", got, wantHist)
		}
		// S10: the same key again returns the same admission; with other
		// content it is refused.
		again := h.submit("T", "actually, in bullet points", "kb", "inject")
		if !again.Duplicate || again.RunID != tB.RunID {
			t.Fatalf("retry = %+v", again)
		}
		if _, err := h.rt.Submit(context.Background(), "T", "something else", host.SubmitOptions{IdempotencyKey: "kb"}); !errors.Is(err, runstate.ErrKeyReused) {
			t.Fatalf("key reused: %v", err)
		}
		// S10 after a restart: b's key returns A's answer.
		h.closeNow()
		h2 := newHarness(t, d, hintPolicy{}, twoSteps)
		retry := h2.submit("T", "actually, in bullet points", "kb", "")
		if r := h2.wait(retry.RunID); !retry.Duplicate || r.AnsweredByRunID != tA.RunID || answer(r) != want {
			t.Fatalf("after restart: %+v %+v", retry, r)
		}
	})
}

// S2 (and the close half of S3): close after A took b, before A answers.
func TestS2CloseBetweenTakeAndAnswer(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver.Driver) {
		h := newHarness(t, d, hintPolicy{}, twoSteps)
		tA, tB := startS1(h)
		h.waitEvent(tA.RunID, host.EventStepStarted, "step", "1")
		rep := h.closeNow()
		if rep.Settled || !slices.Equal(rep.Abandoned, []string{tA.RunID}) || !slices.Equal(rep.Queued, []string{tB.RunID}) {
			t.Fatalf("close report %+v", rep)
		}
		if a, b := h.run(tA.RunID), h.run(tB.RunID); a.State != record.StateActive || b.State != record.StateQueued || len(a.InputMessageIDs) != 1 {
			t.Fatalf("after close: A %+v, B %+v", a, b)
		}
		if _, err := h.rt.Submit(context.Background(), "T", "late", host.SubmitOptions{}); !errors.Is(err, host.ErrClosed) {
			t.Fatalf("submit after close: %v", err)
		}
		if b := h.run(tB.RunID); b.TakenBy != tA.RunID {
			t.Fatalf("after close: B was not durably taken by A: %+v", b)
		}
		// A resumes where it stopped, with the input it took: its step 0
		// (the model's call and the tool's result) is not made again, and
		// only its last step remains.
		h2 := newHarness(t, d, hintPolicy{}, twoSteps)
		h2.release()
		want := "summarise this thread | actually, in bullet points"
		rA, rB := h2.wait(tA.RunID), h2.wait(tB.RunID)
		if answer(rA) != want || rB.AnsweredByRunID != tA.RunID {
			t.Fatalf("after restart: A %+v, B %+v", rA, rB)
		}
		if a := h2.run(tA.RunID); a.Attempt != 2 {
			t.Fatalf("A's attempt after recovery = %d", a.Attempt)
		}
		if st := h2.rt.Stats(); st.StepsResumed == 0 {
			t.Fatalf("A did not resume from its steps: %+v", st)
		}
		retry := h2.submit("T", "actually, in bullet points", "kb", "")
		if r := h2.wait(retry.RunID); answer(r) != want {
			t.Fatalf("retry of b's key: %+v", r)
		}
	})
}

func TestS4NoSkippingTheQueue(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver.Driver) {
		h := newHarness(t, d, hintPolicy{}, twoSteps)
		tA := h.submit("T", "a", "", "")
		h.waitEvent(tA.RunID, host.EventStepStarted, "step", "0")
		tB := h.submit("T", "b", "", "queue")
		tC := h.submit("T", "c", "", "inject")
		h.releaseN(6)
		for tk, want := range map[*host.Ticket]string{tA: "a", tB: "b", tC: "c"} {
			if r := h.wait(tk.RunID); answer(r) != want || r.AnsweredByRunID != tk.RunID {
				t.Fatalf("%s: %+v, want answer %q", tk.RunID, r, want)
			}
		}
		if b, c := h.run(tB.RunID), h.run(tC.RunID); b.EndSeq >= c.EndSeq {
			t.Fatal("C answered before B")
		}
	})
}

func TestS5CoalescedBeforeLastBoundary(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver.Driver) {
		h := newHarness(t, d, hintPolicy{}, twoSteps)
		h.needSteps()
		tA := h.submit("T", "a", "", "")
		h.inFirstModelStep() // step 0's boundary has passed
		tB := h.submit("T", "b", "kb", "inject")
		tC := h.submit("T", "c", "kc", "inject+coalesce")
		if tC.RunID != tB.RunID {
			t.Fatalf("c did not join B: %+v", tC)
		}
		h.releaseN(2)
		rA := h.wait(tA.RunID)
		for _, tk := range []*host.Ticket{tB, tC} {
			if r := h.wait(tk.RunID); r.AnsweredByRunID != tA.RunID || answer(r) != "a | b | c" {
				t.Fatalf("ticket %+v: %+v", tk, r)
			}
		}
		if answer(rA) != "a | b | c" || len(h.run(tA.RunID).InputMessageIDs) != 3 {
			t.Fatalf("A: %+v", rA)
		}
	})
}

func TestS6CoalescedAfterLastBoundary(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver.Driver) {
		h := newHarness(t, d, hintPolicy{}, twoSteps)
		tA, tB := startS1(h)
		h.waitEvent(tA.RunID, host.EventStepStarted, "step", "1") // the last boundary has passed
		// A took B durably: the new input does not coalesce into it (it
		// would make the take stale, and b be answered twice), it gets a
		// run of its own.
		tC := h.submit("T", "shorter", "kc", "inject+coalesce")
		if tC.RunID == tB.RunID {
			t.Fatal("c joined B, which A took")
		}
		h.release()
		rA, rB := h.wait(tA.RunID), h.wait(tB.RunID)
		want := "summarise this thread | actually, in bullet points"
		if answer(rA) != want || rB.AnsweredByRunID != tA.RunID {
			t.Fatalf("A: %+v\nB: %+v", rA, rB)
		}
		h.releaseN(2)
		rC := h.wait(tC.RunID)
		if rC.AnsweredByRunID != tC.RunID || answer(rC) != "shorter" {
			t.Fatalf("C: %+v", rC)
		}
		if h.rt.Stats().DroppedAbsorbs != 0 {
			t.Fatalf("stats: %+v", h.rt.Stats())
		}
	})
}

func TestS7FailedRunAbsorbsNothing(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver.Driver) {
		script := twoSteps
		script.When = []model.ScriptCase{{Input: "summarise", Steps: []model.ScriptStep{
			{Tool: &model.ScriptTool{Name: "lookup"}}, {Fail: "model unavailable"},
		}}}
		h := newHarness(t, d, hintPolicy{}, script)
		tA, tB := startS1(h)
		h.release()
		rA := h.wait(tA.RunID)
		if rA.State != record.StateFailed || rA.Answer != nil || rA.Error == "" {
			t.Fatalf("A: %+v", rA)
		}
		if len(h.run(tA.RunID).InputMessageIDs) != 1 {
			t.Fatal("a failed run absorbed an input")
		}
		h.releaseN(2)
		rB := h.wait(tB.RunID)
		if rB.AnsweredByRunID != tB.RunID || !strings.Contains(answer(rB), "actually, in bullet points") {
			t.Fatalf("B: %+v", rB)
		}
	})
}

func TestS8Interrupt(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver.Driver) {
		h := newHarness(t, d, hintPolicy{}, twoSteps)
		tA := h.submit("T", "write a poem", "", "")
		h.waitEvent(tA.RunID, host.EventStepStarted, "step", "0")
		tB := h.submit("T", "stop, write a story instead", "", "interrupt")
		rA := h.wait(tA.RunID)
		a := h.run(tA.RunID)
		if a.State != record.StateInterrupted || a.TerminalReason != record.ReasonInterrupted || rA.Answer != nil || h.hasMessage("T", a.AssistantMessageID) {
			t.Fatalf("A: %+v", a)
		}
		h.releaseN(2)
		if rB := h.wait(tB.RunID); rB.AnsweredByRunID != tB.RunID || !strings.Contains(answer(rB), "story") {
			t.Fatalf("B: %+v", rB)
		}
		// The interrupted run left no tool call without its result.
		hist, _ := h.rt.History(context.Background(), "T")
		for _, m := range hist {
			if m.RunID == tA.RunID && m.Role != record.RoleUser {
				t.Fatalf("the interrupted run wrote %+v", m)
			}
		}
	})
}

func TestS9Reject(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver.Driver) {
		h := newHarness(t, d, hintPolicy{}, twoSteps)
		tA := h.submit("T", "a", "", "")
		h.waitEvent(tA.RunID, host.EventStepStarted, "step", "0")
		_, err := h.rt.Submit(context.Background(), "T", "b", host.SubmitOptions{IdempotencyKey: "kb", Hint: "reject"})
		if !errors.Is(err, runstate.ErrBusy) {
			t.Fatalf("reject: %v", err)
		}
		if n := len(h.messages("T")); n != 1 {
			t.Fatalf("a rejected input wrote something: %d messages", n)
		}
		h.releaseN(2)
		h.wait(tA.RunID)
		tB := h.submit("T", "b", "kb", "reject")
		if tB.Duplicate {
			t.Fatal("the rejected key came back as a duplicate")
		}
		h.releaseN(2)
		if r := h.wait(tB.RunID); answer(r) != "b" {
			t.Fatalf("B: %+v", r)
		}
	})
}

// S11: a policy that cannot inject gets no injection hook, and no boundary
// does injection work; the same run with a policy that can inject does.
func TestS11NoInjectionWork(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver.Driver) {
		queue := policy.Static{Name: "queue", Decision: runstate.Decision{Action: runstate.ActionQueue}}
		h := newHarness(t, d, queue, twoSteps)
		tA := h.submit("T", "a", "", "")
		h.waitEvent(tA.RunID, host.EventStepStarted, "step", "0")
		tB := h.submit("T", "b", "", "inject") // the hint is the policy's to read; this one queues
		h.releaseN(4)
		h.wait(tA.RunID)
		h.wait(tB.RunID)
		if n := h.rt.Stats().InjectBoundaries; n != 0 {
			t.Fatalf("%d boundaries did injection work under a policy that cannot inject", n)
		}
		h.closeNow()
		h2 := newHarness(t, d, hintPolicy{}, twoSteps)
		tC := h2.submit("U", "c", "", "")
		h2.releaseN(2)
		h2.wait(tC.RunID)
		want := int64(2)
		if !h2.rt.Stats().DurableSteps {
			want = 0 // without step records, injection takes nothing and has no hook
		}
		if n := h2.rt.Stats().InjectBoundaries; n != want {
			t.Fatalf("the injection hook ran at %d boundaries, want %d", n, want)
		}
	})
}

// S12 through the runtime's store: a failed commit carrying absorb is
// refused and writes nothing.
func TestS12FailedCommitWithAbsorbRefused(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver.Driver) {
		h := newHarness(t, d, hintPolicy{}, twoSteps)
		tA, tB := startS1(h)
		before, _ := d.LoadThread(context.Background(), "T")
		_, _, err := h.rt.Store().CommitTerminal(context.Background(), runstate.CommitTerminal{
			ThreadID: "T", RunID: tA.RunID, Owner: h.rt.Epoch(), Reason: record.ReasonFailed,
			Absorb: []runstate.AbsorbEntry{{RunID: tB.RunID, InputMessageIDs: []string{tB.InputMessageID}}},
		})
		after, _ := d.LoadThread(context.Background(), "T")
		if !errors.Is(err, runstate.ErrAbsorbNotCompleted) || after.Thread.Version != before.Thread.Version {
			t.Fatalf("err %v, version %d -> %d", err, before.Thread.Version, after.Thread.Version)
		}
		h.release()
		h.wait(tA.RunID)
	})
}

func TestS13CanceledBeforeCommit(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver.Driver) {
		h := newHarness(t, d, hintPolicy{}, twoSteps)
		tA, tB := startS1(h)
		// A took b: b cannot be withdrawn behind A's back.
		_, err := h.rt.Cancel(context.Background(), tB.RunID)
		var te *host.TakenError
		if !errors.Is(err, host.ErrTaken) || !errors.As(err, &te) || te.TakenBy != tA.RunID {
			t.Fatalf("cancel of a taken run: %v", err)
		}
		h.release()
		rA := h.wait(tA.RunID)
		a := h.run(tA.RunID)
		if a.State != record.StateCompleted || len(a.InputMessageIDs) != 2 || h.rt.Stats().DroppedAbsorbs != 0 {
			t.Fatalf("A: %+v %+v", a, rA)
		}
		if rB := h.wait(tB.RunID); rB.AnsweredByRunID != tA.RunID {
			t.Fatalf("B: %+v", rB)
		}
		// A queued run nobody took is canceled as before.
		tC := h.submit("T", "c", "", "")
		tD := h.submit("T", "d", "", "queue")
		if _, err := h.rt.Cancel(context.Background(), tD.RunID); err != nil {
			t.Fatal(err)
		}
		h.releaseN(2)
		h.wait(tC.RunID)
		if rD := h.wait(tD.RunID); rD.TerminalReason != record.ReasonCanceled || rD.Answer != nil {
			t.Fatalf("D: %+v", rD)
		}
	})
}

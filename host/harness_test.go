package host_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
)

// hintPolicy decides from the submission's hint: "queue", "inject",
// "interrupt", "reject", each optionally with "+coalesce". It declares every
// action, so the runtime installs the injection hook.
type hintPolicy struct{}

func (hintPolicy) Manifest() policy.Manifest {
	return policy.Manifest{Name: "hint", Version: "1", Actions: runstate.Actions}
}

func (hintPolicy) Decide(_ context.Context, req policy.Request) (runstate.Decision, error) {
	act, co, _ := strings.Cut(req.Input.Hint, "+")
	if act == "" {
		act = "queue"
	}
	return runstate.Decision{Action: runstate.Action(act), CoalescePending: co == "coalesce"}, nil
}

// lookupTool answers every call with "found".
type lookupTool struct{}

func (lookupTool) Spec() model.ToolSpec {
	return model.ToolSpec{Name: "lookup", Description: "looks things up"}
}
func (lookupTool) Call(context.Context, string) (string, error) {
	return "found", nil
}

// twoSteps: a tool call, then the echo answer. Every step waits for the
// test's gate, so the boundaries fall where the test says.
var twoSteps = model.Script{Steps: []model.ScriptStep{
	{Tool: &model.ScriptTool{Name: "lookup", Arguments: `{"q":"x"}`}},
	{Answer: "echo"},
}}

const timeout = 20 * time.Second

type harness struct {
	t    *testing.T
	d    driver.Driver
	rt   *host.Runtime
	gate chan struct{}
	// entered has a value once a model step waits at the gate: past the
	// step's prepareStep hooks, and so past its boundary's takes.
	entered chan struct{}
}

func newHarness(t *testing.T, d driver.Driver, pol policy.Policy, script model.Script) *harness {
	t.Helper()
	m, err := model.NewScripted(script)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, d: d, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	m.Sleep = func(ctx context.Context, _ time.Duration) error {
		select {
		case h.entered <- struct{}{}:
		default:
		}
		select {
		case <-h.gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	h.rt, err = host.New(context.Background(), host.Config{
		Driver: d, Policy: pol, Model: m, Tools: []model.Tool{lookupTool{}},
		MaxConcurrentRuns: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		h.rt.Close(ctx)
	})
	return h
}

// release lets one model step finish.
// needSteps skips a test of injection over a driver that keeps no step
// records: the runtime takes nothing by injection over it.
func (h *harness) needSteps() {
	h.t.Helper()
	if !h.rt.Stats().DurableSteps {
		h.t.Skip("the driver keeps no step records: injection takes nothing over it")
	}
}

func (h *harness) release() {
	h.t.Helper()
	select {
	case h.gate <- struct{}{}:
	case <-time.After(timeout):
		h.t.Fatal("no model step was waiting to be released")
	}
}

// inFirstModelStep waits until the harness's first model step waits at
// the gate. A step_started event comes before the step's boundary takes
// offered inputs: an input submitted after the event alone may still be
// taken at that boundary, not the next.
func (h *harness) inFirstModelStep() {
	h.t.Helper()
	select {
	case <-h.entered:
	case <-time.After(timeout):
		h.t.Fatal("no model step began")
	}
}

// releaseN lets n steps finish.
func (h *harness) releaseN(n int) {
	h.t.Helper()
	for range n {
		h.release()
	}
}

func (h *harness) submit(thread, content, key, hint string) *host.Ticket {
	h.t.Helper()
	tk, err := h.rt.Submit(context.Background(), thread, content, host.SubmitOptions{IdempotencyKey: key, Hint: hint})
	if err != nil {
		h.t.Fatalf("submit %q: %v", content, err)
	}
	return tk
}

// waitEvent waits until run has an event of type typ (with data k=v when
// given).
func (h *harness) waitEvent(runID string, typ host.EventType, kv ...string) {
	h.t.Helper()
	deadline := time.After(timeout)
	var seq int64
	for {
		evs, more := h.rt.Events(runID, seq)
		for _, e := range evs {
			seq = e.Seq
			if e.Type == typ && (len(kv) < 2 || e.Data[kv[0]] == kv[1]) {
				return
			}
		}
		select {
		case <-more:
		case <-deadline:
			h.t.Fatalf("run %s: no %s event %v", runID, typ, kv)
		}
	}
}

func (h *harness) wait(runID string) host.Result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := h.rt.Wait(ctx, runID)
	if err != nil {
		h.t.Fatalf("waiting for %s: %v", runID, err)
	}
	return res
}

func (h *harness) run(id string) record.Run {
	h.t.Helper()
	r, err := h.rt.Run(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func (h *harness) messages(thread string) []record.Message {
	h.t.Helper()
	msgs, err := h.rt.Store().Messages(context.Background(), thread)
	if err != nil {
		h.t.Fatal(err)
	}
	return msgs
}

// hasMessage reports whether the thread's history holds message id.
func (h *harness) hasMessage(thread, id string) bool {
	for _, m := range h.messages(thread) {
		if m.ID == id {
			return true
		}
	}
	return false
}

// closeNow closes the runtime without waiting for runs in flight.
func (h *harness) closeNow() host.CloseReport {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := h.rt.Close(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return rep
}

func answer(r host.Result) string {
	if r.Answer == nil {
		return "<none>"
	}
	return r.Answer.Content
}

package host_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/toolpolicy"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// askModel asks, at step 0, for one call of each tool in calls (ids c0,
// c1, ...), with arguments {"n":i}; at step 1 it answers with what it saw
// of the conversation after the inputs: each tool call with its arguments
// as the transcript shows them, and each tool result.
type askModel struct {
	calls []string
	gate  chan struct{} // when set, step 1 waits for it
	mu    sync.Mutex
	seen  [][]record.Message
}

func (m *askModel) Step(ctx context.Context, req model.Request, _ func(string)) (model.Response, error) {
	m.mu.Lock()
	m.seen = append(m.seen, slices.Clone(req.Messages))
	m.mu.Unlock()
	if req.Step == 0 {
		var out []record.ToolCall
		for i, name := range m.calls {
			out = append(out, record.ToolCall{ID: fmt.Sprintf("c%d", i), Name: name, Arguments: fmt.Sprintf(`{"n":%d}`, i)})
		}
		return model.Response{ToolCalls: out}, nil
	}
	if m.gate != nil {
		select {
		case <-m.gate:
		case <-ctx.Done():
			return model.Response{}, ctx.Err()
		}
	}
	var parts []string
	for _, msg := range req.Messages {
		switch msg.Role {
		case record.RoleUser:
			parts = append(parts, "user:"+msg.Content)
		case record.RoleAssistant:
			for _, c := range msg.ToolCalls {
				parts = append(parts, "call:"+c.ID+c.Arguments)
			}
		case record.RoleTool:
			parts = append(parts, "result:"+msg.ToolCallID+"="+msg.Content)
		}
	}
	return model.Response{Content: strings.Join(parts, " ")}, nil
}

// recTool logs every call it gets: its idempotency key and arguments.
type recTool struct {
	name string
	mu   sync.Mutex
	log  []string
}

func (t *recTool) Spec() model.ToolSpec { return model.ToolSpec{Name: t.name} }

func (t *recTool) Call(ctx context.Context, args string) (string, error) {
	c, _ := model.CallFrom(ctx)
	t.mu.Lock()
	t.log = append(t.log, c.IdempotencyKey()+" "+args)
	t.mu.Unlock()
	return t.name + "-ok", nil
}

func (t *recTool) calls() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.log)
}

// byName decides by tool name: "ask*" ask, "deny*" deny, the rest allow;
// "ask2*" needs two approvals.
var byName = toolpolicy.Func(func(_ context.Context, c toolpolicy.Call) (toolpolicy.Decision, error) {
	switch {
	case strings.HasPrefix(c.Tool, "ask2"):
		return toolpolicy.Decision{Verdict: toolpolicy.Ask, Prompt: "twice " + c.Tool + "?", Approvals: 2}, nil
	case strings.HasPrefix(c.Tool, "ask"):
		return toolpolicy.Decision{Verdict: toolpolicy.Ask, Prompt: "run " + c.Tool + "?", Approvals: 1}, nil
	case strings.HasPrefix(c.Tool, "deny"):
		return toolpolicy.Decision{Verdict: toolpolicy.Deny, Message: "no " + c.Tool}, nil
	}
	return toolpolicy.Decision{Verdict: toolpolicy.Allow}, nil
})

type approvalEnv struct {
	t     *testing.T
	d     driver.Driver
	m     *askModel
	tools map[string]*recTool
	rt    *host.Runtime
	cfg   host.Config
}

func newApprovalEnv(t *testing.T, d driver.Driver, calls []string, mod func(*host.Config)) *approvalEnv {
	t.Helper()
	e := &approvalEnv{t: t, d: d, m: &askModel{calls: calls}, tools: map[string]*recTool{}}
	var tools []model.Tool
	for _, n := range calls {
		if e.tools[n] == nil {
			e.tools[n] = &recTool{name: n}
			tools = append(tools, e.tools[n])
		}
	}
	e.cfg = host.Config{Driver: d, Policy: hintPolicy{}, Model: e.m, Tools: tools, ToolPolicy: byName, MaxConcurrentRuns: 2, Logger: quietLog}
	if mod != nil {
		mod(&e.cfg)
	}
	e.start()
	return e
}

func (e *approvalEnv) start() {
	e.t.Helper()
	rt, err := host.New(context.Background(), e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.rt = rt
	e.t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		rt.Close(ctx)
	})
}

func (e *approvalEnv) submit(thread, content, hint string) string {
	e.t.Helper()
	tk, err := e.rt.Submit(context.Background(), thread, content, host.SubmitOptions{Hint: hint})
	if err != nil {
		e.t.Fatal(err)
	}
	return tk.RunID
}

// waiting waits until run waits for exactly calls.
func (e *approvalEnv) waiting(runID string, calls ...string) []host.PendingApproval {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		pend, run, err := e.rt.PendingApprovals(context.Background(), runID)
		if err != nil {
			e.t.Fatal(err)
		}
		var ids []string
		for _, p := range pend {
			ids = append(ids, p.CallID)
		}
		if host.Waiting(run) && slices.Equal(ids, calls) {
			return pend
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("run %s: waits for %v (%s, pending %v), want %v", runID, ids, run.State, run.Pending, calls)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *approvalEnv) answer(runID, call string, a host.Approval) host.Answered {
	e.t.Helper()
	res, err := e.rt.Answer(context.Background(), runID, call, a)
	if err != nil {
		e.t.Fatalf("answer %s/%s: %v", runID, call, err)
	}
	return res
}

func (e *approvalEnv) result(runID string) host.Result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := e.rt.Wait(ctx, runID)
	if err != nil {
		e.t.Fatalf("waiting for %s: %v", runID, err)
	}
	return res
}

func approve(key string) host.Approval { return host.Approval{Action: record.AnswerApprove, Key: key} }

func key(run string, i int) string {
	return model.Call{RunID: run, Step: 0, Index: i, ID: fmt.Sprintf("c%d", i)}.IdempotencyKey()
}

func TestApprovalApproveRunsOnceWithItsKey(t *testing.T) {
	e := newApprovalEnv(t, memdriver.New(), []string{"ask_delete", "read"}, nil)
	run := e.submit("T", "clean up", "")
	pend := e.waiting(run, "c0")
	if p := pend[0]; p.Tool != "ask_delete" || p.Prompt != "run ask_delete?" || p.Arguments != `{"n":0}` || p.Approvals != 1 || p.Deadline.IsZero() {
		t.Fatalf("pending: %+v", p)
	}
	// The allowed call ran; the asked one did not.
	if got := e.tools["read"].calls(); len(got) != 1 {
		t.Fatalf("read calls %v", got)
	}
	if got := e.tools["ask_delete"].calls(); len(got) != 0 {
		t.Fatalf("asked call made before its answer: %v", got)
	}
	// Counted once the wait is committed, which the run shows first.
	eventually(t, "the wait counted", func() bool { return e.rt.Stats().Waits >= 1 })
	if st := e.rt.Stats(); st.Waits != 1 || st.ToolDecisions["ask"] != 1 || st.ToolDecisions["allow"] != 1 {
		t.Fatalf("stats %+v", st)
	}
	res := e.answer(run, "c0", approve("k1"))
	if !res.Decided || !res.Resumed || res.Duplicate || res.Step.Answer.Action != record.AnswerApprove {
		t.Fatalf("answer: %+v", res)
	}
	out := e.result(run)
	if out.Answer == nil || !strings.Contains(out.Answer.Content, "result:c0=ask_delete-ok") || !strings.Contains(out.Answer.Content, "result:c1=read-ok") {
		t.Fatalf("result %+v", out)
	}
	if got, want := e.tools["ask_delete"].calls(), []string{key(run, 0) + ` {"n":0}`}; !slices.Equal(got, want) {
		t.Fatalf("asked call made %v, want %v", got, want)
	}
	// The same answer again is the recorded one; another is refused.
	again := e.answer(run, "c0", approve("k1"))
	if !again.Duplicate || again.Step.ID != res.Step.ID {
		t.Fatalf("repeat: %+v", again)
	}
	_, err := e.rt.Answer(context.Background(), run, "c0", host.Approval{Action: record.AnswerReject, Key: "k2"})
	var ae *host.AnsweredError
	if !errors.As(err, &ae) || ae.Recorded.Action != record.AnswerApprove {
		t.Fatalf("another answer: %v", err)
	}
	if _, err := e.rt.Answer(context.Background(), run, "c1", approve("")); !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("answer to a call never asked about: %v", err)
	}
	if _, err := e.rt.Answer(context.Background(), "nope", "c0", approve("")); !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("answer to an unknown run: %v", err)
	}
	if _, err := e.rt.Answer(context.Background(), run, "c0", host.Approval{Action: "maybe"}); !errors.Is(err, host.ErrInvalid) {
		t.Fatalf("bad action: %v", err)
	}
	if got := e.tools["ask_delete"].calls(); len(got) != 1 {
		t.Fatalf("calls after the repeats: %v", got)
	}
	// The live events and those derived from the records tell the wait.
	for _, typ := range []host.EventType{host.EventWaiting, host.EventApproval, host.EventResumed} {
		e.waitEvent(run, typ)
	}
	evs, _, err := e.rt.RunEvents(context.Background(), run, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range evs {
		switch ev.Type {
		case host.EventWaiting:
			types = append(types, "waiting:"+ev.Data["call_ids"])
		case host.EventApproval:
			types = append(types, "approval:"+ev.Data["call_id"]+":"+ev.Data["action"]+":"+ev.Data["decided"])
		case host.EventResumed, host.EventTerminal:
			types = append(types, string(ev.Type))
		}
	}
	if want := []string{"waiting:c0", "approval:c0:approve:true", "resumed", "terminal"}; !slices.Equal(types, want) {
		t.Fatalf("durable events %v, want %v", types, want)
	}
}

// waitEvent waits until run has a live event of type typ.
func (e *approvalEnv) waitEvent(runID string, typ host.EventType) {
	e.t.Helper()
	deadline := time.After(timeout)
	var seq int64
	for {
		evs, more := e.rt.Events(runID, seq)
		for _, ev := range evs {
			seq = ev.Seq
			if ev.Type == typ {
				return
			}
		}
		select {
		case <-more:
		case <-deadline:
			e.t.Fatalf("run %s: no %s event", runID, typ)
		}
	}
}

func TestApprovalEditRejectRespondDeny(t *testing.T) {
	e := newApprovalEnv(t, memdriver.New(), []string{"ask_a", "ask_b", "ask_c", "deny_d"}, nil)
	run := e.submit("T", "go", "")
	e.waiting(run, "c0", "c1", "c2")
	if _, err := e.rt.Answer(context.Background(), run, "c0", host.Approval{Action: record.AnswerEdit, Arguments: `[1]`}); !errors.Is(err, host.ErrInvalid) {
		t.Fatalf("edit with an array: %v", err)
	}
	// What the canonical form would silently change is refused.
	for _, bad := range []string{
		`{"n": 1, "n": 42}`,
		`{"o": {"a": 1, "b": 2, "a": 3}}`,
		`{"l": [{"a": 1}, {"a": 1, "a": 1}]}`,
		"{\"n\": \"\xff\"}",
		`{"n": 1} {"m": 2}`,
		`{"n": `,
	} {
		if _, err := e.rt.Answer(context.Background(), run, "c0", host.Approval{Action: record.AnswerEdit, Arguments: bad}); !errors.Is(err, host.ErrInvalid) {
			t.Fatalf("edit with %q: %v", bad, err)
		}
	}
	if _, err := e.rt.Answer(context.Background(), run, "c2", host.Approval{Action: record.AnswerRespond}); !errors.Is(err, host.ErrInvalid) {
		t.Fatalf("respond without a message: %v", err)
	}
	// Answered one at a time: the run waits until the last.
	e.answer(run, "c0", host.Approval{Action: record.AnswerEdit, Arguments: `{ "n": 42 }`})
	e.waiting(run, "c1", "c2")
	e.answer(run, "c1", host.Approval{Action: record.AnswerReject, Message: "not today"})
	e.waiting(run, "c2")
	if got := e.tools["ask_a"].calls(); len(got) != 0 {
		t.Fatalf("edited call made before the run resumed: %v", got)
	}
	res := e.answer(run, "c2", host.Approval{Action: record.AnswerRespond, Message: "it is 42"})
	if !res.Resumed {
		t.Fatalf("last answer: %+v", res)
	}
	out := e.result(run)
	want := []string{`call:c0{"n":42}`, "result:c0=ask_a-ok", "result:c1=not today", "result:c2=it is 42", "result:c3=no deny_d"}
	for _, w := range want {
		if out.Answer == nil || !strings.Contains(out.Answer.Content, w) {
			t.Fatalf("answer %q lacks %q", answer(out), w)
		}
	}
	if got, want := e.tools["ask_a"].calls(), []string{key(run, 0) + ` {"n":42}`}; !slices.Equal(got, want) {
		t.Fatalf("edited call made %v, want %v", got, want)
	}
	for _, n := range []string{"ask_b", "ask_c", "deny_d"} {
		if got := e.tools[n].calls(); len(got) != 0 {
			t.Fatalf("%s made: %v", n, got)
		}
	}
	// The history's tool call shows what ran.
	hist, err := e.rt.History(context.Background(), "T")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(hist, func(m record.Message) bool { return len(m.ToolCalls) > 0 })
	if i < 0 || hist[i].ToolCalls[0].Arguments != `{"n":42}` {
		t.Fatalf("history %+v", hist)
	}
}

func TestApprovalTwoApprovals(t *testing.T) {
	e := newApprovalEnv(t, memdriver.New(), []string{"ask2_refund"}, nil)
	run := e.submit("T", "refund", "")
	e.waiting(run, "c0")
	if res := e.answer(run, "c0", approve("alice")); res.Decided {
		t.Fatalf("first of two approvals decided: %+v", res)
	}
	if res := e.answer(run, "c0", approve("alice")); !res.Duplicate {
		t.Fatalf("the same approval again counted: %+v", res)
	}
	pend := e.waiting(run, "c0")
	if pend[0].Approved != 1 || pend[0].Approvals != 2 {
		t.Fatalf("pending %+v", pend[0])
	}
	if res := e.answer(run, "c0", approve("bob")); !res.Resumed {
		t.Fatalf("second approval: %+v", res)
	}
	e.result(run)
	if got := e.tools["ask2_refund"].calls(); len(got) != 1 {
		t.Fatalf("calls %v", got)
	}
}

func TestApprovalWaitingRunReleasesItsWorker(t *testing.T) {
	// One worker: had a waiting run held it, no second run would start.
	e := newApprovalEnv(t, memdriver.New(), []string{"ask_x"}, func(c *host.Config) { c.MaxConcurrentRuns = 1 })
	var runs []string
	for i := range 3 {
		run := e.submit(fmt.Sprintf("T%d", i), "go", "")
		e.waiting(run, "c0")
		runs = append(runs, run)
	}
	for _, run := range runs {
		e.answer(run, "c0", approve("k"))
	}
	for _, run := range runs {
		if out := e.result(run); out.Answer == nil {
			t.Fatalf("run %s: %+v", run, out)
		}
	}
}

func TestApprovalNotWaitingAndNoStepsStore(t *testing.T) {
	e := newApprovalEnv(t, memdriver.New(), []string{"read"}, nil)
	run := e.submit("T", "read it", "")
	e.result(run)
	if _, err := e.rt.Answer(context.Background(), run, "c0", approve("")); !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("answer to a call never asked about: %v", err)
	}
	// A store that keeps no steps cannot hold a waiting run: refused at
	// start.
	_, err := host.New(context.Background(), host.Config{Driver: noSteps{memdriver.New()}, Model: e.m, ToolPolicy: byName, Logger: quietLog})
	if err == nil || !strings.Contains(err.Error(), "keeps none") {
		t.Fatalf("no-steps store with a tool policy: %v", err)
	}
}

// noSteps hides the driver's step records.
type noSteps struct{ driver.Driver }

func TestApprovalTimeout(t *testing.T) {
	e := newApprovalEnv(t, memdriver.New(), []string{"ask_x", "ask_y"}, func(c *host.Config) { c.ApprovalTimeout = 300 * time.Millisecond })
	run := e.submit("T", "slow", "")
	e.waiting(run, "c0", "c1")
	out := e.result(run) // no answer: the time limit rejects both
	if out.Answer == nil || !strings.Contains(out.Answer.Content, "result:c0=The call was not run: no answer within 300ms.") ||
		!strings.Contains(out.Answer.Content, "result:c1=The call was not run") {
		t.Fatalf("result %+v", out)
	}
	if got := e.tools["ask_x"].calls(); len(got) != 0 {
		t.Fatalf("timed-out call made: %v", got)
	}
	// Counted once each rejection is committed, which may be after the
	// run it resumed has ended.
	eventually(t, "2 approval time-outs counted", func() bool { return e.rt.Stats().ApprovalTimeouts >= 2 })
	if st := e.rt.Stats(); st.ApprovalTimeouts != 2 {
		t.Fatalf("timeouts %d", st.ApprovalTimeouts)
	}
}

func TestApprovalInterruptAndCancelWaitingRun(t *testing.T) {
	e := newApprovalEnv(t, memdriver.New(), []string{"ask_x"}, nil)
	run := e.submit("T", "first", "")
	e.waiting(run, "c0")
	next := e.submit("T", "stop that", "interrupt")
	out := e.result(run)
	if out.State != record.StateInterrupted {
		t.Fatalf("interrupted waiting run: %+v", out)
	}
	steps, err := e.rt.Steps(context.Background(), run, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	last := steps[len(steps)-1]
	if last.Kind != record.StepTool || last.Message.ToolCallID != "c0" || !strings.Contains(last.Message.Content, "not run") {
		t.Fatalf("steps end with %+v", last)
	}
	// The next run starts, and waits in turn; an operator cancels it.
	e.waiting(next, "c0")
	if r, err := e.rt.Cancel(context.Background(), next); err != nil || r.TerminalReason != record.ReasonCanceled || len(r.Pending) != 0 {
		t.Fatalf("cancel: %+v %v", r, err)
	}
	if _, err := e.rt.Answer(context.Background(), next, "c0", approve("")); !errors.Is(err, host.ErrNotWaiting) {
		t.Fatalf("answer to a canceled run: %v", err)
	}
	if got := e.tools["ask_x"].calls(); len(got) != 0 {
		t.Fatalf("calls %v", got)
	}
}

func TestApprovalInjectTakenAfterTheWait(t *testing.T) {
	e := newApprovalEnv(t, memdriver.New(), []string{"ask_x"}, nil)
	run := e.submit("T", "first", "")
	e.waiting(run, "c0")
	inj := e.submit("T", "also this", "inject")
	// The thread is busy: the injected input waits in its queued run.
	if r, err := e.rt.Run(context.Background(), inj); err != nil || r.State != record.StateQueued {
		t.Fatalf("injected run: %+v %v", r, err)
	}
	e.answer(run, "c0", approve("k"))
	out := e.result(run)
	if out.Answer == nil || !strings.Contains(out.Answer.Content, "result:c0=ask_x-ok user:also this") {
		t.Fatalf("result %q", answer(out))
	}
	if r, _ := e.rt.Run(context.Background(), inj); r.TerminalReason != record.ReasonAbsorbed {
		t.Fatalf("injected run %+v", r)
	}
}

func TestApprovalRestartWhileWaiting(t *testing.T) {
	d := memdriver.New()
	e := newApprovalEnv(t, d, []string{"ask_x"}, nil)
	run := e.submit("T", "survive", "")
	e.waiting(run, "c0")
	rep, err := e.rt.Close(context.Background())
	if err != nil || !rep.Settled || !slices.Equal(rep.Waiting, []string{run}) {
		t.Fatalf("close report %+v %v", rep, err)
	}
	e.start() // a new process on the same store
	pend := e.waiting(run, "c0")
	if pend[0].Tool != "ask_x" {
		t.Fatalf("pending after restart %+v", pend)
	}
	r, _ := e.rt.Run(context.Background(), run)
	if r.Attempt != 2 || r.Owner != e.rt.Epoch() {
		t.Fatalf("run after restart %+v", r)
	}
	e.answer(run, "c0", approve("k"))
	out := e.result(run)
	if out.Answer == nil || !strings.Contains(out.Answer.Content, "result:c0=ask_x-ok") {
		t.Fatalf("result %+v", out)
	}
	if got, want := e.tools["ask_x"].calls(), []string{key(run, 0) + ` {"n":0}`}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	// The model was called once per step: the restart called nothing.
	if n := len(e.m.seen); n != 2 {
		t.Fatalf("model calls %d", n)
	}
}

// Several hosts on one store: an answer given to a host that does not own
// the run wakes its owner, which resumes it; a waiting run whose host
// closed is taken over by another, still waiting, and answered there.
func TestApprovalSharedStore(t *testing.T) {
	for _, name := range sortedKeys(sharedStores) {
		t.Run(name, func(t *testing.T) {
			da, db := sharedStores[name](t)
			shared := func(c *host.Config) { c.LeaseTTL, c.PollInterval = longLease, 30*time.Millisecond }
			a := newApprovalEnv(t, da, []string{"ask_x"}, func(c *host.Config) { shared(c); c.HostName = "A" })
			b := newApprovalEnv(t, db, []string{"ask_x"}, func(c *host.Config) { shared(c); c.HostName = "B" })
			// Threads execute at their home among the live hosts (ADR 0143):
			// the answer goes to whichever host does not own the run.
			owner := func(run string) (own, other *approvalEnv) {
				t.Helper()
				r, err := a.rt.Run(context.Background(), run)
				if err != nil {
					t.Fatal(err)
				}
				if r.Owner == b.rt.Epoch() {
					return b, a
				}
				return a, b
			}
			run := a.submit("T", "one", "")
			a.waiting(run, "c0")
			own, other := owner(run)
			if res := other.answer(run, "c0", approve("k")); !res.Resumed {
				t.Fatalf("answer on the host not running it: %+v", res)
			}
			out := own.result(run)
			if out.Answer == nil || !strings.Contains(out.Answer.Content, "result:c0=ask_x-ok") {
				t.Fatalf("result %+v", out)
			}
			if got := own.tools["ask_x"].calls(); len(got) != 1 || len(other.tools["ask_x"].calls()) != 0 {
				t.Fatalf("calls by the owner %v, by the other %v: want one, by the owner", got, other.tools["ask_x"].calls())
			}

			// A second run waits; its host closes; the other takes it over.
			run2 := a.submit("T2", "two", "")
			a.waiting(run2, "c0")
			own, other = owner(run2)
			before := len(other.tools["ask_x"].calls())
			// The close report lists the run as waiting, unless the other
			// host took it over already: the lease is given up before the
			// report reads the store.
			if rep, err := own.rt.Close(context.Background()); err != nil || !slices.Equal(rep.Waiting, []string{run2}) {
				r, rerr := other.rt.Run(context.Background(), run2)
				if err != nil || len(rep.Waiting) != 0 || rerr != nil || r.Owner != other.rt.Epoch() {
					t.Fatalf("close the run's host: %+v %v; the run %+v %v", rep, err, r, rerr)
				}
			}
			eventually(t, "the other host takes the waiting run over", func() bool {
				r, err := other.rt.Run(context.Background(), run2)
				return err == nil && r.Owner == other.rt.Epoch() && host.Waiting(r)
			})
			other.answer(run2, "c0", approve("k"))
			if out := other.result(run2); out.Answer == nil || len(other.tools["ask_x"].calls()) != before+1 {
				t.Fatalf("after the takeover: %+v, calls %v", out, other.tools["ask_x"].calls())
			}
		})
	}
}

// lostArm fails the first GetRuns after a ReadSteps once armed: the final
// read of an approval time limit's pass, after it read the run and its
// steps. With loseCommit set, the next commit lands but its caller is told
// the store is unavailable, and from then every read fails until readsFail
// is cleared.
type lostArm struct {
	driver.Driver
	ss         driver.StepStore
	armed      atomic.Bool
	failGet    atomic.Bool
	failed     chan struct{}
	loseCommit atomic.Bool
	readsFail  atomic.Bool
}

var errInjected = fmt.Errorf("%w: injected", driver.ErrUnavailable)

func (d *lostArm) GetRuns(ctx context.Context, ids []string) ([]record.Run, error) {
	if d.readsFail.Load() {
		return nil, errInjected
	}
	if d.failGet.CompareAndSwap(true, false) {
		close(d.failed)
		return nil, errInjected
	}
	return d.Driver.GetRuns(ctx, ids)
}

func (d *lostArm) LoadThread(ctx context.Context, threadID string) (driver.ThreadSnapshot, error) {
	if d.readsFail.Load() {
		return driver.ThreadSnapshot{}, errInjected
	}
	return d.Driver.LoadThread(ctx, threadID)
}

func (d *lostArm) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	v, err := d.Driver.Commit(ctx, b)
	if err == nil && d.loseCommit.CompareAndSwap(true, false) {
		d.readsFail.Store(true)
		return 0, errInjected
	}
	return v, err
}

func (d *lostArm) CommitSteps(ctx context.Context, b driver.StepBatch) error {
	return d.ss.CommitSteps(ctx, b)
}

func (d *lostArm) ReadSteps(ctx context.Context, runID string, afterSeq int64, limit int) ([]record.Step, error) {
	if d.readsFail.Load() {
		return nil, errInjected
	}
	steps, err := d.ss.ReadSteps(ctx, runID, afterSeq, limit)
	if d.armed.CompareAndSwap(true, false) {
		d.failGet.Store(true)
	}
	return steps, err
}

func TestApprovalTimeoutSurvivesAFailedRead(t *testing.T) {
	// The timer fires before the deadline as the host's clock reads it
	// (the clock stands still); the pass's last read of the run fails.
	// The timer must be armed again all the same, and reject the call
	// once the clock passes the deadline.
	mem := memdriver.New()
	d := &lostArm{Driver: mem, ss: mem, failed: make(chan struct{})}
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	e := newApprovalEnv(t, d, []string{"ask_x"}, func(c *host.Config) {
		c.ApprovalTimeout = 200 * time.Millisecond
		c.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	})
	run := e.submit("T", "slow", "")
	e.waiting(run, "c0")
	d.armed.Store(true)
	select {
	case <-d.failed:
	case <-time.After(timeout):
		t.Fatal("the time limit never read the run")
	}
	clock.Add(int64(time.Hour))
	out := e.result(run)
	if out.Answer == nil || !strings.Contains(out.Answer.Content, "result:c0=The call was not run") {
		t.Fatalf("result %+v", out)
	}
	// Counted once each rejection is committed, which may be after the
	// run it resumed has ended.
	eventually(t, "1 approval time-outs counted", func() bool { return e.rt.Stats().ApprovalTimeouts >= 1 })
	if st := e.rt.Stats(); st.ApprovalTimeouts != 1 {
		t.Fatalf("timeouts %d", st.ApprovalTimeouts)
	}
}

func TestApprovalLostReplyRetriedAsDuplicateResumes(t *testing.T) {
	// The answer that decides the last pending call lands, but its reply
	// is lost and reading back fails: the caller is told the outcome is
	// unknown, and nothing executes the run. Its retry is a duplicate:
	// that must have the run executed all the same.
	mem := memdriver.New()
	d := &lostArm{Driver: mem, ss: mem}
	e := newApprovalEnv(t, d, []string{"ask_x"}, nil)
	run := e.submit("T", "go", "")
	e.waiting(run, "c0")
	d.loseCommit.Store(true)
	_, err := e.rt.Answer(context.Background(), run, "c0", approve("k1"))
	d.readsFail.Store(false)
	if err == nil {
		t.Fatal("the answer whose reply was lost succeeded")
	}
	if res := e.answer(run, "c0", approve("k1")); !res.Duplicate {
		t.Fatalf("retried answer: %+v", res)
	}
	if out := e.result(run); out.Answer == nil || !strings.Contains(out.Answer.Content, "result:c0=ask_x-ok") {
		t.Fatalf("result %+v", out)
	}
	if got := e.tools["ask_x"].calls(); len(got) != 1 {
		t.Fatalf("calls %v", got)
	}
}

// reuseModel calls ask_x with call id c1 at each of its first two steps,
// then answers.
type reuseModel struct{}

func (reuseModel) Step(_ context.Context, req model.Request, _ func(string)) (model.Response, error) {
	if req.Step < 2 {
		return model.Response{ToolCalls: []record.ToolCall{{ID: "c1", Name: "ask_x", Arguments: fmt.Sprintf(`{"step":%d}`, req.Step)}}}, nil
	}
	return model.Response{Content: "done"}, nil
}

func TestApprovalCallIDUsedAgainWaitsForItsOwnApproval(t *testing.T) {
	// A model may give a call of a later step the id of an earlier one:
	// the later call is asked about anew, and the earlier approval does not
	// make it.
	e := newApprovalEnv(t, memdriver.New(), []string{"ask_x"}, func(c *host.Config) { c.Model = reuseModel{} })
	run := e.submit("T", "twice", "")
	if pend := e.waiting(run, "c1"); pend[0].Step != 0 {
		t.Fatalf("pending %+v", pend)
	}
	e.answer(run, "c1", approve("k1"))
	deadline := time.Now().Add(timeout)
	for len(e.tools["ask_x"].calls()) < 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	pend := e.waiting(run, "c1")
	for pend[0].Step != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		pend = e.waiting(run, "c1")
	}
	if pend[0].Step != 1 || pend[0].Approved != 0 || pend[0].Arguments != `{"step":1}` {
		t.Fatalf("the second call: pending %+v", pend[0])
	}
	if got := e.tools["ask_x"].calls(); len(got) != 1 {
		t.Fatalf("calls before the second approval: %v", got)
	}
	// The first approval sent again with its key (its reply lost, say) is
	// that approval, recorded: it does not approve the later call, which
	// the person has not seen.
	if res := e.answer(run, "c1", approve("k1")); !res.Duplicate || res.Resumed || res.Step.Model != 0 {
		t.Fatalf("the first approval again: %+v", res)
	}
	if _, err := e.rt.Answer(context.Background(), run, "c1", host.Approval{Action: record.AnswerReject, Key: "k1"}); !errors.Is(err, host.ErrAnswered) {
		t.Fatalf("another answer with the first approval's key: %v", err)
	}
	if pend := e.waiting(run, "c1"); pend[0].Step != 1 || pend[0].Approved != 0 {
		t.Fatalf("the second call after the first approval again: pending %+v", pend[0])
	}
	if res := e.answer(run, "c1", approve("k2")); res.Duplicate || !res.Resumed {
		t.Fatalf("second approval: %+v", res)
	}
	// The run completes (ids are unique per model step, ADR 0149); both
	// calls were made, and the history holds each with its result.
	if out := e.result(run); out.State != record.StateCompleted || answer(out) != "done" {
		t.Fatalf("result %s %q (%s)", out.State, answer(out), out.Error)
	}
	if got := e.tools["ask_x"].calls(); len(got) != 2 || !strings.HasSuffix(got[1], `{"step":1}`) {
		t.Fatalf("calls %v", got)
	}
	checkTwoCallsC1(t, e)
}

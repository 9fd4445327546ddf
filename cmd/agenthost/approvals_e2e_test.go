package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/pgtest"
)

// The end-to-end tests of tool-call approval: real serve processes over
// HTTP with the standard tool-approval policy configured through
// tool_policy, the fake OpenAI-compatible model playing a plan and the MCP
// test server as the tool server (the rig of steps_e2e_test.go). The
// policy asks before every call of the echo tool and allows the rest.

// approvalPolicy is serve's tool_policy: ask before t_echo.
const approvalPolicy = `tool_policy:
  module: tool-approval
  config:
    rules:
      - {match: "*_echo", decision: ask, prompt: "Echo this?"}
    default: allow
`

// The run the approval tests play, for a tag:
//
//	model step 0: echo w-TAG   (the policy asks)
//	model step 1: add 1 2      (allowed)
//	model step 2: the answer, "done: RESULT | 3", RESULT what the model
//	              was given for the echo call
func askInput(tag string) string {
	b, _ := json.Marshal([][]map[string]any{
		{{"tool": planServer + "_echo", "arguments": map[string]string{"text": "w-" + tag}}},
		{{"tool": planServer + "_add", "arguments": map[string]int{"a": 1, "b": 2}}},
	})
	return "plan " + string(b)
}

// bothInput is a plan whose first step asks for two echo calls, both
// asked about: "done: x-TAG | y-TAG | 3".
func bothInput(tag string) string {
	echo := func(s string) map[string]any {
		return map[string]any{"tool": planServer + "_echo", "arguments": map[string]string{"text": s + "-" + tag}}
	}
	b, _ := json.Marshal([][]map[string]any{
		{echo("x"), echo("y")},
		{{"tool": planServer + "_add", "arguments": map[string]int{"a": 1, "b": 2}}},
	})
	return "plan " + string(b)
}

// events reads the run's event stream to its end (the run settled) and
// returns the types of its events.
func (s *server) events(run string) []string {
	s.t.Helper()
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Get("http://" + s.addr + "/v1/runs/" + run + "/events")
	if err != nil {
		s.t.Fatalf("events of %s: %v", run, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("events of %s: %v", run, err)
	}
	var types []string
	for _, line := range strings.Split(string(b), "\n") {
		if typ, ok := strings.CutPrefix(line, "event: "); ok {
			types = append(types, typ)
		}
	}
	return types
}

// askKey and addKey are the keys of the plan's calls, after the run's id.
const (
	askKey = "step0/0"
	addKey = "step1/0"
)

type pendingApproval struct {
	CallID    string          `json:"call_id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Prompt    string          `json:"prompt"`
}

type waitingRun struct {
	State            string            `json:"state"`
	Attempt          int               `json:"attempt"`
	PendingCallIDs   []string          `json:"pending_call_ids"`
	PendingApprovals []pendingApproval `json:"pending_approvals"`
}

// waitWaiting waits until the run waits for the approval of one call,
// and returns the run.
func (s *server) waitWaiting(run string) waitingRun {
	s.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var r waitingRun
		s.getJSON("/v1/runs/"+run, &r)
		if r.State == "waiting" && len(r.PendingApprovals) > 0 {
			return r
		}
		if r.State != "queued" && r.State != "active" && r.State != "waiting" {
			s.t.Fatalf("run %s is %s, want waiting", run, r.State)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("run %s not waiting within 2m: %+v", run, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// answerCall posts an answer to the run's pending call and returns the
// status and body.
func (s *server) answerCall(run, call, key string, answer map[string]any) (int, string) {
	s.t.Helper()
	body, _ := json.Marshal(answer)
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/v1/runs/"+run+"/approvals/"+call, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		s.t.Fatalf("answering %s/%s: %v", run, call, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// answerOK answers and fails the test unless the answer was taken.
func (s *server) answerOK(run, call, key string, answer map[string]any) {
	s.t.Helper()
	if code, body := s.answerCall(run, call, key, answer); code != http.StatusOK {
		s.t.Fatalf("answering %s/%s with %v: %d %s", run, call, answer, code, body)
	}
}

// postEmpty posts an empty body to path and returns the status and body.
func (s *server) postEmpty(path string) (int, string) {
	resp, err := (&http.Client{Timeout: time.Minute}).Post("http://"+s.addr+path, "application/json", nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// checkPending checks that the run waits for its echo call, as the model
// asked it, and that the call did not reach the tool.
func checkPending(t *testing.T, rg *stepsRig, run, tag string, w waitingRun) string {
	t.Helper()
	if len(w.PendingApprovals) != 1 {
		t.Fatalf("run %s waits for %d calls, want 1: %+v", run, len(w.PendingApprovals), w)
	}
	p := w.PendingApprovals[0]
	if p.Tool != planServer+"_echo" || p.Prompt != "Echo this?" || !jsonEqual(p.Arguments, fmt.Sprintf(`{"text":"w-%s"}`, tag)) {
		t.Errorf("run %s waits for %+v (arguments %s), want the echo call with its prompt", run, p, p.Arguments)
	}
	if calls := rg.toolCalls(run); len(calls) != 0 {
		t.Errorf("run %s waits, yet its calls reached the tool: %v", run, calls)
	}
	return p.CallID
}

func jsonEqual(a json.RawMessage, b string) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

// checkCalls checks the run's tool calls: the echo call made once with
// its key and the arguments echo (none when echo is empty), the add call
// once.
func checkCalls(t *testing.T, rg *stepsRig, what, run, echo string) {
	t.Helper()
	calls := rg.toolCalls(run)
	switch got := calls[askKey]; {
	case echo == "" && len(got) != 0:
		t.Errorf("%s: the call that was not approved reached the tool: %+v", what, got)
	case echo != "" && len(got) != 1:
		t.Errorf("%s: the approved call was made %d times, want once: %+v", what, len(got), got)
	case echo != "" && (!jsonEqual(json.RawMessage(got[0].Arguments), echo) || got[0].HeaderKey != got[0].Key):
		t.Errorf("%s: the approved call was made with %s (key %s, header %s), want %s with its key", what, got[0].Arguments, got[0].Key, got[0].HeaderKey, echo)
	}
	if n := len(calls[addKey]); n != 1 {
		t.Errorf("%s: the allowed call was made %d times, want once", what, n)
	}
}

// On badgerstore: a call the policy asks about does not reach the tool
// while the run waits; approved, it runs once with its key; edited, with
// the new arguments; rejected or answered in the tool's place, never; and
// a run that waits when serve is killed with SIGKILL still waits after
// the restart, and the approval given to the restarted host completes it.
func TestApprovalsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agenthost serve")
	}
	rg := newStepsRig(t)
	config := rg.config() + approvalPolicy + fmt.Sprintf("store: badgerstore\nstore_config:\n  dir: %s\n", filepath.Join(t.TempDir(), "badger"))
	s := startServe(t, config)
	runs := map[string]string{}
	calls := map[string]string{}
	for _, tag := range []string{"approve", "edit", "reject", "respond", "restart", "inflight", "cancel"} {
		runs[tag] = s.submit(tag, askInput(tag))
	}
	both := s.submit("both", bothInput("both"))
	for tag, run := range runs {
		calls[tag] = checkPending(t, rg, run, tag, s.waitWaiting(run))
	}

	// Two calls of one step asked about: answered one by one, the run
	// goes on when both are.
	w := s.waitWaiting(both)
	if len(w.PendingApprovals) != 2 {
		t.Fatalf("a step of two asked calls waits for %d: %+v", len(w.PendingApprovals), w)
	}
	first := w.PendingApprovals[0].CallID
	s.answerOK(both, first, "", map[string]any{"action": "approve"})
	w = s.waitWaiting(both)
	if len(w.PendingApprovals) != 1 || w.PendingApprovals[0].CallID == first {
		t.Fatalf("one of two calls answered: the run waits for %+v, want the other only", w)
	}
	if c := rg.toolCalls(both); len(c) != 0 {
		t.Errorf("one of two calls answered: calls reached the tool before the run went on: %v", c)
	}
	s.answerOK(both, w.PendingApprovals[0].CallID, "", map[string]any{"action": "approve"})
	if got := s.result(both); got != "done: x-both | y-both | 3" {
		t.Errorf("two calls approved: answer %q", got)
	}
	for _, k := range []string{"step0/0", "step0/1", addKey} {
		if n := len(rg.toolCalls(both)[k]); n != 1 {
			t.Errorf("two calls approved: the call with key %s/%s was made %d times, want once", both, k, n)
		}
	}

	s.answerOK(runs["approve"], calls["approve"], "ok-1", map[string]any{"action": "approve"})
	s.answerOK(runs["edit"], calls["edit"], "", map[string]any{"action": "edit", "arguments": map[string]string{"text": "edited"}})
	s.answerOK(runs["reject"], calls["reject"], "", map[string]any{"action": "reject", "message": "not this one"})
	s.answerOK(runs["respond"], calls["respond"], "", map[string]any{"action": "respond", "message": "forty-two"})

	if got := s.result(runs["approve"]); got != "done: w-approve | 3" {
		t.Errorf("approved: answer %q", got)
	}
	checkCalls(t, rg, "approved", runs["approve"], `{"text":"w-approve"}`)
	// The same answer again, by its key: the recorded one, nothing run.
	code, body := s.answerCall(runs["approve"], calls["approve"], "ok-1", map[string]any{"action": "approve"})
	if code != http.StatusOK || !strings.Contains(body, `"duplicate":true`) {
		t.Errorf("the approval again with its key: %d %s, want 200 and duplicate", code, body)
	}
	checkCalls(t, rg, "approved, answered again", runs["approve"], `{"text":"w-approve"}`)
	// Another answer with that key, or to a call already decided: refused.
	if code, body := s.answerCall(runs["approve"], calls["approve"], "ok-1", map[string]any{"action": "reject"}); code != http.StatusConflict {
		t.Errorf("another answer with the key: %d %s, want 409", code, body)
	}
	if code, body := s.answerCall(runs["approve"], "no-such-call", "", map[string]any{"action": "approve"}); code != http.StatusNotFound {
		t.Errorf("an answer to a call the run never asked about: %d %s, want 404", code, body)
	}
	// The events tell the wait and the answer.
	evs := strings.Join(s.events(runs["approve"]), " ")
	if !regexp.MustCompile(`waiting .*approval .*resumed .*tool_call .*terminal`).MatchString(evs) {
		t.Errorf("events of the approved run: %s, want waiting, approval, resumed, the tool call, terminal in order", evs)
	}

	if got := s.result(runs["edit"]); got != "done: edited | 3" {
		t.Errorf("edited: answer %q", got)
	}
	checkCalls(t, rg, "edited", runs["edit"], `{"text":"edited"}`)
	if got := s.result(runs["reject"]); !strings.HasPrefix(got, "done: ") || !strings.Contains(got, "not this one") || !strings.HasSuffix(got, " | 3") {
		t.Errorf("rejected: answer %q, want the rejection's message as the call's result", got)
	}
	checkCalls(t, rg, "rejected", runs["reject"], "")
	if got := s.result(runs["respond"]); got != "done: forty-two | 3" {
		t.Errorf("responded: answer %q", got)
	}
	checkCalls(t, rg, "responded", runs["respond"], "")

	// A waiting run canceled: it ends, its call never runs, an answer
	// comes too late, and the thread's next input is answered.
	if code, body := s.postEmpty("/v1/runs/" + runs["cancel"] + "/cancel"); code != http.StatusOK {
		t.Fatalf("cancel of a waiting run: %d %s", code, body)
	}
	var canceled apiRun
	s.getJSON("/v1/runs/"+runs["cancel"], &canceled)
	if canceled.State != "interrupted" {
		t.Errorf("a canceled waiting run is %s, want interrupted", canceled.State)
	}
	if code, body := s.answerCall(runs["cancel"], calls["cancel"], "", map[string]any{"action": "approve"}); code != http.StatusConflict {
		t.Errorf("approval of a canceled run's call: %d %s, want 409", code, body)
	}
	if got := s.result(s.submit("cancel", "next")); got != "echo: next" {
		t.Errorf("the input after a canceled waiting run: answer %q", got)
	}
	if c := rg.toolCalls(runs["cancel"]); len(c) != 0 {
		t.Errorf("a canceled waiting run's calls reached the tool: %v", c)
	}

	// Killed while a run waits, and while another's approved call is in
	// flight (held in the tool server). The first waits on the restarted
	// host, for the same call, and the approval given there completes it;
	// the second needs no second approval: its call is made again with
	// its key.
	hold := &killPoint{hold: "w-inflight"}
	rg.arm(hold)
	s.answerOK(runs["inflight"], calls["inflight"], "", map[string]any{"action": "approve"})
	hold.toolGate.wait(t, "the approved call")
	mark := rg.mark()
	s.crash()
	rg.openAll()
	s2 := startServe(t, config)
	if got := s2.result(runs["inflight"]); got != "done: w-inflight | 3" {
		t.Errorf("approved, in flight at the kill: answer %q", got)
	}
	switch got := rg.toolCalls(runs["inflight"])[askKey]; {
	case len(got) != 2:
		t.Errorf("approved, in flight at the kill: the call was made %d times, want twice (again after the restart): %+v", len(got), got)
	case got[0].Key != got[1].Key || got[0].Arguments != got[1].Arguments:
		t.Errorf("approved, in flight at the kill: the call made again differs: %+v", got)
	}
	if n := len(rg.toolCalls(runs["inflight"])[addKey]); n != 1 {
		t.Errorf("approved, in flight at the kill: the allowed call was made %d times, want once", n)
	}
	w = s2.waitWaiting(runs["restart"])
	if got := checkPending(t, rg, runs["restart"], "restart", w); got != calls["restart"] {
		t.Fatalf("after the restart the run waits for call %s, want %s", got, calls["restart"])
	}
	s2.answerOK(runs["restart"], calls["restart"], "", map[string]any{"action": "approve"})
	if c := rg.toolCalls(runs["restart"])[askKey]; len(c) > 1 {
		t.Errorf("approved after the restart: the call was made %d times", len(c))
	}
	if got := s2.result(runs["restart"]); got != "done: w-restart | 3" {
		t.Errorf("approved after the restart: answer %q", got)
	}
	checkCalls(t, rg, "approved after the restart", runs["restart"], `{"text":"w-restart"}`)
	if asked := rg.modelCalls(askInput("restart"), mark); asked[0] != 0 || asked[1] != 1 || asked[2] != 1 {
		t.Errorf("after the restart the model was asked for steps %v, want 1 and 2 once (step 0 was committed)", asked)
	}
}

// On pgstore with two hosts: a run that waits on one host is completed by
// the approval given to the other, while its owner lives, and when its
// owner was killed with SIGKILL (the run then moves to the other host).
func TestApprovalsAcrossHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agenthost serve")
	}
	dbURL := pgtest.URL(t)
	rg := newStepsRig(t)
	config := func(name string) string {
		return rg.config() + approvalPolicy +
			fmt.Sprintf("store: pgstore\nstore_url: %s\nlease_ttl: 6s\npoll_interval: 500ms\nhost_name: %s\n", dbURL, name)
	}
	// The runs start on a while it is the only host, so a owns their
	// threads; b joins after. A thread stays with its owner while it has
	// a run open (a waiting run is open), wherever it would go when idle.
	a := startServe(t, config("a"))
	alive, killed, later := a.submit("alive", askInput("alive")), a.submit("killed", askInput("killed")), a.submit("later", askInput("later"))
	aliveCall := checkPending(t, rg, alive, "alive", a.waitWaiting(alive))
	killedCall := checkPending(t, rg, killed, "killed", a.waitWaiting(killed))
	laterCall := checkPending(t, rg, later, "later", a.waitWaiting(later))
	b := startServe(t, config("b"))
	// The waiting is durable: the other host shows it too.
	checkPending(t, rg, alive, "alive", b.waitWaiting(alive))

	b.answerOK(alive, aliveCall, "", map[string]any{"action": "approve"})
	if got := b.result(alive); got != "done: w-alive | 3" {
		t.Errorf("approved on the other host: answer %q", got)
	}
	checkCalls(t, rg, "approved on the other host", alive, `{"text":"w-alive"}`)

	// The owner killed: one run approved at once, while the dead owner's
	// lease still lives; the other once the other host took it over.
	mark := rg.mark()
	a.crash()
	b.answerOK(killed, killedCall, "", map[string]any{"action": "approve"})
	b.waitLog(`recovered run" run=` + later)
	w := b.waitWaiting(later)
	if got := checkPending(t, rg, later, "later", w); got != laterCall || w.Attempt != 2 {
		t.Errorf("taken over, the run waits for call %s at attempt %d, want %s at 2", got, w.Attempt, laterCall)
	}
	b.answerOK(later, laterCall, "", map[string]any{"action": "approve"})
	if got := b.result(later); got != "done: w-later | 3" {
		t.Errorf("approved on the host that took the run over: answer %q", got)
	}
	checkCalls(t, rg, "approved on the host that took the run over", later, `{"text":"w-later"}`)
	if got := b.result(killed); got != "done: w-killed | 3" {
		t.Errorf("approved on the other host, the owner killed: answer %q", got)
	}
	checkCalls(t, rg, "approved on the other host, the owner killed", killed, `{"text":"w-killed"}`)
	if !regexp.MustCompile(`recovered run" run=` + killed).MatchString(b.log.String()) {
		t.Errorf("host b did not log that it took over run %s", killed)
	}
	if asked := rg.modelCalls(askInput("killed"), mark); asked[0] != 0 || asked[1] != 1 || asked[2] != 1 {
		t.Errorf("after the owner died the model was asked for steps %v, want 1 and 2 once (step 0 was committed)", asked)
	}
}

// A call nobody answers within approval_timeout is rejected: the run
// completes, the model told that no answer came, and the call never ran;
// also when the host was killed while the run waited.
func TestApprovalTimeLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agenthost serve")
	}
	rg := newStepsRig(t)
	const limit = 2 * time.Second
	config := rg.config() + approvalPolicy + fmt.Sprintf("approval_timeout: %s\nstore: badgerstore\nstore_config:\n  dir: %s\n",
		limit, filepath.Join(t.TempDir(), "badger"))
	s := startServe(t, config)
	began := time.Now()
	run := s.submit("late", askInput("late"))
	call := checkPending(t, rg, run, "late", s.waitWaiting(run))
	got := s.result(run)
	if waited := time.Since(began); waited < limit {
		t.Errorf("the call was rejected %v after the submission, before its limit of %v", waited, limit)
	}
	if !strings.HasPrefix(got, "done: ") || !strings.HasSuffix(got, " | 3") || strings.Contains(got, "w-late") {
		t.Errorf("answer %q, want the model told that no answer came, then the allowed call's 3", got)
	}
	checkCalls(t, rg, "past its time limit", run, "")
	if code, body := s.answerCall(run, call, "", map[string]any{"action": "approve"}); code != http.StatusConflict {
		t.Errorf("an approval past the limit: %d %s, want 409", code, body)
	}

	// The limit outlives the host: killed while the run waits, the
	// restarted host rejects the call at its limit.
	began = time.Now()
	run = s.submit("down", askInput("down"))
	checkPending(t, rg, run, "down", s.waitWaiting(run))
	s.crash()
	s = startServe(t, config)
	got = s.result(run)
	if waited := time.Since(began); waited < limit {
		t.Errorf("after a restart the call was rejected %v after the submission, before its limit of %v", waited, limit)
	}
	if !strings.HasPrefix(got, "done: ") || !strings.HasSuffix(got, " | 3") || strings.Contains(got, "w-down") {
		t.Errorf("after a restart: answer %q, want the model told that no answer came", got)
	}
	checkCalls(t, rg, "past its time limit, after a restart", run, "")
}

// deleteInput is a plan whose first step calls the delete tool:
// "done: deleted d-TAG | 3" once approved.
func deleteInput(tag string) string {
	b, _ := json.Marshal([][]map[string]any{
		{{"tool": planServer + "_delete", "arguments": map[string]string{"text": "d-" + tag}}},
		{{"tool": planServer + "_add", "arguments": map[string]int{"a": 1, "b": 2}}},
	})
	return "plan " + string(b)
}

// submitHint submits content with a hint to thread and returns the run.
func (s *server) submitHint(thread, content, hint string) string {
	s.t.Helper()
	body, _ := json.Marshal(map[string]string{"content": content, "hint": hint})
	resp, err := http.Post("http://"+s.addr+"/v1/threads/"+thread+"/inputs", "application/json", bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		RunID string `json:"run_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusAccepted {
		s.t.Fatalf("submit to %s: status %d, %v", thread, resp.StatusCode, err)
	}
	return out.RunID
}

// With a policy module from guests/ (the WAT example, sandboxed) as both
// the input policy and the tool policy: a call of a tool whose name holds
// "delete" waits for approval and, approved, runs once with its key; an
// input with hint stop interrupts a waiting run, whose call never runs and
// gets a result saying so, and is answered itself.
func TestApprovalsWasmPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agenthost serve")
	}
	module, err := filepath.Abs(filepath.Join("..", "..", "guests", "examples", "wat", "policy.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	rg := newStepsRig(t)
	s := startServe(t, rg.config()+fmt.Sprintf("policy: %[1]s\ntool_policy:\n  module: %[1]s\nstore: badgerstore\nstore_config:\n  dir: %[2]s\n",
		module, filepath.Join(t.TempDir(), "badger")))
	approve, stop := s.submit("wasm-approve", deleteInput("approve")), s.submit("wasm-stop", deleteInput("stop"))
	for _, run := range []string{approve, stop} {
		w := s.waitWaiting(run)
		if len(w.PendingApprovals) != 1 || w.PendingApprovals[0].Tool != planServer+"_delete" || w.PendingApprovals[0].Prompt != "Approve this deletion?" {
			t.Fatalf("run %s waits for %+v, want the delete call with the module's prompt", run, w.PendingApprovals)
		}
		if c := rg.toolCalls(run); len(c) != 0 {
			t.Errorf("run %s waits, yet its calls reached the tool: %v", run, c)
		}
	}

	w := s.waitWaiting(approve)
	s.answerOK(approve, w.PendingApprovals[0].CallID, "", map[string]any{"action": "approve"})
	if got := s.result(approve); got != "done: deleted d-approve | 3" {
		t.Errorf("approved: answer %q", got)
	}
	checkCalls(t, rg, "approved (wasm policy)", approve, `{"text":"d-approve"}`)

	w = s.waitWaiting(stop)
	next := s.submitHint("wasm-stop", "stop it", "stop")
	if got := s.result(next); got != "echo: stop it" {
		t.Errorf("the interrupting input: answer %q", got)
	}
	var r apiRun
	s.getJSON("/v1/runs/"+stop, &r)
	if r.State != "interrupted" {
		t.Errorf("the waiting run is %s after an interrupt, want interrupted", r.State)
	}
	if c := rg.toolCalls(stop); len(c) != 0 {
		t.Errorf("the interrupted run's calls reached the tool: %v", c)
	}
	answered := false
	for _, st := range s.steps(stop) {
		if st.Kind == "tool" && st.Message.ToolCallID == w.PendingApprovals[0].CallID {
			answered = true
		}
	}
	if !answered {
		t.Errorf("the interrupted run's pending call has no result in its steps: %+v", s.steps(stop))
	}
}

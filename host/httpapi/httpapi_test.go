package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/httpapi"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/internal/apitest"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// hintPolicy decides from the hint ("reject", "inject", ...; default queue).
type hintPolicy struct{}

func (hintPolicy) Manifest() policy.Manifest {
	return policy.Manifest{Name: "hint", Version: "1", Actions: runstate.Actions}
}

func (hintPolicy) Decide(_ context.Context, req policy.Request) (runstate.Decision, error) {
	if req.Input.Hint == "" {
		return runstate.Decision{Action: runstate.ActionQueue}, nil
	}
	return runstate.Decision{Action: runstate.Action(req.Input.Hint)}, nil
}

type server struct {
	*httptest.Server
	rt   *host.Runtime
	gate chan struct{}
	// entered receives once each time a gated model step starts waiting
	// for the gate (dropped when nobody reads it).
	entered chan struct{}
}

// newServer serves a runtime whose model steps each wait for the gate
// (release) when gated, and answer at once otherwise.
func newServer(t testing.TB, gated bool, opt httpapi.Options) *server {
	t.Helper()
	return newServerWith(t, gated, opt, model.Script{})
}

// newServerWith is newServer with a model script and its tools.
func newServerWith(t testing.TB, gated bool, opt httpapi.Options, script model.Script, tools ...model.Tool) *server {
	t.Helper()
	return newServerOn(t, memdriver.New(), gated, opt, script, tools...)
}

// newServerOn is newServerWith over the store driver d.
func newServerOn(t testing.TB, d driver.Driver, gated bool, opt httpapi.Options, script model.Script, tools ...model.Tool) *server {
	t.Helper()
	s := &server{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
	cfg := apitest.Config{Script: script}
	if gated {
		cfg.Sleep = func(ctx context.Context, _ time.Duration) error {
			select {
			case s.entered <- struct{}{}:
			default:
			}
			select {
			case <-s.gate:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	lat := &httpapi.CommitLatency{}
	cfg.Host = host.Config{Driver: d, Tools: tools, Policy: hintPolicy{}, ObserveCommit: lat.Observe}
	opt.CommitLatency = lat
	cfg.API = opt
	api := apitest.New(t, cfg)
	s.Server, s.rt = api.Server, api.Runtime
	return s
}

func (s *server) do(t testing.TB, method, path, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return v
}

func wantProblem(t *testing.T, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d (%s), want %d problem: %s", resp.StatusCode, resp.Header.Get("Content-Type"), status, body)
	}
	if p := decode[httpapi.Problem](t, body); p.Code != code || p.Status != status || p.Title == "" {
		t.Fatalf("problem %+v, want code %s", p, code)
	}
}

func TestSubmitAndResult(t *testing.T) {
	s := newServer(t, false, httpapi.Options{})
	resp, body := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"hello","metadata":{"k":"v"}}`, "Idempotency-Key", "key-1")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: %d %s", resp.StatusCode, body)
	}
	adm := decode[httpapi.Admission](t, body)
	if adm.RunID == "" || adm.InputMessageID == "" || adm.ThreadID != "T" {
		t.Fatalf("admission %+v", adm)
	}
	// The same key returns the same body.
	resp, again := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"hello","metadata":{"k":"v"}}`, "Idempotency-Key", "key-1")
	if resp.StatusCode != http.StatusAccepted || string(again) != string(body) {
		t.Fatalf("repeat: %d %s, first %s", resp.StatusCode, again, body)
	}
	resp, body = s.do(t, "GET", "/v1/runs/"+adm.RunID+"/result?wait=10s", "")
	res := decode[httpapi.Result](t, body)
	if resp.StatusCode != 200 || res.Answer == nil || res.Answer.Content != "hello" || res.AnsweredByRunID != adm.RunID || res.State != "completed" {
		t.Fatalf("result: %d %s", resp.StatusCode, body)
	}
	resp, body = s.do(t, "GET", "/v1/runs/"+adm.RunID, "")
	run := decode[httpapi.Run](t, body)
	if resp.StatusCode != 200 || run.ID != adm.RunID || run.State != "completed" || run.TerminalReason != "completed" || run.EndedAt == nil || !slices.Equal(run.InputMessageIDs, []string{adm.InputMessageID}) {
		t.Fatalf("run: %s", body)
	}
	resp, body = s.do(t, "GET", "/v1/threads/T/runs", "")
	if resp.StatusCode != 200 || !strings.Contains(string(body), adm.RunID) {
		t.Fatalf("thread runs: %s", body)
	}
	resp, body = s.do(t, "GET", "/v1/threads/T/messages", "")
	msgs := decode[struct{ Messages []httpapi.Message }](t, body).Messages
	if resp.StatusCode != 200 || len(msgs) != 2 || msgs[0].Role != "user" || msgs[1].Content != "hello" {
		t.Fatalf("messages: %s", body)
	}
	if resp, _ = s.do(t, "GET", "/healthz", ""); resp.StatusCode != 200 {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
	_, body = s.do(t, "GET", "/metrics", "")
	for _, want := range []string{`agenthost_admissions_total{decision="start"} 1`, `agenthost_runs_terminal_total{reason="completed"} 1`, "agenthost_store_commit_seconds_count", "agenthost_driver_restarts_total 0", "agenthost_policy_fallbacks_total 0", "agenthost_absorptions_total 0", "agenthost_absorb_entries_dropped_total 0"} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("metrics lack %q:\n%s", want, body)
		}
	}
	if strings.Contains(string(body), "agenthost_store_commit_seconds_count 0\n") {
		t.Fatalf("metrics count no commit:\n%s", body)
	}
}

// TestErrorCodes provokes every documented error code with a real request.
func TestErrorCodes(t *testing.T) {
	s := newServer(t, true, httpapi.Options{MaxBodyBytes: 1024})
	_, body := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"first"}`, "Idempotency-Key", "k1")
	adm := decode[httpapi.Admission](t, body)
	// busy: the thread is busy (the model waits) and the policy rejects.
	resp, body := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"second","hint":"reject"}`)
	wantProblem(t, resp, body, 409, "busy")
	// key_reused.
	resp, body = s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"other"}`, "Idempotency-Key", "k1")
	wantProblem(t, resp, body, 422, "key_reused")
	// bad_request: malformed, unknown fields, empty content, bad wait.
	for _, b := range []string{`{`, `[]`, `{"content":"x","extra":1}`, `{"content":""}`, `{"content":"x"} {"content":"y"}`, ``} {
		resp, body = s.do(t, "POST", "/v1/threads/T/inputs", b)
		wantProblem(t, resp, body, 400, "bad_request")
	}
	resp, body = s.do(t, "GET", "/v1/runs/"+adm.RunID+"/result?wait=soon", "")
	wantProblem(t, resp, body, 400, "bad_request")
	resp, body = s.do(t, "POST", "/v1/threads/"+strings.Repeat("t", 300)+"/inputs", `{"content":"x"}`)
	wantProblem(t, resp, body, 400, "bad_request")
	// too_large.
	resp, body = s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"`+strings.Repeat("x", 2000)+`"}`)
	wantProblem(t, resp, body, 413, "too_large")
	// not_found: unknown run, thread, route.
	for _, p := range []string{"/v1/runs/run_nope", "/v1/runs/run_nope/result", "/v1/runs/run_nope/events", "/v1/threads/nope/runs", "/v1/threads/nope/messages", "/v2/whatever"} {
		resp, body = s.do(t, "GET", p, "")
		wantProblem(t, resp, body, 404, "not_found")
	}
	resp, body = s.do(t, "POST", "/v1/runs/run_nope/cancel", "")
	wantProblem(t, resp, body, 404, "not_found")
	// Cancel: a queued run is canceled; an ended one is not queued.
	_, body = s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"later"}`)
	queued := decode[httpapi.Admission](t, body)
	resp, body = s.do(t, "POST", "/v1/runs/"+queued.RunID+"/cancel", "")
	if resp.StatusCode != 200 || decode[httpapi.Run](t, body).TerminalReason != "canceled" {
		t.Fatalf("cancel: %d %s", resp.StatusCode, body)
	}
	resp, body = s.do(t, "POST", "/v1/runs/"+queued.RunID+"/cancel", "")
	wantProblem(t, resp, body, 409, "not_queued")
	// A result not settled in time: 202 with the run.
	resp, body = s.do(t, "GET", "/v1/runs/"+adm.RunID+"/result?wait=10ms", "")
	if resp.StatusCode != 202 || decode[httpapi.Run](t, body).State != "active" {
		t.Fatalf("unsettled result: %d %s", resp.StatusCode, body)
	}
	s.gate <- struct{}{}
	// unauthorized is covered by TestToken.
}

func TestToken(t *testing.T) {
	s := newServer(t, false, httpapi.Options{Token: "s3cret"})
	resp, body := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"x"}`)
	wantProblem(t, resp, body, 401, "unauthorized")
	resp, body = s.do(t, "GET", "/metrics", "", "Authorization", "Bearer wrong")
	wantProblem(t, resp, body, 401, "unauthorized")
	if resp, _ := s.do(t, "GET", "/healthz", ""); resp.StatusCode != 200 {
		t.Fatal("healthz needs no token")
	}
	if resp, body := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"x"}`, "Authorization", "Bearer s3cret"); resp.StatusCode != 202 {
		t.Fatalf("with the token: %d %s", resp.StatusCode, body)
	}
	for addr, loop := range map[string]bool{"127.0.0.1:7070": true, "localhost:1": true, "[::1]:80": true, "0.0.0.0:7070": false, ":7070": false, "10.1.2.3:80": false} {
		if httpapi.IsLoopback(addr) != loop {
			t.Errorf("IsLoopback(%q) = %v", addr, !loop)
		}
	}
}

type sseEvent struct {
	id, typ, data string
}

func readEvents(t *testing.T, s *server, runID, lastID string) []sseEvent {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL+"/v1/runs/"+runID+"/events", nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			out = append(out, cur)
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
		}
	}
	return out
}

func TestEventsResumable(t *testing.T) {
	d := memdriver.New()
	s := newServerOn(t, d, true, httpapi.Options{}, model.Script{})
	_, body := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"hi"}`)
	adm := decode[httpapi.Admission](t, body)
	s.gate <- struct{}{} // the one step answers
	all := readEvents(t, s, adm.RunID, "")
	var types, ids []string
	last := 0
	for i, e := range all {
		types = append(types, e.typ)
		if e.typ == "step_started" || e.typ == "delta" || e.typ == "step_finished" {
			if e.id != "" {
				t.Fatalf("ephemeral event %d (%s) has id %s", i, e.typ, e.id)
			}
			continue
		}
		id, err := strconv.Atoi(e.id)
		if err != nil || id <= last {
			t.Fatalf("event %d (%s) has id %q after %d", i, e.typ, e.id, last)
		}
		last = id
		ids = append(ids, e.id)
	}
	// The scripted model streams its answer in one piece.
	want := []string{"admitted", "started", "step_started", "delta", "step_committed", "step_finished", "terminal"}
	if !slices.Equal(types, want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	// Resuming after the start gives the durable rest; the ephemeral
	// events are gone.
	resumed := func(s *server) []string {
		var got []string
		for _, e := range readEvents(t, s, adm.RunID, ids[1]) {
			got = append(got, e.typ+"@"+e.id)
		}
		return got
	}
	wantRest := []string{"step_committed@" + ids[2], "terminal@" + ids[3]}
	if got := resumed(s); !slices.Equal(got, wantRest) {
		t.Fatalf("resumed: %v, want %v", got, wantRest)
	}
	// An id past the end gives nothing: no event is invented.
	if rest := readEvents(t, s, adm.RunID, ids[3]); len(rest) != 0 {
		t.Fatalf("resumed after the terminal event: %+v", rest)
	}
	if rest := readEvents(t, s, adm.RunID, "99999999999"); len(rest) != 0 {
		t.Fatalf("resumed past the end: %+v", rest)
	}
	resp, b := s.do(t, "GET", "/v1/runs/"+adm.RunID+"/events", "", "Last-Event-ID", "x")
	wantProblem(t, resp, b, 400, "bad_request")
	// Another process over the same store (a restart, or another host)
	// gives the same events with the same ids.
	other := newServerOn(t, d, true, httpapi.Options{}, model.Script{})
	if got := resumed(other); !slices.Equal(got, wantRest) {
		t.Fatalf("resumed on another process: %v, want %v", got, wantRest)
	}
}

// TestOpenAPIMatchesRoutes checks openapi.json against the served routes.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	b, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			RequestBody any            `json:"requestBody"`
			Responses   map[string]any `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for p, ops := range doc.Paths {
		for m, op := range ops {
			documented = append(documented, strings.ToUpper(m)+" "+p)
			if _, ok := op.Responses["413"]; op.RequestBody != nil && !ok {
				t.Errorf("%s %s takes a body but lists no 413 (the body limit applies)", strings.ToUpper(m), p)
			}
		}
	}
	slices.Sort(documented)
	served := slices.Sorted(slices.Values(httpapi.Routes))
	if !slices.Equal(documented, served) {
		t.Fatalf("openapi.json documents\n  %v\nthe handler serves\n  %v", documented, served)
	}
}

// TestCancelActive: cancelling the active run ends it at once (its step is
// aborted through its context), canceled, and the next queued run starts.
func TestCancelActive(t *testing.T) {
	s := newServer(t, true, httpapi.Options{})
	_, body := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"first"}`)
	a := decode[httpapi.Admission](t, body)
	_, body = s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"second","hint":"queue"}`)
	b := decode[httpapi.Admission](t, body)
	deadline := time.Now().Add(time.Minute)
	for {
		_, body = s.do(t, "GET", "/v1/runs/"+a.RunID, "")
		if decode[httpapi.Run](t, body).State == "active" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run never active: %s", body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, body := s.do(t, "POST", "/v1/runs/"+a.RunID+"/cancel", "")
	if r := decode[httpapi.Run](t, body); resp.StatusCode != 200 || r.State != "interrupted" || r.TerminalReason != "canceled" {
		t.Fatalf("cancel: %d %s", resp.StatusCode, body)
	}
	s.gate <- struct{}{} // b's step answers: only b's, a's was aborted
	resp, body = s.do(t, "GET", "/v1/runs/"+b.RunID+"/result?wait=1m", "")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"second"`) {
		t.Fatalf("next run: %d %s", resp.StatusCode, body)
	}
	// The canceled run's input is not in the conversation.
	_, body = s.do(t, "GET", "/v1/threads/T/messages", "")
	if strings.Contains(string(body), `"first"`) {
		t.Fatalf("canceled input in the conversation: %s", body)
	}
}

// TestEventsKeepAlive: a silent stream gets a comment line every KeepAlive.
func TestEventsKeepAlive(t *testing.T) {
	s := newServer(t, true, httpapi.Options{KeepAlive: 50 * time.Millisecond})
	_, body := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"hi"}`)
	adm := decode[httpapi.Admission](t, body)
	resp, err := http.Get(s.URL + "/v1/runs/" + adm.RunID + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	comments := 0
	for sc.Scan() && comments < 2 {
		if sc.Text() == ": keep-alive" {
			comments++
		}
	}
	if comments < 2 {
		t.Fatalf("%d keep-alive comments before the stream ended (%v)", comments, sc.Err())
	}
	s.gate <- struct{}{}
}

// lookupTool answers every call with "found".
type lookupTool struct{}

func (lookupTool) Spec() model.ToolSpec                         { return model.ToolSpec{Name: "lookup"} }
func (lookupTool) Call(context.Context, string) (string, error) { return "found", nil }

// waitRun polls run id until ok holds for it.
func (s *server) waitRun(t *testing.T, id string, ok func(httpapi.Run) bool) httpapi.Run {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, body := s.do(t, "GET", "/v1/runs/"+id, "")
		r := decode[httpapi.Run](t, body)
		if ok(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: %s", id, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCancelTakenAndSteps: a queued run whose input the active run took
// cannot be canceled (409 taken, naming the taker); the taker's steps are
// readable, in order, page by page.
func TestCancelTakenAndSteps(t *testing.T) {
	script := model.Script{Steps: []model.ScriptStep{{Tool: &model.ScriptTool{Name: "lookup"}}, {Answer: "echo"}}}
	s := newServerWith(t, true, httpapi.Options{}, script, lookupTool{})
	_, body := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"question A"}`)
	a := decode[httpapi.Admission](t, body)
	// b must come while A's first model step runs: an input that comes
	// before it is taken at the run's first boundary instead.
	select {
	case <-s.entered:
	case <-time.After(time.Minute):
		t.Fatal("A's first model step never started")
	}
	_, body = s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"refine b","hint":"inject"}`)
	b := decode[httpapi.Admission](t, body)
	s.gate <- struct{}{} // step 0 calls the tool; at the boundary A takes b
	s.waitRun(t, b.RunID, func(r httpapi.Run) bool { return r.TakenBy == a.RunID })
	resp, body := s.do(t, "POST", "/v1/runs/"+b.RunID+"/cancel", "")
	wantProblem(t, resp, body, 409, "taken")
	if p := decode[httpapi.Problem](t, body); p.TakenBy != a.RunID {
		t.Fatalf("problem %+v, want taken_by %s", p, a.RunID)
	}
	s.gate <- struct{}{} // step 1 answers
	_, body = s.do(t, "GET", "/v1/runs/"+b.RunID+"/result?wait=1m", "")
	if res := decode[httpapi.Result](t, body); res.AnsweredByRunID != a.RunID || res.Answer == nil || res.Answer.Content != "question A | refine b" {
		t.Fatalf("b's result: %s", body)
	}
	var kinds []string
	after := "0"
	for {
		resp, body := s.do(t, "GET", "/v1/runs/"+a.RunID+"/steps?limit=3&after="+after, "")
		if resp.StatusCode != 200 {
			t.Fatalf("steps: %d %s", resp.StatusCode, body)
		}
		page := decode[struct {
			Steps      []httpapi.Step `json:"steps"`
			NextCursor string         `json:"next_cursor"`
		}](t, body)
		for _, st := range page.Steps {
			kinds = append(kinds, st.Kind)
		}
		if page.NextCursor == "" {
			break
		}
		after = page.NextCursor
	}
	if want := []string{"model", "tool", "take", "model"}; !slices.Equal(kinds, want) {
		t.Fatalf("steps %v, want %v", kinds, want)
	}
	resp, body = s.do(t, "GET", "/v1/runs/"+a.RunID+"/steps?limit=0", "")
	wantProblem(t, resp, body, 400, "bad_request")
	resp, body = s.do(t, "GET", "/v1/runs/nope/steps", "")
	wantProblem(t, resp, body, 404, "not_found")
}

// TestSubmitWait: a submission with ?wait= answers with the run's result
// when it settles in time (200), with the admission when it does not (202),
// the same for a retry with the same key; a bad wait admits nothing.
func TestSubmitWait(t *testing.T) {
	s := newServer(t, false, httpapi.Options{})
	resp, body := s.do(t, "POST", "/v1/threads/T/inputs?wait=30s", `{"content":"hello"}`, "Idempotency-Key", "key-1")
	res := decode[httpapi.SubmitResult](t, body)
	if resp.StatusCode != 200 || res.RunID == "" || res.InputMessageID == "" || res.ThreadID != "T" || res.State != "completed" ||
		res.AnsweredByRunID != res.RunID || res.Answer == nil || res.Answer.Content != "hello" {
		t.Fatalf("submit with wait: %d %s", resp.StatusCode, body)
	}
	// A retry with the same key: the same run, its answer again.
	resp, again := s.do(t, "POST", "/v1/threads/T/inputs?wait=30s", `{"content":"hello"}`, "Idempotency-Key", "key-1")
	if resp.StatusCode != 200 || string(again) != string(body) {
		t.Fatalf("retry with wait: %d %s, first %s", resp.StatusCode, again, body)
	}
	// Without wait, the same key is the same admission.
	resp, b := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"hello"}`, "Idempotency-Key", "key-1")
	if adm := decode[httpapi.Admission](t, b); resp.StatusCode != 202 || adm.RunID != res.RunID || adm.InputMessageID != res.InputMessageID {
		t.Fatalf("retry without wait: %d %s", resp.StatusCode, b)
	}
	// Other content under the key is refused, waiting or not.
	resp, b = s.do(t, "POST", "/v1/threads/T/inputs?wait=30s", `{"content":"other"}`, "Idempotency-Key", "key-1")
	wantProblem(t, resp, b, 422, "key_reused")
	// A bad wait is refused before anything is admitted.
	for _, q := range []string{"wait=soon", "wait=-1s", "wait=5", "wait="} {
		resp, b = s.do(t, "POST", "/v1/threads/U/inputs?"+q, `{"content":"x"}`, "Idempotency-Key", "key-u")
		wantProblem(t, resp, b, 400, "bad_request")
	}
	resp, b = s.do(t, "GET", "/v1/threads/U/runs", "")
	wantProblem(t, resp, b, 404, "not_found")
	// A bad body is refused as without wait.
	resp, b = s.do(t, "POST", "/v1/threads/U/inputs?wait=30s", `{"content":""}`)
	wantProblem(t, resp, b, 400, "bad_request")
}

// TestWaitEndsAtClose: a submission or a result request waiting for a run
// that the runtime's close abandons is answered at the close, not when its
// wait runs out: the submission with its admission (202), the result
// request with 503.
func TestWaitEndsAtClose(t *testing.T) {
	s := newServer(t, true, httpapi.Options{})
	type answer struct {
		status int
		body   []byte
	}
	submitted, resulted := make(chan answer, 1), make(chan answer, 1)
	go func() {
		resp, body := s.do(t, "POST", "/v1/threads/T/inputs?wait=5m", `{"content":"held"}`, "Idempotency-Key", "k")
		submitted <- answer{resp.StatusCode, body}
	}()
	<-s.entered // the run is executing, held by the model
	_, page := s.do(t, "GET", "/v1/threads/T/runs", "")
	runs := decode[httpapi.RunPage](t, page)
	if len(runs.Runs) != 1 {
		t.Fatalf("runs of T: %+v", runs)
	}
	go func() {
		resp, body := s.do(t, "GET", "/v1/runs/"+runs.Runs[0].ID+"/result?wait=5m", "")
		resulted <- answer{resp.StatusCode, body}
	}()
	time.Sleep(50 * time.Millisecond) // let the result request start waiting
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := s.rt.Close(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close: %v", err)
	}
	// Far short of the five minutes asked for, far past a close.
	limit := time.After(time.Minute)
	select {
	case a := <-submitted:
		if adm := decode[httpapi.Admission](t, a.body); a.status != 202 || adm.RunID != runs.Runs[0].ID {
			t.Fatalf("submission waiting at close: %d %s", a.status, a.body)
		}
	case <-limit:
		t.Fatal("the submission's wait outlived the runtime's close")
	}
	select {
	case a := <-resulted:
		if a.status != 503 {
			t.Fatalf("result request waiting at close: %d %s", a.status, a.body)
		}
	case <-limit:
		t.Fatal("the result request's wait outlived the runtime's close")
	}
	resp, b := s.do(t, "GET", "/v1/runs/"+runs.Runs[0].ID+"/result?wait=", "")
	wantProblem(t, resp, b, 400, "bad_request")
}

// TestSubmitWaitTimeout: a run that does not settle within the wait is
// answered with its admission (202); it goes on, and a retry with the same
// key once it settled answers with its result.
func TestSubmitWaitTimeout(t *testing.T) {
	s := newServer(t, true, httpapi.Options{})
	resp, body := s.do(t, "POST", "/v1/threads/T/inputs?wait=10ms", `{"content":"slow"}`, "Idempotency-Key", "k")
	adm := decode[httpapi.Admission](t, body)
	if resp.StatusCode != 202 || adm.RunID == "" || adm.InputMessageID == "" || adm.ThreadID != "T" {
		t.Fatalf("unsettled submit: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(string(body), `"state"`) {
		t.Fatalf("unsettled submit answered with a result: %s", body)
	}
	// busy: the policy rejects an input while the run waits, wait or not.
	resp, b := s.do(t, "POST", "/v1/threads/T/inputs?wait=30s", `{"content":"second","hint":"reject"}`)
	wantProblem(t, resp, b, 409, "busy")
	s.gate <- struct{}{}
	resp, b = s.do(t, "GET", "/v1/runs/"+adm.RunID+"/result?wait=30s", "")
	if resp.StatusCode != 200 || decode[httpapi.Result](t, b).State != "completed" {
		t.Fatalf("result: %d %s", resp.StatusCode, b)
	}
	resp, b = s.do(t, "POST", "/v1/threads/T/inputs?wait=30s", `{"content":"slow"}`, "Idempotency-Key", "k")
	res := decode[httpapi.SubmitResult](t, b)
	if resp.StatusCode != 200 || res.RunID != adm.RunID || res.InputMessageID != adm.InputMessageID || res.Answer == nil || res.Answer.Content != "slow" {
		t.Fatalf("retry after it settled: %d %s", resp.StatusCode, b)
	}
}

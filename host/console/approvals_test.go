package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/console"
	"github.com/agenthost/agenthost/host/httpapi"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/toolpolicy"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// deleteTool is a tool with a side effect, recording every call it gets.
type deleteTool struct {
	mu    sync.Mutex
	calls []toolCall
}

type toolCall struct {
	Arguments string
	Key       string
}

func (*deleteTool) Spec() model.ToolSpec {
	return model.ToolSpec{Name: "delete_file", Description: "deletes a file"}
}

func (d *deleteTool) Call(ctx context.Context, args string) (string, error) {
	c, _ := model.CallFrom(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, toolCall{Arguments: args, Key: c.IdempotencyKey()})
	return "deleted", nil
}

// of returns the calls made by run runID.
func (d *deleteTool) of(runID string) []toolCall {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []toolCall
	for _, c := range d.calls {
		if strings.HasPrefix(c.Key, runID+"/") {
			out = append(out, c)
		}
	}
	return out
}

// approvalPost is an answer the browser posted.
type approvalPost struct {
	Run, Call, Key string
	Body           map[string]any
}

// approvalServer is the API and the console over a runtime whose tool
// policy asks a person about every call of delete_file. It records the
// answers the browser posts and can fail them or answer the call first.
type approvalServer struct {
	*httptest.Server
	rt   *host.Runtime
	tool *deleteTool

	mu    sync.Mutex
	posts []approvalPost
	// failNext answers that many of the next posts with 503, passing
	// nothing on.
	failNext int
	// before, if set, runs (once) before the next post is passed on.
	before func(p approvalPost)
}

const askPrompt = "Delete a file? Check the path first."

func newApprovalServer(t *testing.T) *approvalServer {
	t.Helper()
	m, err := model.NewScripted(model.Script{Steps: []model.ScriptStep{
		{Tool: &model.ScriptTool{Name: "delete_file", Arguments: `{"path":"/tmp/report.txt"}`}},
		{Answer: "echo"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := &approvalServer{tool: &deleteTool{}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	s.rt, err = host.New(context.Background(), host.Config{
		Driver: memdriver.New(), Model: m, Tools: []model.Tool{s.tool}, Logger: logger,
		// Calls on threads named "two…" need two approvals.
		ToolPolicy: toolpolicy.Func(func(_ context.Context, c toolpolicy.Call) (toolpolicy.Decision, error) {
			n := 1
			if strings.HasPrefix(c.ThreadID, "two") {
				n = 2
			}
			return toolpolicy.Decision{Verdict: toolpolicy.Ask, Approvals: n, Prompt: askPrompt}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(s.rt, httpapi.Options{Token: token, Logger: logger})
	s.Server = httptest.NewServer(console.Mount(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/approvals/") {
			s.intercept(w, r, api)
			return
		}
		api.ServeHTTP(w, r)
	})))
	t.Cleanup(func() {
		s.Close()
		cctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		s.rt.Close(cctx)
	})
	return s
}

func (s *approvalServer) intercept(w http.ResponseWriter, r *http.Request, api http.Handler) {
	body, _ := io.ReadAll(r.Body)
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/runs/"), "/approvals/")
	p := approvalPost{Key: r.Header.Get("Idempotency-Key")}
	if len(parts) == 2 {
		p.Run, p.Call = parts[0], parts[1]
	}
	_ = json.Unmarshal(body, &p.Body)
	s.mu.Lock()
	s.posts = append(s.posts, p)
	fail := s.failNext > 0
	if fail {
		s.failNext--
	}
	before := s.before
	s.before = nil
	s.mu.Unlock()
	if fail {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"type":"about:blank","title":"Service Unavailable","status":503,"code":"unavailable","detail":"the store did not answer in time"}`)
		return
	}
	if before != nil {
		before(p)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	api.ServeHTTP(w, r)
}

// postsFor returns the answers the browser posted for run runID.
func (s *approvalServer) postsFor(runID string) []approvalPost {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []approvalPost
	for _, p := range s.posts {
		if p.Run == runID {
			out = append(out, p)
		}
	}
	return out
}

// waiting submits an input to thread and waits until its run waits for an
// answer to its call of delete_file.
func (s *approvalServer) waiting(t *testing.T, thread string) (string, host.PendingApproval) {
	t.Helper()
	tk, err := s.rt.Submit(context.Background(), thread, "clean up the reports", host.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(limit)
	for {
		pend, run, err := s.rt.PendingApprovals(context.Background(), tk.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if len(pend) == 1 {
			if pend[0].Tool != "delete_file" || pend[0].Prompt != askPrompt {
				t.Fatalf("pending call: %+v", pend[0])
			}
			return tk.RunID, pend[0]
		}
		if host.IsTerminal(run.State) {
			t.Fatalf("run %s ended without waiting: %+v", tk.RunID, run)
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s does not wait for approval: %+v", tk.RunID, run)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openWaitingRun opens the run's page and waits for its pending call.
func openWaitingRun(t *testing.T, ctx context.Context, s *approvalServer, runID string, p host.PendingApproval) string {
	t.Helper()
	item := `[data-pending-call="` + p.CallID + `"]`
	run(t, ctx, "opening the waiting run",
		chromedp.Navigate(s.URL+"/ui/#/runs/"+runID),
		chromedp.WaitVisible(css(`#run-state[data-state="waiting"]`)),
		chromedp.WaitVisible(css(item+` [data-action="approve"]`)),
	)
	return item
}

// signIn gives the console the token.
func signIn(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	run(t, ctx, "signing in",
		chromedp.Navigate(url+"/ui/"),
		chromedp.WaitVisible(css(`#token`)),
		chromedp.SendKeys(css(`#token`), token),
		chromedp.Click(css(`#token-form button[type=submit]`)),
		chromedp.WaitVisible(css(`input#q`)),
	)
}

// clear empties a field the way a person selecting all and deleting would.
func clear(sel string) chromedp.Action[chromedp.Void] {
	js := chromedp.Evaluate[bool](`(() => { const n = document.querySelector(` + jsString(sel) + `); n.value = ''; n.dispatchEvent(new Event('input', { bubbles: true })); return true; })()`)
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := js(ctx, t)
		return err
	})
}

func focusedAttr(t *testing.T, ctx context.Context, attr string) string {
	t.Helper()
	return value(t, ctx, "reading the focused element", chromedp.Evaluate[string](
		`(document.activeElement && document.activeElement.getAttribute(`+jsString(attr)+`)) || ''`))
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func sameJSON(t *testing.T, got, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("%q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(g, w)
}

func completed(t *testing.T, s *approvalServer, runID string) {
	t.Helper()
	if res := waitRun(t, s.rt, runID); res.State != record.StateCompleted {
		t.Fatalf("run %s: %+v, want it completed", runID, res)
	}
}

// TestConsoleApprovals drives the pending approvals of a waiting run in
// chromium: approve, edit (invalid JSON first), reject, respond, and an
// answer given elsewhere first.
func TestConsoleApprovals(t *testing.T) {
	ctx := browser(t)
	s := newApprovalServer(t)
	signIn(t, ctx, s.URL)
	// keys are the idempotency keys of the answers given, one per click.
	keys := map[string]bool{}
	fresh := func(t *testing.T, p approvalPost) {
		t.Helper()
		if p.Key == "" || keys[p.Key] {
			t.Errorf("the answer's key %q is not a fresh one", p.Key)
		}
		keys[p.Key] = true
	}
	// onePost checks that the console sent exactly one answer for runID,
	// with this action and a fresh key.
	onePost := func(t *testing.T, runID, action string) {
		t.Helper()
		posts := s.postsFor(runID)
		if len(posts) != 1 || posts[0].Body["action"] != action {
			t.Fatalf("posts: %+v, want one %s", posts, action)
		}
		fresh(t, posts[0])
	}

	t.Run("approve runs the call once", func(t *testing.T) {
		runID, p := s.waiting(t, "A1")
		run(t, ctx, "the threads list marks the thread whose run waits",
			chromedp.Navigate(s.URL+"/ui/#/threads"),
			chromedp.WaitVisible(css(`tr[data-thread="A1"][data-waiting="1"] a[data-waiting-run="`+runID+`"]`)),
		)
		run(t, ctx, "the timeline draws the wait",
			chromedp.Navigate(s.URL+"/ui/#/threads/A1"),
			chromedp.WaitVisible(css(`#timeline [data-run="`+runID+`"][data-state="waiting"] [data-wait="open"]`)),
			chromedp.ScrollIntoView(css(`#timeline-section`)),
		)
		writeScreenshot(t, "console-timeline-waiting.png", value(t, ctx, "a screenshot of the timeline", chromedp.Screenshot(css(`#timeline-section`))))
		item := openWaitingRun(t, ctx, s, runID, p)
		text := value(t, ctx, "reading the pending call", chromedp.Text(css(item)))
		for _, want := range []string{"delete_file", askPrompt, `"path": "/tmp/report.txt"`, p.CallID, "in 24 hours", "rejected"} {
			if !strings.Contains(text, want) {
				t.Errorf("the pending call lacks %q:\n%s", want, text)
			}
		}
		writeScreenshot(t, "console-approval.png", value(t, ctx, "a screenshot of the run", chromedp.FullScreenshot(100)))
		scheme(t, ctx, "dark")
		writeScreenshot(t, "console-approval-dark.png", value(t, ctx, "a screenshot of the run, dark", chromedp.FullScreenshot(100)))
		scheme(t, ctx, "light")
		if n := len(s.tool.of(runID)); n != 0 {
			t.Fatalf("the tool ran %d times before the approval", n)
		}

		// The server fails the first post: the console tries again with
		// the same key.
		s.mu.Lock()
		s.failNext = 1
		s.mu.Unlock()
		run(t, ctx, "approving",
			chromedp.Click(css(item+` [data-action="approve"]`)),
			chromedp.WaitVisible(css(`[data-approval-outcome="approve"][data-call="`+p.CallID+`"]`)),
			chromedp.WaitVisible(css(`#run-state[data-state="completed"]`)),
			chromedp.WaitNotPresent(css(item)),
			chromedp.WaitVisible(css(`[data-step-kind="ask"][data-ask-call="`+p.CallID+`"]`)),
			chromedp.WaitVisible(css(`[data-step-kind="answer"][data-answer-call="`+p.CallID+`"][data-action="approve"]`)),
			// Ephemeral events (all with seq 0) are told apart: the
			// second one is listed too.
			chromedp.WaitVisible(css(`tr[data-event="step_started"]`)),
			chromedp.WaitVisible(css(`tr[data-event="step_finished"]`)),
			// The events of the wait.
			chromedp.WaitVisible(css(`tr[data-event="waiting"]`)),
			chromedp.WaitVisible(css(`tr[data-event="approval"]`)),
			chromedp.WaitVisible(css(`tr[data-event="resumed"]`)),
		)
		writeScreenshot(t, "console-approved.png", value(t, ctx, "a screenshot of the run, approved", chromedp.FullScreenshot(100)))
		completed(t, s, runID)
		calls := s.tool.of(runID)
		if len(calls) != 1 || !sameJSON(t, calls[0].Arguments, `{"path":"/tmp/report.txt"}`) {
			t.Fatalf("tool calls after approving: %+v, want one as asked", calls)
		}
		posts := s.postsFor(runID)
		if len(posts) != 2 || posts[0].Key == "" || posts[0].Key != posts[1].Key || posts[1].Body["action"] != "approve" {
			t.Fatalf("posts: %+v, want the approve twice with one key (the first failed)", posts)
		}
		fresh(t, posts[0])
		if got := focusedAttr(t, ctx, "data-approval-outcome"); got != "approve" {
			t.Errorf("focus after approving is not on the outcome (%q)", got)
		}
		run(t, ctx, "the timeline draws the wait that ended",
			chromedp.Navigate(s.URL+"/ui/#/threads/A1"),
			chromedp.WaitVisible(css(`#timeline [data-run="`+runID+`"][data-state="completed"] [data-wait="ended"]`)),
		)
	})

	t.Run("edit runs the call with new arguments; invalid JSON sends nothing", func(t *testing.T) {
		runID, p := s.waiting(t, "E1")
		item := openWaitingRun(t, ctx, s, runID, p)
		editor := item + ` form[data-form="edit"] textarea`
		run(t, ctx, "editing with invalid JSON",
			chromedp.Click(css(item+` [data-action="edit"]`)),
			chromedp.WaitVisible(css(editor)),
		)
		if got := value(t, ctx, "reading the editor", chromedp.Value(css(editor))); !sameJSON(t, got, `{"path":"/tmp/report.txt"}`) {
			t.Errorf("the editor starts with %q, want the call's arguments", got)
		}
		for _, c := range []struct{ text, want string }{
			{`{"path": "/tmp/other.txt",}`, "not valid JSON"},
			{`["/tmp/other.txt"]`, "must be a JSON object"},
			{``, "empty"},
		} {
			run(t, ctx, "sending "+c.text,
				clear(editor),
				chromedp.SendKeys(css(editor), c.text),
				chromedp.Click(css(item+` [data-send="edit"]`)),
				chromedp.WaitVisible(css(item+` .field-error`)),
			)
			msg := value(t, ctx, "reading the error", chromedp.Text(css(item+` .field-error`)))
			if !strings.Contains(msg, c.want) || !strings.Contains(msg, "Nothing was sent") {
				t.Errorf("error for %q: %q, want it to say %q and that nothing was sent", c.text, msg, c.want)
			}
			if got := value(t, ctx, "reading the editor's state", chromedp.Evaluate[string](
				`document.activeElement.matches(`+jsString(editor)+`) ? document.activeElement.getAttribute('aria-invalid') : 'focus elsewhere'`)); got != "true" {
				t.Errorf("after %q: the editor is focused and invalid? %q", c.text, got)
			}
		}
		if posts := s.postsFor(runID); len(posts) != 0 {
			t.Fatalf("invalid arguments were sent: %+v", posts)
		}
		if pend, _, err := s.rt.PendingApprovals(context.Background(), runID); err != nil || len(pend) != 1 {
			t.Fatalf("the run no longer waits after invalid edits: %+v, %v", pend, err)
		}
		run(t, ctx, "editing with valid JSON",
			clear(editor),
			chromedp.SendKeys(css(editor), `{"path": "/tmp/old-report.txt"}`),
			chromedp.Click(css(item+` [data-send="edit"]`)),
			chromedp.WaitVisible(css(`[data-approval-outcome="edit"][data-call="`+p.CallID+`"]`)),
			chromedp.WaitVisible(css(`#run-state[data-state="completed"]`)),
			chromedp.WaitVisible(css(`[data-step-kind="answer"][data-answer-call="`+p.CallID+`"][data-action="edit"]`)),
		)
		completed(t, s, runID)
		calls := s.tool.of(runID)
		if len(calls) != 1 || !sameJSON(t, calls[0].Arguments, `{"path":"/tmp/old-report.txt"}`) {
			t.Fatalf("tool calls after editing: %+v, want one with the new arguments", calls)
		}
		onePost(t, runID, "edit")
	})

	t.Run("reject never runs the call", func(t *testing.T) {
		runID, p := s.waiting(t, "R1")
		item := openWaitingRun(t, ctx, s, runID, p)
		run(t, ctx, "rejecting with a message",
			chromedp.Click(css(item+` [data-action="reject"]`)),
			chromedp.WaitVisible(css(item+` form[data-form="reject"] textarea`)),
			chromedp.SendKeys(css(item+` form[data-form="reject"] textarea`), "Not this file: it is still needed."),
			chromedp.Click(css(item+` [data-send="reject"]`)),
			chromedp.WaitVisible(css(`[data-approval-outcome="reject"][data-call="`+p.CallID+`"]`)),
			chromedp.WaitVisible(css(`#run-state[data-state="completed"]`)),
			chromedp.WaitVisible(css(`[data-step-kind="answer"][data-answer-call="`+p.CallID+`"][data-action="reject"]`)),
			chromedp.WaitVisible(css(`[data-role="tool"]`)),
		)
		completed(t, s, runID)
		if calls := s.tool.of(runID); len(calls) != 0 {
			t.Fatalf("the rejected call ran: %+v", calls)
		}
		if text := value(t, ctx, "reading the tool result", chromedp.Text(css(`[data-role="tool"]`))); !strings.Contains(text, "Not this file: it is still needed.") {
			t.Errorf("the tool result the model read: %q, want the rejection's message", text)
		}
		onePost(t, runID, "reject")
	})

	t.Run("respond answers in the tool's place", func(t *testing.T) {
		runID, p := s.waiting(t, "P1")
		item := openWaitingRun(t, ctx, s, runID, p)
		field := item + ` form[data-form="respond"] textarea`
		run(t, ctx, "opening and closing the editor with the keyboard",
			chromedp.Focus(css(item+` [data-action="respond"]`)),
			chromedp.KeyEvent("\r"),
			chromedp.WaitVisible(css(field)),
			chromedp.KeyEvent("\x1b"),
			chromedp.WaitNotPresent(css(field)),
		)
		if got := focusedAttr(t, ctx, "data-action"); got != "respond" {
			t.Errorf("focus after Escape: %q, want the Respond button", got)
		}
		run(t, ctx, "responding with nothing",
			chromedp.KeyEvent("\r"),
			chromedp.WaitVisible(css(field)),
			chromedp.Click(css(item+` [data-send="respond"]`)),
			chromedp.WaitVisible(css(item+` .field-error`)),
		)
		if posts := s.postsFor(runID); len(posts) != 0 {
			t.Fatalf("an empty response was sent: %+v", posts)
		}
		run(t, ctx, "responding",
			chromedp.SendKeys(css(field), "The report was already deleted yesterday."),
			chromedp.Click(css(item+` [data-send="respond"]`)),
			chromedp.WaitVisible(css(`[data-approval-outcome="respond"][data-call="`+p.CallID+`"]`)),
			chromedp.WaitVisible(css(`#run-state[data-state="completed"]`)),
		)
		completed(t, s, runID)
		if calls := s.tool.of(runID); len(calls) != 0 {
			t.Fatalf("the call answered in the tool's place ran: %+v", calls)
		}
	})

	t.Run("a call that needs two approvals takes two clicks, two keys", func(t *testing.T) {
		runID, p := s.waiting(t, "two1")
		if p.Approvals != 2 {
			t.Fatalf("pending call: %+v, want two approvals needed", p)
		}
		item := openWaitingRun(t, ctx, s, runID, p)
		run(t, ctx, "approving once",
			chromedp.Click(css(item+` [data-action="approve"]`)),
			chromedp.WaitVisible(css(`[data-approval-outcome="approve"][data-call="`+p.CallID+`"]`)),
		)
		run(t, ctx, "the call waits for its second approval",
			chromedp.Poll[chromedp.Void](`document.querySelector(`+jsString(item)+`)?.textContent.includes("1 of 2 given")`, chromedp.WithPollingTimeout(limit)),
		)
		if n := len(s.tool.of(runID)); n != 0 {
			t.Fatalf("the tool ran after one approval of two (%d calls)", n)
		}
		if got := focusedAttr(t, ctx, "data-action"); got != "approve" {
			t.Errorf("focus after the first approval: %q, want the Approve button", got)
		}
		run(t, ctx, "approving again",
			chromedp.Click(css(item+` [data-action="approve"]`)),
			chromedp.WaitVisible(css(`#run-state[data-state="completed"]`)),
		)
		completed(t, s, runID)
		if calls := s.tool.of(runID); len(calls) != 1 {
			t.Fatalf("tool calls after two approvals: %+v, want one", calls)
		}
		posts := s.postsFor(runID)
		if len(posts) != 2 {
			t.Fatalf("posts: %+v, want two approvals", posts)
		}
		fresh(t, posts[0])
		fresh(t, posts[1])
	})

	t.Run("cancel a waiting run", func(t *testing.T) {
		runID, p := s.waiting(t, "C1")
		item := openWaitingRun(t, ctx, s, runID, p)
		run(t, ctx, "cancelling",
			chromedp.Click(css(`#cancel`)),
			chromedp.WaitVisible(css(`#cancel-yes`)),
		)
		if q := value(t, ctx, "reading the question", chromedp.Text(css(`#cancel-q`))); !strings.Contains(q, "waiting run") {
			t.Errorf("the cancel question %q does not speak of a waiting run", q)
		}
		run(t, ctx, "confirming",
			chromedp.Click(css(`#cancel-yes`)),
			chromedp.WaitVisible(css(`#run-state[data-state="interrupted"]`)),
			chromedp.WaitNotPresent(css(item)),
		)
		if calls := s.tool.of(runID); len(calls) != 0 {
			t.Fatalf("the call of the canceled run ran: %+v", calls)
		}
	})

	t.Run("an answer given elsewhere first is said plainly, and the page follows", func(t *testing.T) {
		runID, p := s.waiting(t, "X1")
		item := openWaitingRun(t, ctx, s, runID, p)
		s.mu.Lock()
		s.before = func(approvalPost) {
			if _, err := s.rt.Answer(context.Background(), runID, p.CallID, host.Approval{Action: record.AnswerReject, Message: "Rejected from the CLI.", Key: "elsewhere"}); err != nil {
				t.Errorf("answering elsewhere: %v", err)
			}
		}
		s.mu.Unlock()
		run(t, ctx, "approving a call rejected meanwhile",
			chromedp.Click(css(item+` [data-action="approve"]`)),
			chromedp.WaitVisible(css(`[data-approval-outcome="answered"][data-call="`+p.CallID+`"]`)),
			chromedp.WaitVisible(css(`#run-state[data-state="completed"]`)),
			chromedp.WaitNotPresent(css(item)),
		)
		msg := value(t, ctx, "reading the outcome", chromedp.Text(css(`[data-approval-outcome="answered"]`)))
		for _, want := range []string{"already has another answer", "reject", "Rejected from the CLI."} {
			if !strings.Contains(msg, want) {
				t.Errorf("the outcome %q does not say %q", msg, want)
			}
		}
		completed(t, s, runID)
		if calls := s.tool.of(runID); len(calls) != 0 {
			t.Fatalf("the call rejected elsewhere ran: %+v", calls)
		}
	})

	t.Run("a run canceled meanwhile is said to wait no more", func(t *testing.T) {
		runID, p := s.waiting(t, "N1")
		item := openWaitingRun(t, ctx, s, runID, p)
		s.mu.Lock()
		s.before = func(approvalPost) {
			if _, err := s.rt.Cancel(context.Background(), runID); err != nil {
				t.Errorf("canceling elsewhere: %v", err)
			}
		}
		s.mu.Unlock()
		run(t, ctx, "approving a call of a run canceled meanwhile",
			chromedp.Click(css(item+` [data-action="approve"]`)),
			chromedp.WaitVisible(css(`[data-approval-outcome="not_waiting"][data-call="`+p.CallID+`"]`)),
			chromedp.WaitVisible(css(`#run-state[data-state="interrupted"]`)),
			chromedp.WaitNotPresent(css(item)),
		)
		msg := value(t, ctx, "reading the outcome", chromedp.Text(css(`[data-approval-outcome="not_waiting"]`)))
		if !strings.Contains(msg, "no longer waits for this call") {
			t.Errorf("the outcome %q does not say the run waits no more", msg)
		}
		if got := focusedAttr(t, ctx, "data-approval-outcome"); got != "not_waiting" {
			t.Errorf("focus after the refusal: %q, want the outcome", got)
		}
		if calls := s.tool.of(runID); len(calls) != 0 {
			t.Fatalf("the call of the canceled run ran: %+v", calls)
		}
	})
}

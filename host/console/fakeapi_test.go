package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agenthost/agenthost/host/console"
)

// fakeAPI answers the routes the console reads with fixed records, in the
// documented shapes, including those the server does not serve yet: the
// thread listing (GET /v1/threads, paginated with an opaque cursor) and step
// records (GET /v1/runs/{id}/steps). Thread "alpha" holds run A, completed,
// which took run B's input at the boundary before its model step 1 (step
// record 3) and answered it.
func fakeAPI(t0 time.Time) http.Handler {
	at := func(s float64) string {
		return t0.Add(time.Duration(s * float64(time.Second))).Format(time.RFC3339Nano)
	}
	threads := []map[string]any{
		{"id": "alpha", "version": 7, "open_run_ids": []string{"run_C"}, "busy": true, "updated_at": at(4)},
		{"id": "beta", "version": 2, "open_run_ids": []string{}, "busy": false, "updated_at": at(1)},
		{"id": "gamma", "version": 1, "open_run_ids": []string{}, "busy": false, "updated_at": at(0)},
	}
	runs := map[string]map[string]any{
		"run_A": {"id": "run_A", "thread_id": "alpha", "seq": 1, "state": "completed", "terminal_reason": "completed",
			"input_message_ids": []string{"msg_a", "msg_b"}, "assistant_message_id": "msg_ans", "attempt": 1,
			"created_at": at(0), "started_at": at(0), "ended_at": at(4)},
		"run_B": {"id": "run_B", "thread_id": "alpha", "seq": 2, "state": "superseded", "terminal_reason": "absorbed",
			"input_message_ids": []string{"msg_b"}, "assistant_message_id": "", "absorbed_into_run_id": "run_A", "attempt": 1,
			"created_at": at(1), "ended_at": at(4)},
	}
	events := map[string][]string{
		"run_A": {
			`{"seq":1,"run_id":"run_A","thread_id":"alpha","type":"admitted","time":"` + at(0) + `","data":{"decision":"start","input_message_id":"msg_a"}}`,
			`{"seq":2,"run_id":"run_A","thread_id":"alpha","type":"started","time":"` + at(0) + `","data":{"attempt":"1"}}`,
			`{"seq":3,"run_id":"run_A","thread_id":"alpha","type":"tool_call","time":"` + at(1.5) + `","data":{"tool":"lookup","call_id":"call_0","idempotency_key":"run_A/step0/0"}}`,
			`{"seq":4,"run_id":"run_A","thread_id":"alpha","type":"terminal","time":"` + at(4) + `","data":{"state":"completed","reason":"completed","error":""}}`,
		},
		"run_B": {
			`{"seq":1,"run_id":"run_B","thread_id":"alpha","type":"admitted","time":"` + at(1) + `","data":{"decision":"inject","input_message_id":"msg_b"}}`,
			`{"seq":2,"run_id":"run_B","thread_id":"alpha","type":"absorbed","time":"` + at(4) + `","data":{"into_run_id":"run_A"}}`,
		},
	}
	msg := func(id, role, content string, extra map[string]any) map[string]any {
		m := map[string]any{"id": id, "run_id": "run_A", "seq": 0, "role": role, "content": content, "created_at": at(1)}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	steps := map[string][]map[string]any{
		"run_A": {
			{"seq": 1, "kind": "model", "model_step": 0, "attempt": 1, "created_at": at(1.5),
				"message": msg("msg_m0", "assistant", "", map[string]any{"tool_calls": []map[string]string{{"id": "call_0", "name": "lookup", "arguments": `{"q":"notes"}`}}})},
			{"seq": 2, "kind": "tool", "model_step": 0, "attempt": 1, "created_at": at(2), "message": msg("msg_t0", "tool", "no notes", map[string]any{"tool_call_id": "call_0"})},
			{"seq": 3, "kind": "take", "model_step": 1, "attempt": 1, "created_at": at(2.5),
				"taken": []map[string]any{{"run_id": "run_B", "input_message_ids": []string{"msg_b"}}}},
			{"seq": 4, "kind": "model", "model_step": 1, "attempt": 1, "created_at": at(4), "message": msg("msg_ans", "assistant", "the answer, in bullet points", nil)},
		},
		"run_B": {},
	}
	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	notFound := func(w http.ResponseWriter, detail string) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"type":"https://agenthost.dev/problems/not_found","title":"Not Found","status":404,"detail":%q,"code":"not_found"}`, detail)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/threads", func(w http.ResponseWriter, r *http.Request) {
		// Pages of two, whatever the limit; the cursor is opaque ("c:" and
		// the last id), and an id is taken as a cursor too.
		after := strings.TrimPrefix(r.URL.Query().Get("after"), "c:")
		i := slices.IndexFunc(threads, func(t map[string]any) bool { return t["id"].(string) > after })
		if i < 0 {
			writeJSON(w, map[string]any{"threads": []any{}, "next_cursor": ""})
			return
		}
		page := threads[i:min(i+2, len(threads))]
		next := ""
		if i+2 < len(threads) {
			next = "c:" + page[len(page)-1]["id"].(string)
		}
		writeJSON(w, map[string]any{"threads": page, "next_cursor": next})
	})
	mux.HandleFunc("GET /v1/threads/{id}/runs", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "alpha" {
			notFound(w, "no thread "+strconv.Quote(r.PathValue("id")))
			return
		}
		writeJSON(w, map[string]any{"thread_id": "alpha", "runs": []any{runs["run_A"], runs["run_B"]}, "next_cursor": ""})
	})
	mux.HandleFunc("GET /v1/threads/{id}/messages", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"thread_id": r.PathValue("id"), "messages": []any{}, "next_cursor": ""})
	})
	mux.HandleFunc("GET /v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		if run, ok := runs[r.PathValue("id")]; ok {
			writeJSON(w, run)
			return
		}
		notFound(w, "no run")
	})
	mux.HandleFunc("GET /v1/runs/{id}/steps", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"steps": steps[r.PathValue("id")], "next_cursor": ""})
	})
	mux.HandleFunc("GET /v1/runs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events[r.PathValue("id")] {
			var ev struct {
				Seq  int64  `json:"seq"`
				Type string `json:"type"`
			}
			json.Unmarshal([]byte(e), &ev)
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, e)
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { notFound(w, "no such route: "+r.Method+" "+r.URL.Path) })
	return mux
}

// TestConsoleNewEndpoints drives the console against the documented shapes
// of the thread listing and the step records: busy threads marked, pages,
// search by id, and the absorbed input's arrow ending at the step record
// that took it.
func TestConsoleNewEndpoints(t *testing.T) {
	ctx := browser(t)
	srv := httptest.NewServer(console.Mount(fakeAPI(time.Now().Add(-time.Hour))))
	t.Cleanup(srv.Close)

	run(t, ctx, "the threads, busy marked, a page at a time",
		chromedp.Navigate(srv.URL+"/ui/"),
		chromedp.WaitVisible(css(`tr[data-thread="alpha"][data-busy="1"] .badge.busy`)),
		chromedp.WaitVisible(css(`tr[data-thread="beta"][data-busy="0"]`)),
		chromedp.WaitNotPresent(css(`tr[data-thread="gamma"]`)),
		chromedp.Click(css(`nav.pager a`)),
		chromedp.WaitVisible(css(`tr[data-thread="gamma"]`)),
		chromedp.WaitNotPresent(css(`tr[data-thread="alpha"]`)),
	)
	run(t, ctx, "search by id",
		chromedp.Navigate(srv.URL+"/ui/#/threads"),
		chromedp.WaitVisible(css(`input#q`)),
		chromedp.SendKeys(css(`input#q`), "be"),
		chromedp.Click(css(`form[role=search] button`)),
		chromedp.WaitVisible(css(`tr[data-thread="beta"]`)),
		chromedp.WaitNotPresent(css(`tr[data-thread="alpha"]`)),
		chromedp.WaitNotPresent(css(`tr[data-thread="gamma"]`)),
	)
	run(t, ctx, "the arrow ends at the step record that took the input",
		chromedp.Navigate(srv.URL+"/ui/#/threads/alpha"),
		chromedp.WaitReady(css(`#timeline [data-arrow][data-kind="absorbed"][data-from-run="run_B"][data-to-run="run_A"][data-step="3"]`)),
		chromedp.WaitVisible(css(`#timeline [data-run="run_B"] [data-input="msg_b"][data-decision="inject"]`)),
	)
	if n := value(t, ctx, "counting A's input marks", chromedp.Evaluate[int](`document.querySelectorAll('#timeline [data-run="run_A"] [data-input]').length`)); n != 1 {
		t.Errorf("run A shows %d inputs, want its own one (B's is drawn on B's row)", n)
	}
	run(t, ctx, "A's transcript, step by step",
		chromedp.Navigate(srv.URL+"/ui/#/runs/run_A"),
		chromedp.WaitVisible(css(`[data-step-kind="take"]`)),
		chromedp.WaitVisible(css(`[data-call="call_0"]`)),
	)
	text := value(t, ctx, "reading A's page", chromedp.Text(css(`main`)))
	for _, want := range []string{"Inputs taken at this boundary", "run_B", "msg_b", "run_A/step0/0", "the answer, in bullet points", "no notes"} {
		// Headings are upper-cased by the stylesheet: compare without case.
		if !strings.Contains(strings.ToLower(text), strings.ToLower(want)) {
			t.Errorf("A's page lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "keeps no step records") {
		t.Errorf("A's page says the server keeps no step records:\n%s", text)
	}
}

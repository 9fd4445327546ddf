package soak

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fake serves crafted records, so that each check can be seen to fail.
type fake struct {
	runs    []RunRecord          // one thread's runs, in seq order
	results map[string]Result    // by run id; missing: never settles
	admit   map[string]Admission // by idempotency key
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case strings.HasSuffix(p, "/runs"):
		json.NewEncoder(w).Encode(map[string]any{"runs": f.runs})
	case strings.HasSuffix(p, "/result"):
		id := strings.TrimSuffix(strings.TrimPrefix(p, "/v1/runs/"), "/result")
		res, ok := f.results[id]
		if !ok {
			w.WriteHeader(http.StatusAccepted)
			json.NewEncoder(w).Encode(RunRecord{ID: id, State: "queued"})
			return
		}
		json.NewEncoder(w).Encode(res)
	case strings.HasSuffix(p, "/inputs"):
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(f.admit[r.Header.Get("Idempotency-Key")])
	default:
		http.NotFound(w, r)
	}
}

func at(s int) *time.Time {
	t := time.Date(2026, 1, 1, 0, 0, s, 0, time.UTC)
	return &t
}

func answer(run, by, content string) Result {
	r := Result{RunID: run, AnsweredByRunID: by, State: "completed", TerminalReason: "completed"}
	if by != run {
		r.State, r.TerminalReason = "superseded", "absorbed"
	}
	r.Answer = &struct {
		ID      string `json:"id"`
		Content string `json:"content"`
	}{ID: "msg_a_" + by, Content: content}
	return r
}

// good is a thread where a completes and absorbs b, then c fails.
func good() (*fake, []Submission) {
	subs := []Submission{
		{Thread: "T", Key: "ka", Content: "[a] hello", RunID: "a", InputMessageID: "ma"},
		{Thread: "T", Key: "kb", Content: "[b] in bullets", RunID: "b", InputMessageID: "mb"},
		{Thread: "T", Key: "kc", Content: "[c] please fail", RunID: "c", InputMessageID: "mc"},
	}
	f := &fake{
		runs: []RunRecord{
			{ID: "a", ThreadID: "T", Seq: 1, State: "completed", TerminalReason: "completed", InputMessageIDs: []string{"ma", "mb"}, StartedAt: at(1), EndedAt: at(3)},
			{ID: "b", ThreadID: "T", Seq: 2, State: "superseded", TerminalReason: "absorbed", InputMessageIDs: []string{"mb"}, AbsorbedIntoRunID: "a", EndedAt: at(3)},
			{ID: "c", ThreadID: "T", Seq: 3, State: "failed", TerminalReason: "failed", InputMessageIDs: []string{"mc"}, Error: "boom", StartedAt: at(4), EndedAt: at(5)},
		},
		results: map[string]Result{
			"a": answer("a", "a", "[a] hello | [b] in bullets"),
			"b": answer("b", "a", "[a] hello | [b] in bullets"),
			"c": {RunID: "c", State: "failed", TerminalReason: "failed", Error: "boom"},
		},
		admit: map[string]Admission{},
	}
	for _, s := range subs {
		f.admit[s.Key] = Admission{RunID: s.RunID, InputMessageID: s.InputMessageID, ThreadID: s.Thread}
	}
	return f, subs
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(f *fake)
		want   string
		lost   int
	}{
		{"good", func(*fake) {}, "", 0},
		{"no result", func(f *fake) { delete(f.results, "c") }, "lost: [c]", 1},
		{"answer without the input", func(f *fake) { f.results["a"] = answer("a", "a", "[b] in bullets") }, "lost: [a]", 1},
		{"other admission", func(f *fake) { f.admit["kb"] = Admission{RunID: "z", InputMessageID: "mz"} }, "key kb on T: admitted as b/mb, now z/mz", 0},
		{"absorbed by a failed run", func(f *fake) { f.runs[0].State, f.runs[0].TerminalReason = "failed", "failed" }, "did not complete", 0},
		{"absorbing run lacks the input", func(f *fake) { f.runs[0].InputMessageIDs = []string{"ma"} }, "does not hold its input mb", 0},
		{"two active", func(f *fake) { f.runs[0].State, f.runs[2].State = "active", "active" }, "2 active runs", 0},
		{"out of order", func(f *fake) { f.runs[2].StartedAt, f.runs[2].EndedAt = at(0), at(2) }, "ended at", 0},
		{"unasked failure", func(f *fake) {
			f.results["c"] = Result{RunID: "c", State: "failed", TerminalReason: "failed", Error: "driver unavailable"}
			f.results["a"] = Result{RunID: "a", State: "failed", TerminalReason: "failed", Error: "driver unavailable"}
		}, "unasked failure: [a] hello: run a failed: driver unavailable", 0},
		{"overlap", func(f *fake) { f.runs[2].StartedAt = at(2) }, "while run a (seq 1) was active", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, subs := good()
			tc.mutate(f)
			srv := httptest.NewServer(f)
			defer srv.Close()
			rep := Check(context.Background(), NewClient(srv.URL), subs, []string{"T"}, 300*time.Millisecond)
			got := strings.Join(rep.Problems, "\n")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("problems:\n%s\nwant one with %q", got, tc.want)
			}
			if rep.Lost != tc.lost {
				t.Fatalf("lost %d, want %d", rep.Lost, tc.lost)
			}
		})
	}
}

package soak

import (
	"context"
	"encoding/json"
	"fmt"
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

// withD adds to good() a fourth run d on the thread, started at 6 and
// completed at 8 with answer, and its submission.
func withD(f *fake, subs []Submission, answer string) []Submission {
	f.runs = append(f.runs, RunRecord{ID: "d", ThreadID: "T", Seq: 4, State: "completed", TerminalReason: "completed", InputMessageIDs: []string{"md"}, StartedAt: at(6), EndedAt: at(8)})
	f.results["d"] = answerOf("d", answer)
	f.admit["kd"] = Admission{RunID: "d", InputMessageID: "md", ThreadID: "T"}
	return append(subs, Submission{Thread: "T", Key: "kd", Content: "[d] next", RunID: "d", InputMessageID: "md"})
}

func answerOf(run, content string) Result { return answer(run, run, content) }

func TestCheck(t *testing.T) {
	kill := []Fault{{Kind: "server kill", Start: *at(5), End: *at(7)}}
	cases := []struct {
		name   string
		mutate func(f *fake, subs []Submission) []Submission
		faults []Fault
		want   string
		lost   int
		// report checks the counts; it returns what is wrong.
		report func(r *Report) string
	}{
		{"good", nil, nil, "", 0, func(r *Report) string {
			if r.Answered != 1 || r.Absorbed != 1 || r.Failed != 1 || r.Duplicates != 0 || r.Carried != 0 {
				return fmt.Sprintf("%+v", *r)
			}
			return ""
		}},
		{"no result", func(f *fake, subs []Submission) []Submission { delete(f.results, "c"); return subs }, nil, "lost: [c]", 1, nil},
		{"answer without the input", func(f *fake, subs []Submission) []Submission {
			f.results["a"] = answer("a", "a", "[b] in bullets")
			return subs
		}, nil, "lost: [a]", 1, nil},
		{"answer merely containing the input's text", func(f *fake, subs []Submission) []Submission {
			f.results["a"] = answer("a", "a", "[a] hello again | [b] in bullets")
			f.results["b"] = answer("b", "a", "[a] hello again | [b] in bullets")
			return subs
		}, nil, "lost: [a] hello: run a completed with an answer that does not answer it", 1, nil},
		{"absorbing answer merely containing the input's text", func(f *fake, subs []Submission) []Submission {
			f.results["a"] = answer("a", "a", "[a] hello | [b] in bullets, please")
			f.results["b"] = answer("b", "a", "[a] hello | [b] in bullets, please")
			return subs
		}, nil, "lost: [b] in bullets: absorbed by a", 1, nil},
		{"other admission", func(f *fake, subs []Submission) []Submission {
			f.admit["kb"] = Admission{RunID: "z", InputMessageID: "mz"}
			return subs
		}, nil, "key kb on T: admitted as b/mb, now z/mz", 0, nil},
		{"absorbed by a failed run", func(f *fake, subs []Submission) []Submission {
			f.runs[0].State, f.runs[0].TerminalReason = "failed", "failed"
			return subs
		}, nil, "did not complete", 0, nil},
		{"absorbing run lacks the input", func(f *fake, subs []Submission) []Submission {
			f.runs[0].InputMessageIDs = []string{"ma"}
			return subs
		}, nil, "does not hold its input mb", 0, nil},
		{"two active", func(f *fake, subs []Submission) []Submission {
			f.runs[0].State, f.runs[2].State = "active", "active"
			return subs
		}, nil, "2 active runs", 0, nil},
		{"out of order", func(f *fake, subs []Submission) []Submission {
			f.runs[2].StartedAt, f.runs[2].EndedAt = at(0), at(2)
			return subs
		}, nil, "ended at", 0, nil},
		{"unasked failure", func(f *fake, subs []Submission) []Submission {
			f.results["c"] = Result{RunID: "c", State: "failed", TerminalReason: "failed", Error: "driver unavailable"}
			f.results["a"] = Result{RunID: "a", State: "failed", TerminalReason: "failed", Error: "driver unavailable"}
			return subs
			// (b, absorbed by a, now has no answer: lost too.)
		}, nil, "unasked failure: [a] hello: run a failed: driver unavailable", 1, nil},
		{"overlap", func(f *fake, subs []Submission) []Submission { f.runs[2].StartedAt = at(2); return subs }, nil, "while run a (seq 1) was active", 0, nil},
		// b was answered by a, which absorbed it, and again by d, with no
		// fault: I11b broken.
		{"answered twice without a fault", func(f *fake, subs []Submission) []Submission {
			return withD(f, subs, "[b] in bullets | [d] next")
		}, nil, "answered 2 times with no fault or interrupt in between: [b] in bullets (run b) answered by", 0, func(r *Report) string {
			if r.Duplicates != 1 || r.DupsBy["unexplained"] != 1 {
				return fmt.Sprintf("duplicates %d %v", r.Duplicates, r.DupsBy)
			}
			return ""
		}},
		{"answered twice within one answer", func(f *fake, subs []Submission) []Submission {
			f.results["a"] = answer("a", "a", "[a] hello | [b] in bullets | [a] hello")
			f.results["b"] = answer("b", "a", "[a] hello | [b] in bullets | [a] hello")
			return subs
		}, nil, "answered 2 times with no fault or interrupt in between: [a] hello", 0, nil},
		// The same, with a server kill while a and d lived: counted, no
		// problem.
		{"answered twice across a kill", func(f *fake, subs []Submission) []Submission {
			return withD(f, subs, "[b] in bullets | [d] next")
		}, kill, "", 0, func(r *Report) string {
			if r.Duplicates != 1 || r.DupsBy["fault"] != 1 {
				return fmt.Sprintf("duplicates %d %v", r.Duplicates, r.DupsBy)
			}
			return ""
		}},
		{"answered twice, a kill outside the window", func(f *fake, subs []Submission) []Submission {
			return withD(f, subs, "[b] in bullets | [d] next")
		}, []Fault{{Kind: "driver kill", Start: *at(20), End: *at(21)}}, "answered 2 times", 0, nil},
		{"answered twice by a recovered run", func(f *fake, subs []Submission) []Submission {
			subs = withD(f, subs, "[b] in bullets | [d] next")
			f.runs[3].Attempt = 2
			return subs
		}, nil, "", 0, func(r *Report) string {
			if r.DupsBy["fault"] != 1 {
				return fmt.Sprintf("%v", r.DupsBy)
			}
			return ""
		}},
		{"answered twice around an interrupt", func(f *fake, subs []Submission) []Submission {
			subs = withD(f, subs, "[b] in bullets | [d] next")
			f.runs[2].State, f.runs[2].TerminalReason, f.runs[2].Error = "interrupted", "interrupted", ""
			f.results["c"] = Result{RunID: "c", State: "interrupted", TerminalReason: "interrupted"}
			return subs
		}, nil, "", 0, func(r *Report) string {
			if r.DupsBy["interrupt"] != 1 || r.Stopped != 1 {
				return fmt.Sprintf("%v, stopped %d", r.DupsBy, r.Stopped)
			}
			return ""
		}},
		// c failed; its input stays in the prompt, and d answers it once.
		{"failed input answered by the next run", func(f *fake, subs []Submission) []Submission {
			return withD(f, subs, "[c] please fail | [d] next")
		}, nil, "", 0, func(r *Report) string {
			if r.Carried != 1 || r.Duplicates != 0 || r.Answered != 2 {
				return fmt.Sprintf("carried %d, duplicates %d, answered %d", r.Carried, r.Duplicates, r.Answered)
			}
			return ""
		}},
		// A completed run that no submission names still counts.
		{"answered again by a run nobody submitted", func(f *fake, subs []Submission) []Submission {
			withD(f, subs, "[a] hello | [z] other")
			return subs
		}, nil, "answered 2 times with no fault or interrupt in between: [a] hello (run a) answered by", 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, subs := good()
			if tc.mutate != nil {
				subs = tc.mutate(f, subs)
			}
			srv := httptest.NewServer(f)
			defer srv.Close()
			rep := Check(context.Background(), NewClient(srv.URL), subs, []string{"T"}, tc.faults, 300*time.Millisecond)
			got := strings.Join(rep.Problems, "\n")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("problems:\n%s\nwant one with %q", got, tc.want)
			}
			if rep.Lost != tc.lost {
				t.Fatalf("lost %d, want %d", rep.Lost, tc.lost)
			}
			if tc.report != nil {
				if msg := tc.report(rep); msg != "" {
					t.Fatalf("report: %s", msg)
				}
			}
		})
	}
}

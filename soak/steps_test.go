package soak

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stepsServer serves GET /v1/runs/{id}/steps from steps (by run id); with
// steps nil, the route does not exist.
func stepsServer(steps map[string][]Step) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/v1/runs/"), "/steps")
		if !ok || steps == nil {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(Problem{Code: "not_found", Detail: "no route"})
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"steps": steps[id]})
	}))
}

// toolSteps returns the committed steps of a run of two tool-calling
// steps, its tool results committed at the given times.
func toolSteps(committed ...time.Time) []Step {
	var out []Step
	for i, at := range committed {
		m := Step{Kind: "model", ModelStep: i, CreatedAt: at.Add(-time.Millisecond)}
		m.Message.Role = "assistant"
		m.Message.ToolCalls = append(m.Message.ToolCalls, struct {
			ID string `json:"id"`
		}{ID: "call_" + string(rune('0'+i))})
		t := Step{Kind: "tool", ModelStep: i, CreatedAt: at}
		t.Message.Role = "tool"
		t.Message.ToolCallID = "call_" + string(rune('0'+i))
		out = append(out, m, t)
	}
	return out
}

func writeLog(t *testing.T, lines ...string) (string, []int64) {
	path := filepath.Join(t.TempDir(), "calls.log")
	var b strings.Builder
	var offs []int64
	for _, l := range lines {
		offs = append(offs, int64(b.Len()))
		b.WriteString("echo " + l + " -\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, offs
}

func TestCheckTools(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Run r: step0's call made at 1s and committed; a kill at 5s; step1's
	// call, in flight at the kill, made again after it.
	lines := []string{"r/step0/0", "r/step1/0", "r/step1/0"}
	cases := []struct {
		name     string
		lines    []string
		markAt   int // the kill's mark lies before this line
		steps    map[string][]Step
		strict   bool
		want     string // in the field
		problems string
	}{
		{"in flight repeated", lines, 2, map[string][]Step{"r": toolSteps(t0.Add(time.Second), t0.Add(6*time.Second))},
			false, "reexecuted=1(across_fault:1,no_fault:0) steps_redone=0 in_flight_repeated=1", ""},
		{"committed call made again", lines, 2, map[string][]Step{"r": toolSteps(t0.Add(time.Second), t0.Add(2*time.Second))},
			false, "steps_redone=1 in_flight_repeated=0", "tool call r/step1/0 made again (execution 2) after its result was committed"},
		{"made again with no fault", lines, 3, map[string][]Step{"r": toolSteps(t0.Add(time.Second), t0.Add(2*time.Second))},
			false, "reexecuted=1(across_fault:0,no_fault:1) steps_redone=1", "with no fault since the one before"},
		{"no steps served", lines, 2, nil, false, "reexecuted=1(across_fault:1,no_fault:0) steps_redone=?", ""},
		{"missing call of a completed run", lines[:1], 1, nil, false, "tool_calls=1", "tool call r/step1/0 is not in the tool's log"},
		{"call without a key", []string{"r/step0/0", "r/step1/0", "-"}, 3, nil, false, "tool_calls=3", "without an idempotency key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, offs := writeLog(t, tc.lines...)
			var marks []logMark
			if tc.markAt < len(offs) {
				marks = []logMark{{At: t0.Add(5 * time.Second), Size: offs[tc.markAt]}}
			}
			srv := stepsServer(tc.steps)
			defer srv.Close()
			rep := checkTools(context.Background(), NewClient(srv.URL), []string{path}, marks, 2, []string{"r"})
			if f := rep.field(); !strings.Contains(f, tc.want) {
				t.Errorf("field %q, want %q", f, tc.want)
			}
			got := strings.Join(append(rep.Problems, rep.RedoneCalls...), "\n")
			if tc.problems == "" && got != "" || !strings.Contains(got, tc.problems) {
				t.Errorf("problems:\n%s\nwant one with %q", got, tc.problems)
			}
		})
	}
}

func TestScriptFor(t *testing.T) {
	for _, n := range []int{0, 3} {
		var s struct {
			Steps []map[string]any `json:"steps"`
			When  []map[string]any `json:"when"`
		}
		if err := json.Unmarshal([]byte(scriptFor(n)), &s); err != nil {
			t.Fatalf("%d steps: %v", n, err)
		}
		if want := max(n, 1) + 1; len(s.Steps) != want || len(s.When) != 1 {
			t.Fatalf("%d steps: %d steps, %d cases", n, len(s.Steps), len(s.When))
		}
	}
}

// A server kill starts the next log; a driver kill marks a size in the
// current one.
func TestReadCallsEpochs(t *testing.T) {
	first, offs := writeLog(t, "a/step0/0", "b/step0/0")
	second, _ := writeLog(t, "a/step0/0", "c/step0/0")
	marks := []logMark{{File: 0, Size: offs[1]}, {File: 1}}
	got, err := readCalls([]string{first, second, filepath.Join(t.TempDir(), "missing")}, marks)
	if err != nil {
		t.Fatal(err)
	}
	want := []execution{{"a/step0/0", 0}, {"b/step0/0", 1}, {"a/step0/0", 2}, {"c/step0/0", 2}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

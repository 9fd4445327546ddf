package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// toolServer is the name the test MCP server is configured under; the
// model sees its echo tool as toolServer + "_echo".
const toolServer = "soak"

// scriptFor is the scripted model's script: with toolSteps 0, a call of the
// built-in lookup tool, then an answer that echoes the inputs; otherwise
// toolSteps steps each calling the test MCP server's echo tool, then that
// answer. Inputs with "please fail" fail.
func scriptFor(toolSteps int) string {
	if toolSteps == 0 {
		return `{"steps":[{"delay":"30ms","tool":{"name":"lookup","arguments":"{}"}},{"delay":"30ms","answer":"echo"}],
 "when":[{"input":"please fail","steps":[{"fail":"model unavailable (scripted)"}]}]}`
	}
	var steps []string
	for i := range toolSteps {
		args, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("step %d", i)})
		steps = append(steps, fmt.Sprintf(`{"delay":"20ms","tool":{"name":%q,"arguments":%q}}`, toolServer+"_echo", args))
	}
	steps = append(steps, `{"delay":"20ms","answer":"echo"}`)
	return `{"steps":[` + strings.Join(steps, ",") + `],
 "when":[{"input":"please fail","steps":[{"fail":"model unavailable (scripted)"}]}]}`
}

// execution is one execution of a tool call, read from the test MCP
// server's log: its idempotency key, and the epoch it happened in (the
// epochs are the stretches between two faults the soak injected).
type execution struct {
	Key   string
	Epoch int
}

// logMark is a fault in the tool-call logs: it began At, and the calls
// after it are those of logs past File (0-based) and those of File past
// Size bytes. A server kill marks the start of the next log; a driver
// kill, the size of the current one.
type logMark struct {
	At   time.Time
	File int
	Size int64
}

// markLog returns the mark of the log path, the file-th, now (size 0 if
// it is not there yet).
func markLog(at time.Time, path string, file int) logMark {
	m := logMark{At: at, File: file}
	if fi, err := os.Stat(path); err == nil {
		m.Size = fi.Size()
	}
	return m
}

// readCalls reads the test MCP server's logs, in order ("tool key
// header-key" a line), and places each execution in its epoch: epoch k
// lies between marks[k-1] and marks[k].
func readCalls(paths []string, marks []logMark) ([]execution, error) {
	var out []execution
	for file, path := range paths {
		b, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return out, err
		}
		var off int64
		for _, line := range strings.SplitAfter(string(b), "\n") {
			if line == "" {
				continue
			}
			epoch := 0
			for _, m := range marks {
				if m.File < file || m.File == file && m.Size <= off {
					epoch++
				}
			}
			off += int64(len(line))
			fs := strings.Fields(line)
			if len(fs) != 3 {
				return out, fmt.Errorf("tool-call log %s: malformed line %q", path, line)
			}
			out = append(out, execution{Key: fs[1], Epoch: epoch})
		}
	}
	return out, nil
}

// ToolReport is what the tool-call log and the runs' steps show.
type ToolReport struct {
	Executions int // executions of tool calls
	Keys       int // distinct calls (idempotency keys)
	// Reexecuted counts executions after the first of a key; Across those
	// with a fault between them and the one before, Within the others.
	Reexecuted, Across, Within int
	// Steps is true when the server serves the runs' committed steps
	// (GET /v1/runs/{id}/steps); Durable when it stores them (a run with a
	// committed tool step was seen), so that Redone is meaningful.
	Steps, Durable bool
	// Redone counts executions of a call whose result had been committed
	// before they began (I9); InFlight the repeats of a call in flight at
	// a fault, with its key (allowed: at least once, keyed).
	Redone, InFlight int
	// Problems fail the soak; RedoneCalls names the calls redone, which
	// fail it where steps are durable or the soak is told to expect them.
	Problems, RedoneCalls []string
}

// field is the summary lines' field.
func (t *ToolReport) field() string {
	if t == nil {
		return ""
	}
	s := fmt.Sprintf(" tool_calls=%d reexecuted=%d(across_fault:%d,no_fault:%d)", t.Executions, t.Reexecuted, t.Across, t.Within)
	if t.Durable {
		s += fmt.Sprintf(" steps_redone=%d in_flight_repeated=%d", t.Redone, t.InFlight)
	} else {
		s += " steps_redone=?(no durable steps)"
	}
	return s
}

// Step is a committed step of a run (GET /v1/runs/{id}/steps).
type Step struct {
	Seq       int64  `json:"seq"`
	Kind      string `json:"kind"` // model, tool, take
	ModelStep int    `json:"model_step"`
	Attempt   int    `json:"attempt"`
	Message   struct {
		Role       string `json:"role"`
		ToolCallID string `json:"tool_call_id"`
		ToolCalls  []struct {
			ID string `json:"id"`
		} `json:"tool_calls"`
	} `json:"message"`
	CreatedAt time.Time `json:"created_at"`
}

// Steps lists a run's committed steps, every page. found is false when
// the server has no such route (a server without durable steps).
func (c *Client) Steps(ctx context.Context, runID string) (steps []Step, found bool, err error) {
	cursor := ""
	for {
		path := "/v1/runs/" + runID + "/steps"
		if cursor != "" {
			path += "?cursor=" + cursor
		}
		var page struct {
			Steps      []Step `json:"steps"`
			NextCursor string `json:"next_cursor"`
		}
		if _, err := c.do(ctx, "GET", path, nil, "", &page); err != nil {
			if p, ok := err.(*Problem); ok && p.Status == 404 {
				return nil, false, nil
			}
			return nil, true, err
		}
		steps = append(steps, page.Steps...)
		if page.NextCursor == "" || len(page.Steps) == 0 {
			return steps, true, nil
		}
		cursor = page.NextCursor
	}
}

// committedCalls returns, for each idempotency key of a run's tool calls
// (runID/stepN/callIndex), when its result was first committed.
func committedCalls(runID string, steps []Step) map[string]time.Time {
	// The call's index in the model message that asked for it.
	index := map[string]int{}
	for _, s := range steps {
		if s.Kind == "model" {
			for i, tc := range s.Message.ToolCalls {
				index[fmt.Sprintf("%d/%s", s.ModelStep, tc.ID)] = i
			}
		}
	}
	out := map[string]time.Time{}
	for _, s := range steps {
		if s.Kind != "tool" {
			continue
		}
		i, ok := index[fmt.Sprintf("%d/%s", s.ModelStep, s.Message.ToolCallID)]
		if !ok {
			continue
		}
		key := runID + "/step" + strconv.Itoa(s.ModelStep) + "/" + strconv.Itoa(i)
		if t, seen := out[key]; !seen || s.CreatedAt.Before(t) {
			out[key] = s.CreatedAt
		}
	}
	return out
}

// checkTools reads the tool-call log and, where the server serves them,
// the committed steps of the runs whose calls were made more than once,
// and counts the calls made again. paths are the logs, one a server
// start, in order; toolSteps is how many tool-calling
// steps each completed run made (its calls must all be in the log);
// completed lists those runs.
func checkTools(ctx context.Context, c *Client, paths []string, marks []logMark, toolSteps int, completed []string) *ToolReport {
	t := &ToolReport{}
	execs, err := readCalls(paths, marks)
	if err != nil {
		t.Problems = append(t.Problems, err.Error())
	}
	byKey := map[string][]execution{}
	var order []string
	for _, e := range execs {
		t.Executions++
		if e.Key == "-" {
			t.Problems = append(t.Problems, "a tool call was made without an idempotency key")
			continue
		}
		if _, ok := byKey[e.Key]; !ok {
			order = append(order, e.Key)
		}
		byKey[e.Key] = append(byKey[e.Key], e)
	}
	t.Keys = len(byKey)
	for _, id := range completed {
		for s := range toolSteps {
			if k := fmt.Sprintf("%s/step%d/0", id, s); len(byKey[k]) == 0 {
				t.Problems = append(t.Problems, fmt.Sprintf("run %s completed, but its tool call %s is not in the tool's log", id, k))
			}
		}
	}

	// The runs whose calls were made again, and their committed steps.
	again := map[string]bool{}
	for _, k := range order {
		es := byKey[k]
		for i := 1; i < len(es); i++ {
			t.Reexecuted++
			if es[i].Epoch > es[i-1].Epoch {
				t.Across++
			} else {
				t.Within++
			}
		}
		if len(es) > 1 {
			again[runOfKey(k)] = true
		}
	}
	if len(completed) > 0 {
		_, t.Steps, err = c.Steps(ctx, completed[0])
		if err != nil {
			t.Problems = append(t.Problems, "reading the steps of "+completed[0]+": "+err.Error())
		}
	}
	if !t.Steps {
		return t
	}
	committed := map[string]time.Time{}
	probe := append([]string{}, completed[:min(len(completed), 20)]...)
	for id := range again {
		probe = append(probe, id)
	}
	for _, id := range probe {
		steps, _, err := c.Steps(ctx, id)
		if err != nil {
			t.Problems = append(t.Problems, fmt.Sprintf("reading the steps of %s: %v", id, err))
			continue
		}
		for k, at := range committedCalls(id, steps) {
			committed[k] = at
			t.Durable = true
		}
	}
	if !t.Durable {
		return t
	}
	for _, k := range order {
		es := byKey[k]
		at, ok := committed[k]
		for i := 1; i < len(es); i++ {
			// With no fault since the one before, nothing excuses making
			// the call again; after one, it is a redo if its result had
			// been committed before the epoch began.
			switch {
			case es[i].Epoch == es[i-1].Epoch:
				t.Redone++
				t.RedoneCalls = append(t.RedoneCalls, fmt.Sprintf("tool call %s made again (execution %d) with no fault since the one before", k, i+1))
			case ok && es[i].Epoch <= len(marks) && at.Before(marks[es[i].Epoch-1].At):
				t.Redone++
				t.RedoneCalls = append(t.RedoneCalls, fmt.Sprintf("tool call %s made again (execution %d) after its result was committed at %s",
					k, i+1, at.Format(time.RFC3339Nano)))
			default:
				t.InFlight++
			}
		}
	}
	return t
}

// runOfKey is the run id of an idempotency key runID/stepN/callIndex.
func runOfKey(k string) string {
	if i := strings.Index(k, "/"); i >= 0 {
		return k[:i]
	}
	return k
}

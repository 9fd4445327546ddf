package wasm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/host/toolpolicy"
)

// ToolCase is one toolPolicy case for RunToolCases. The file is a JSON
// array of them.
type ToolCase struct {
	Name   string `json:"name"`
	Tool   string `json:"tool"`
	Server string `json:"server,omitempty"`
	// Arguments is the JSON text of the call's arguments ("{}" when
	// absent); Repeat, if above 1, repeats it that many times (for large
	// arguments; the text need not be JSON).
	Arguments *string `json:"arguments,omitempty"`
	Repeat    int     `json:"repeat,omitempty"`
	// Want is the expected decision: allow, deny or ask.
	Want string `json:"want"`
	// Message, Prompt and Approvals, if present, are expected as the host
	// reports them (an empty text replaced by the host's).
	Message   *string `json:"message,omitempty"`
	Prompt    *string `json:"prompt,omitempty"`
	Approvals *int    `json:"approvals,omitempty"`
}

// ReadToolCases reads a tool cases file: a JSON array of ToolCase.
func ReadToolCases(path string) ([]ToolCase, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var cs []ToolCase
	if err := dec.Decode(&cs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, c := range cs {
		n := 2
		if c.Arguments != nil {
			n = len(*c.Arguments)
		}
		if c.Repeat < 0 || c.Repeat > 1<<24 || c.Repeat*n > guestabi.MaxRequestBytes {
			return nil, fmt.Errorf("%s: tool case %d (%s): repeat %d is out of range", path, i+1, c.Name, c.Repeat)
		}
		if _, err := toolpolicy.ParseVerdict(c.Want); err != nil {
			return nil, fmt.Errorf("%s: tool case %d (%s): %w", path, i+1, c.Name, err)
		}
	}
	return cs, nil
}

// RunToolCases loads the module at path and decides every tool call of
// casesPath with its toolPolicy hook, printing a table of expected against
// actual decisions to w: the logic of `agenthost policy test FILE.wasm
// --tool-cases FILE`. Like RunCases, it returns ErrMismatch if any case
// differs, and a failed guest call is a failed case.
func RunToolCases(ctx context.Context, w io.Writer, path, casesPath string, opts CheckOptions) error {
	cases, err := ReadToolCases(casesPath)
	if err != nil {
		return err
	}
	e, err := NewEngine(ctx, EngineConfig{CacheDir: opts.CacheDir})
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	var failure error
	m, err := e.LoadFile(ctx, path, Options{
		Config:       opts.Config,
		MaxInstances: 1,
		CallTimeout:  opts.CallTimeout,
		OnFailure:    func(f Failure) { failure = f.Err },
	})
	if err != nil {
		return err
	}
	defer m.Close(ctx)
	if !m.HasHook(guestabi.HookToolPolicy) {
		return fmt.Errorf("%s: guest %s has no toolPolicy hook", path, m.GuestManifest().Name)
	}
	table := newCaseTable(w)
	for i, c := range cases {
		failure = nil
		args := "{}"
		if c.Arguments != nil {
			args = *c.Arguments
		}
		if c.Repeat > 1 {
			args = strings.Repeat(args, c.Repeat)
		}
		d, _ := m.DecideTool(ctx, toolpolicy.Call{Tool: c.Tool, Server: c.Server, Arguments: args, CallID: "call-" + strconv.Itoa(i+1),
			IdempotencyKey: "run/step1/" + strconv.Itoa(i), Step: 1, RunID: "run", ThreadID: "thread"})
		want := describeTool(c.Want, c.Message, c.Prompt, c.Approvals)
		got := describeTool(string(d.Verdict), strp(d.Message, c.Message), strp(d.Prompt, c.Prompt), intp(d.Approvals, c.Approvals))
		table.row(i, c.Name, want, got, failure)
	}
	return table.finish("tool cases")
}

// describeTool writes a decision for the cases table: the verdict and the
// parts a case states.
func describeTool(verdict string, message, prompt *string, approvals *int) string {
	s := verdict
	if approvals != nil {
		s += " ×" + strconv.Itoa(*approvals)
	}
	if message != nil {
		s += " " + strconv.Quote(*message)
	}
	if prompt != nil {
		s += " " + strconv.Quote(*prompt)
	}
	return s
}

// strp returns &v when the case states the value (want non-nil).
func strp(v string, want *string) *string {
	if want == nil {
		return nil
	}
	return &v
}

func intp(v int, want *int) *int {
	if want == nil {
		return nil
	}
	return &v
}

// checkToolRequests are the valid tool calls Check decides with a
// toolPolicy hook: names a policy is likely to look at, arguments of every
// shape (not JSON included: the model's text is not validated), large
// arguments.
func checkToolRequests() []toolpolicy.Call {
	call := func(tool, server, args string) toolpolicy.Call {
		return toolpolicy.Call{Tool: tool, Server: server, Arguments: args, CallID: "call_1",
			IdempotencyKey: "run-1/step2/0", Step: 3, RunID: "run-1", ThreadID: "t"}
	}
	big := `{"text": "` + strings.Repeat("lorem ipsum dolor sit amet ", 1<<20/27+1) + `"}`
	return []toolpolicy.Call{
		call("search", "", `{"query": "weather"}`),
		call("fs_read_file", "fs", `{"path": "/tmp/x"}`),
		call("fs_delete_file", "fs", `{"path": "/tmp/x"}`),
		call("shell_exec", "shell", `{"cmd": "ls"}`),
		call("payments_refund", "pay", `{"amount": 250.5, "currency": "EUR"}`),
		call("t", "", `{}`),
		call("", "", ``),
		call("résumé_要約", "", `{"x": "ü"}`),
		call("list", "", `[1, 2, 3]`),
		call("broken", "", `{"unterminated": `),
		call("write", "fs", big),
	}
}

// checkTools decides checkToolRequests with m's toolPolicy hook, printing a
// summary line to tw, and returns the failures.
func checkTools(ctx context.Context, tw io.Writer, m *Module, failure *error) []error {
	var errs []error
	seen := map[toolpolicy.Verdict]int{}
	var slowest time.Duration
	for _, c := range checkToolRequests() {
		*failure = nil
		start := time.Now()
		d, _ := m.DecideTool(ctx, c)
		slowest = max(slowest, time.Since(start))
		if *failure != nil {
			errs = append(errs, fmt.Errorf("tool call %q: %w", c.Tool, *failure))
			continue
		}
		seen[d.Verdict]++
	}
	var got []string
	for _, v := range []toolpolicy.Verdict{toolpolicy.Allow, toolpolicy.Deny, toolpolicy.Ask} {
		if seen[v] > 0 {
			got = append(got, fmt.Sprintf("%s ×%d", v, seen[v]))
		}
	}
	if len(got) == 0 {
		got = []string{"nothing"}
	}
	fmt.Fprintf(tw, "tools:\t%d calls, %d failed; returned %s; slowest %s\n", len(checkToolRequests()), len(errs), strings.Join(got, ", "), slowest.Round(time.Microsecond))
	if slowest > DefaultCallTimeout {
		fmt.Fprintf(tw, "warning:\ttool calls slower than the host's default call deadline (%s): the host would fall back on such calls\n", DefaultCallTimeout)
	}
	return errs
}

package wasm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/host/policy"
)

// CheckOptions configure Check and RunCases.
type CheckOptions struct {
	// Config is the guest's configuration blob.
	Config []byte
	// CacheDir, if set, is the compilation cache to use (EngineConfig).
	CacheDir string
	// CallTimeout bounds each call as Options.CallTimeout does. Zero: for
	// RunCases, DefaultCallTimeout (the host's default); for Check, which
	// checks answers rather than speed, CheckCallTimeout (it reports a call
	// slower than the host's default).
	CallTimeout time.Duration
}

// Check loads the module at path the way the host would and prints its
// manifest to w: the logic of `agenthost policy check FILE.wasm`. A module
// the host would refuse is returned as an error (wrapping ErrInvalidModule)
// and nothing is printed.
func Check(ctx context.Context, w io.Writer, path string, opts CheckOptions) error {
	config := opts.Config
	e, err := NewEngine(ctx, EngineConfig{CacheDir: opts.CacheDir})
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var failure error
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = CheckCallTimeout
	}
	m, err := e.Load(ctx, b, Options{Config: config, MaxInstances: 1, CallTimeout: opts.CallTimeout, Logger: slog.New(slog.DiscardHandler),
		OnFailure: func(f Failure) { failure = f.Err }})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer m.Close(ctx)
	gm := m.GuestManifest()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "file:\t%s (%d bytes)\n", path, len(b))
	fmt.Fprintf(tw, "abi:\t%d\n", guestabi.Version)
	fmt.Fprintf(tw, "name:\t%s\n", gm.Name)
	fmt.Fprintf(tw, "version:\t%s\n", gm.Version)
	fmt.Fprintf(tw, "hooks:\t%s\n", strings.Join(gm.Hooks, ", "))
	if len(gm.Actions) > 0 {
		fmt.Fprintf(tw, "actions:\t%s\n", strings.Join(gm.Actions, ", "))
	}
	var imports []string
	for _, f := range m.compiled.ImportedFunctions() {
		mod, name, _ := f.Import()
		imports = append(imports, mod+"."+name)
	}
	if len(imports) == 0 {
		imports = []string{"(none)"}
	}
	fmt.Fprintf(tw, "imports:\t%s\n", strings.Join(imports, ", "))
	var errs []error
	if m.HasHook(guestabi.HookToolPolicy) {
		errs = checkTools(ctx, tw, m, &failure)
	}
	if !m.HasHook(guestabi.HookInputPolicy) {
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s: %w: %w", path, ErrCheckFailed, errors.Join(errs...))
		}
		return nil
	}
	// Decide a built-in set of valid requests: every one must succeed with a
	// declared action.
	seen := map[string]int{}
	toolFailures := len(errs)
	var slowest time.Duration
	var slowName string
	for _, c := range checkRequests() {
		failure = nil
		start := time.Now()
		d, _ := m.Decide(ctx, c.req)
		if took := time.Since(start); took > slowest {
			slowest, slowName = took, c.name
		}
		if failure != nil {
			errs = append(errs, fmt.Errorf("request %q: %w", c.name, failure))
			continue
		}
		seen[string(d.Action)]++
	}
	var got []string
	for _, a := range gm.Actions {
		if seen[a] > 0 {
			got = append(got, fmt.Sprintf("%s ×%d", a, seen[a]))
		}
	}
	if len(got) == 0 {
		got = []string{"nothing"}
	}
	fmt.Fprintf(tw, "decide:\t%d requests, %d failed; returned %s\n", len(checkRequests()), len(errs)-toolFailures, strings.Join(got, ", "))
	fmt.Fprintf(tw, "slowest:\t%s (%s)\n", slowest.Round(time.Microsecond), slowName)
	if slowest > DefaultCallTimeout {
		fmt.Fprintf(tw, "warning:\tslower than the host's default call deadline (%s): the host would fall back on such requests\n", DefaultCallTimeout)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %w: %w", path, ErrCheckFailed, errors.Join(errs...))
	}
	return nil
}

// CheckCallTimeout is Check's default call deadline.
const CheckCallTimeout = 5 * time.Second

// ErrCheckFailed is returned by Check when the guest loads but fails to
// decide one of the built-in requests or tool calls, or returns an action its
// manifest does not declare.
var ErrCheckFailed = errors.New("the guest failed on valid requests")

type checkRequest struct {
	name string
	req  policy.Request
}

// checkRequests are the valid requests Check decides: a thread with only
// queued runs and a busy one, hints, metadata, many queued runs, large
// inputs (the HTTP API's default body limit is 1 MiB).
func checkRequests() []checkRequest {
	active := func(steps int, inputs ...string) *policy.RunInfo {
		return &policy.RunInfo{RunID: "run-active", Seq: 7, Steps: steps, Inputs: inputs}
	}
	queued := func(n int, input string) []policy.RunInfo {
		rs := make([]policy.RunInfo, n)
		for i := range rs {
			rs[i] = policy.RunInfo{RunID: fmt.Sprintf("run-q%d", i), Seq: int64(8 + i), Inputs: []string{input}}
		}
		return rs
	}
	in := func(content, hint string) policy.Input { return policy.Input{Content: content, Hint: hint} }
	big := strings.Repeat("lorem ipsum dolor sit amet ", 1<<20/27+1)
	return []checkRequest{
		{"no active run, one queued", policy.Request{ThreadID: "t", Input: in("hello", ""), Queued: queued(1, "first")}},
		{"busy thread", policy.Request{ThreadID: "t", Input: in("and then?", ""), Active: active(3, "summarise this thread")}},
		{"busy thread, step 0", policy.Request{ThreadID: "t", Input: in("x", ""), Active: active(0, "a")}},
		{"empty content", policy.Request{ThreadID: "t", Input: in("", ""), Active: active(1, "a")}},
		{"hint refine", policy.Request{ThreadID: "t", Input: in("in bullet points", "refine"), Active: active(2, "a")}},
		{"hint redirect", policy.Request{ThreadID: "t", Input: in("something else", "redirect"), Active: active(2, "a")}},
		{"unknown hint", policy.Request{ThreadID: "t", Input: in("x", "some-hint"), Active: active(2, "a")}},
		{"metadata", policy.Request{ThreadID: "t", Input: policy.Input{Content: "x", Metadata: map[string]string{"lang": "en", "user": "u-1", "z": ""}}, Active: active(1, "a")}},
		{"non-ASCII content", policy.Request{ThreadID: "t-é", Input: in("résumé, s'il vous plaît — 要約", ""), Active: active(1, "ü")}},
		{"queued runs", policy.Request{ThreadID: "t", Input: in("more", ""), Active: active(4, "a", "b"), Queued: queued(3, "waiting")}},
		{"100 queued runs", policy.Request{ThreadID: "t", Input: in("more", ""), Active: active(4, "a"), Queued: queued(100, "waiting input")}},
		{"large input (1 MiB)", policy.Request{ThreadID: "t", Input: in(big, ""), Active: active(9, big[:64<<10]), Queued: queued(2, big[:64<<10])}},
		{"large input, hint refine", policy.Request{ThreadID: "t", Input: in(big, "refine"), Active: active(1, "a")}},
	}
}

// Case is one decision case for RunCases. The file is a JSON array of them.
type Case struct {
	Name    string `json:"name"`
	Content string `json:"content"`
	// Repeat, if above 1, repeats Content that many times (for large
	// inputs).
	Repeat int               `json:"repeat,omitempty"`
	Hint   string            `json:"hint,omitempty"`
	Meta   map[string]string `json:"metadata,omitempty"`
	// Active describes the thread's active run; absent: none.
	Active *CaseRun `json:"active,omitempty"`
	// Queued are the thread's queued runs.
	Queued []CaseRun `json:"queued,omitempty"`
	// Want is the expected action.
	Want string `json:"want"`
	// CoalescePending, if present, is the expected flag.
	CoalescePending *bool `json:"coalescePending,omitempty"`
}

// CaseRun is a run of a Case's thread.
type CaseRun struct {
	Steps  int      `json:"steps,omitempty"`
	Inputs []string `json:"inputs,omitempty"`
}

// ErrMismatch is returned by RunCases when a case's decision differs from the
// expected one.
var ErrMismatch = errors.New("decisions differ from the expected ones")

// ReadCases reads a cases file: a JSON array of Case.
func ReadCases(path string) ([]Case, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var cs []Case
	if err := dec.Decode(&cs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, c := range cs {
		if c.Repeat < 0 || c.Repeat > 1<<24 || c.Repeat*len(c.Content) > guestabi.MaxRequestBytes {
			return nil, fmt.Errorf("%s: case %d (%s): repeat %d is out of range", path, i+1, c.Name, c.Repeat)
		}
		if guestabi.ActionCode(c.Want) == 0 {
			return nil, fmt.Errorf("%s: case %d (%s): want %q is not an action", path, i+1, c.Name, c.Want)
		}
	}
	return cs, nil
}

// RunCases loads the module at path and decides every case of casesPath,
// printing a table of expected against actual decisions to w: the logic of
// `agenthost policy test FILE.wasm --cases FILE`. It returns ErrMismatch if
// any case differs (the command exits with status 1), and an error for a
// module that does not load. A failed guest call is a failed case: a case
// never passes on the fallback.
func RunCases(ctx context.Context, w io.Writer, path, casesPath string, opts CheckOptions) error {
	config := opts.Config
	cases, err := ReadCases(casesPath)
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
		Config:       config,
		MaxInstances: 1,
		CallTimeout:  opts.CallTimeout,
		OnFailure:    func(f Failure) { failure = f.Err },
	})
	if err != nil {
		return err
	}
	defer m.Close(ctx)
	if !m.HasHook(guestabi.HookInputPolicy) {
		return fmt.Errorf("%s: guest %s has no inputPolicy hook", path, m.GuestManifest().Name)
	}
	table := newCaseTable(w)
	for i, c := range cases {
		failure = nil
		req := policy.Request{
			ThreadID: "thread",
			Input:    policy.Input{Content: c.Content, Hint: c.Hint, Metadata: c.Meta},
		}
		if c.Repeat > 1 {
			req.Input.Content = strings.Repeat(c.Content, c.Repeat)
		}
		if c.Active != nil {
			req.Active = &policy.RunInfo{RunID: "active", Seq: 1, Steps: c.Active.Steps, Inputs: c.Active.Inputs}
		}
		for j, q := range c.Queued {
			req.Queued = append(req.Queued, policy.RunInfo{RunID: fmt.Sprintf("queued-%d", j+1), Seq: int64(j + 2), Steps: q.Steps, Inputs: q.Inputs})
		}
		d, _ := m.Decide(ctx, req)
		want, got := c.Want, string(d.Action)
		if c.CoalescePending != nil {
			want += coalesceSuffix(*c.CoalescePending)
			got += coalesceSuffix(d.CoalescePending)
		}
		table.row(i, c.Name, want, got, failure)
	}
	return table.finish("cases")
}

// caseTable writes the table of `policy test`: a row per case, then the
// count, and fails with ErrMismatch when a case failed.
type caseTable struct {
	tw     *tabwriter.Writer
	n, bad int
}

func newCaseTable(w io.Writer) *caseTable {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tWANT\tGOT\tRESULT")
	return &caseTable{tw: tw}
}

// row writes case i (named name, or by its place): what it wanted, what the
// guest gave, or failure when the call failed.
func (t *caseTable) row(i int, name, want, got string, failure error) {
	t.n++
	if name == "" {
		name = fmt.Sprintf("#%d", i+1)
	}
	result := "ok"
	switch {
	case failure != nil:
		got, result = "error: "+failure.Error(), "FAIL"
		t.bad++
	case want != got:
		result = "FAIL"
		t.bad++
	}
	fmt.Fprintf(t.tw, "%s\t%s\t%s\t%s\n", name, want, got, result)
}

// finish writes the count of the cases (what they are called) and reports
// the failed ones.
func (t *caseTable) finish(what string) error {
	fmt.Fprintf(t.tw, "%d %s, %d failed\n", t.n, what, t.bad)
	if err := t.tw.Flush(); err != nil {
		return err
	}
	if t.bad > 0 {
		return fmt.Errorf("%w: %d of %d %s", ErrMismatch, t.bad, t.n, what)
	}
	return nil
}

func coalesceSuffix(b bool) string {
	if b {
		return "+coalesce"
	}
	return ""
}

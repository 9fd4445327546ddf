package wasm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/host/policy"
)

// CheckOptions configure Check and RunCases.
type CheckOptions struct {
	// Config is the guest's configuration blob.
	Config []byte
	// CacheDir, if set, is the compilation cache to use (EngineConfig).
	CacheDir string
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
	m, err := e.Load(ctx, b, Options{Config: config, MaxInstances: 1})
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
	return tw.Flush()
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
		OnFailure:    func(f Failure) { failure = f.Err },
	})
	if err != nil {
		return err
	}
	defer m.Close(ctx)
	if !m.HasHook(guestabi.HookInputPolicy) {
		return fmt.Errorf("%s: guest %s has no inputPolicy hook", path, m.GuestManifest().Name)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tWANT\tGOT\tRESULT")
	bad := 0
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
		name := c.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i+1)
		}
		want, got := c.Want, string(d.Action)
		if c.CoalescePending != nil {
			want += coalesceSuffix(*c.CoalescePending)
			got += coalesceSuffix(d.CoalescePending)
		}
		result := "ok"
		switch {
		case failure != nil:
			got, result = "error: "+failure.Error(), "FAIL"
			bad++
		case want != got:
			result = "FAIL"
			bad++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, want, got, result)
	}
	fmt.Fprintf(tw, "%d cases, %d failed\n", len(cases), bad)
	if err := tw.Flush(); err != nil {
		return err
	}
	if bad > 0 {
		return fmt.Errorf("%w: %d of %d cases", ErrMismatch, bad, len(cases))
	}
	return nil
}

func coalesceSuffix(b bool) string {
	if b {
		return "+coalesce"
	}
	return ""
}

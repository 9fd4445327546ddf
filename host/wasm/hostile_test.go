package wasm

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
)

// TestHostileLoad: modules the host must refuse at load, each with an error
// that says why.
func TestHostileLoad(t *testing.T) {
	e := newEngine(t, EngineConfig{MemoryLimitPages: 64})
	read := func(name string) []byte {
		b, err := os.ReadFile(hostile(name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name string
		wasm []byte
		want []string
	}{
		{"garbage", []byte("this is not a wasm module at all"), []string{"not a WebAssembly module"}},
		{"empty", nil, []string{"not a WebAssembly module"}},
		{"truncated", read("trap")[:40], []string{"compile"}},
		{"wrong ABI version", read("abi2"), []string{"ABI version 2", "supports version 1"}},
		{"unprovided import", read("sockimport"), []string{"wasi_snapshot_preview1.sock_accept", "does not provide"}},
		{"memory beyond the cap", read("hugemem"), []string{"memory"}},
		{"not a guest", read("trap")[:8], []string{"agenthost_abi_version"}},
		{"wrong signature", read("badsig"), []string{"agenthost_abi_version has signature () -> (i64), want () -> (i32)"}},
		{"memory not exported", read("nomemory"), []string{`no exported memory named "memory"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := e.Load(context.Background(), c.wasm, Options{})
			if err == nil {
				m.Close(context.Background())
				t.Fatal("loaded")
			}
			if !errors.Is(err, ErrInvalidModule) || !containsAll(err.Error(), c.want...) {
				t.Errorf("err = %v, want ErrInvalidModule mentioning %q", err, c.want)
			}
		})
	}
	// A guest that never returns its manifest is stopped by the load timeout.
	_, err := e.Load(context.Background(), read("manifestloop"), Options{LoadTimeout: 50 * time.Millisecond})
	if !errors.Is(err, ErrInvalidModule) || !containsAll(err.Error(), "agenthost_manifest", "deadline exceeded") {
		t.Errorf("manifestloop: %v", err)
	}
	// The engine still loads and runs a good guest afterwards.
	m := load(t, e, cGuest(), Options{})
	if d, err := m.Decide(context.Background(), request(decideCases[1])); err != nil || d.Action != runstate.ActionInject {
		t.Errorf("good guest after refusals: %v %v", d, err)
	}
}

// TestHostileCalls: guests that load but misbehave when called. Each call
// returns the fallback, is reported, and the host keeps deciding.
func TestHostileCalls(t *testing.T) {
	e := newEngine(t, EngineConfig{MemoryLimitPages: 64})
	good := load(t, e, cGuest(), Options{})
	cases := []struct {
		fixture string
		want    []string
		discard bool
		timeout time.Duration
	}{
		{"loop", []string{"deadline exceeded"}, true, 50 * time.Millisecond},
		{"membomb", []string{"unreachable"}, true, 0},
		{"trap", []string{"divide by zero"}, true, 0},
		{"undeclared", []string{`"reject"`, "manifest does not declare"}, false, 0},
		{"badresult", []string{"outside memory"}, false, 0},
	}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			var (
				mu       sync.Mutex
				failures []Failure
				logs     bytes.Buffer
			)
			fallback := runstate.Decision{Action: runstate.ActionInterrupt}
			m := load(t, e, hostile(c.fixture), Options{
				Fallback:    fallback,
				CallTimeout: c.timeout,
				Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
				OnFailure: func(f Failure) {
					mu.Lock()
					failures = append(failures, f)
					mu.Unlock()
				},
			})
			if !m.Manifest().CanReturn(runstate.ActionInterrupt) {
				t.Errorf("manifest %v does not declare the fallback", m.Manifest().Actions)
			}
			for i := range 2 {
				d, err := m.Decide(context.Background(), request(decideCases[0]))
				if !isFallback(err, d) || d != fallback {
					t.Fatalf("call %d: got %+v, %v; want the fallback %+v", i, d, err, fallback)
				}
				// The host keeps deciding with a good guest in between.
				if d, err := good.Decide(context.Background(), request(decideCases[1])); err != nil || d.Action != runstate.ActionInject {
					t.Fatalf("good guest: %+v, %v", d, err)
				}
			}
			if len(failures) != 2 {
				t.Fatalf("%d failures reported, want 2", len(failures))
			}
			for _, f := range failures {
				if f.Module != c.fixture || f.Hook != "inputPolicy" || f.Fallback != fallback || !containsAll(f.Err.Error(), c.want...) {
					t.Errorf("failure %+v (%v), want error mentioning %q", f, f.Err, c.want)
				}
			}
			st := m.Stats()
			if st.Calls != 2 || st.Failures != 2 {
				t.Errorf("stats %+v", st)
			}
			// The instance of each failed call is thrown away and the next
			// call starts a new one.
			if c.discard && (st.Discarded != 2 || st.Instances != 2) {
				t.Errorf("stats %+v: want both trapped instances discarded and replaced", st)
			}
			if !strings.Contains(logs.String(), "guest call failed") {
				t.Errorf("no failure logged: %q", logs.String())
			}
		})
	}
}

// TestTrappedInstanceReplaced: a trap discards the instance; the next call
// gets a fresh one and decides normally.
func TestTrappedInstanceReplaced(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	var failures int
	m := load(t, e, hostile("sometimes"), Options{MaxInstances: 1, OnFailure: func(Failure) { failures++ }})
	for i, content := range []string{"x", "", "y", "", "z"} {
		d, err := m.Decide(context.Background(), policy.Request{Input: policy.Input{Content: content}})
		if (err != nil) != (content == "") || err != nil && !isFallback(err, d) || d.Action != runstate.ActionQueue {
			t.Fatalf("call %d: %+v %v", i, d, err)
		}
	}
	// One instance at load, one after each trap.
	if st := m.Stats(); failures != 2 || st.Failures != 2 || st.Discarded != 2 || st.Instances != 3 {
		t.Errorf("failures %d, stats %+v", failures, m.Stats())
	}
}

// TestCallerContext: a caller's cancelled context is a failure like any
// other: fallback, and the host goes on.
func TestCallerContext(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	m := load(t, e, hostile("loop"), Options{MaxInstances: 1, CallTimeout: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	d, err := m.Decide(ctx, policy.Request{})
	if !isFallback(err, d) || d.Action != runstate.ActionQueue {
		t.Fatalf("%+v %v", d, err)
	}
	if st := m.Stats(); st.Failures != 1 || st.Discarded != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestGuestLog(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	var logs bytes.Buffer
	m := load(t, e, hostile("logger"), Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if d, err := m.Decide(context.Background(), policy.Request{}); err != nil || d.Action != runstate.ActionQueue {
		t.Fatalf("%+v %v", d, err)
	}
	if !containsAll(logs.String(), "level=WARN", `msg="hello from a guest"`, "guest=logger") {
		t.Errorf("log: %q", logs.String())
	}
}

// TestGoGuestMisbehaving: a Go guest's panic and error become guest errors
// (the instance survives), a stack overflow or an allocation past the memory
// cap abort the Go runtime, which traps (its own message is in the error); each
// is contained and the guest keeps deciding.
func TestGoGuestMisbehaving(t *testing.T) {
	e := newEngine(t, EngineConfig{MemoryLimitPages: 256})
	path := buildGuest(t, "unruly", "./host/wasm/testdata/goguest/unruly")
	var (
		failures []Failure
		logs     bytes.Buffer
	)
	m := load(t, e, path, Options{
		MaxInstances: 1,
		// Growing the stack to the memory cap takes seconds on a loaded
		// machine: the deadline must not be what stops it.
		CallTimeout: time.Minute,
		Fallback:    runstate.Decision{Action: runstate.ActionReject},
		Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
		OnFailure:   func(f Failure) { failures = append(failures, f) },
	})
	cases := []struct {
		content string
		want    []string
		discard bool
	}{
		{"panic", []string{"guest error", "panic: asked to panic"}, false},
		{"error", []string{"guest error", "asked to fail"}, false},
		{"overflow", []string{"unreachable", "fatal error:"}, true}, // stack growth meets the cap
		{"hog", []string{"unreachable", "fatal error: out of memory"}, true},
	}
	for _, c := range cases {
		failures = nil
		before := m.Stats()
		d, err := m.Decide(context.Background(), policy.Request{Input: policy.Input{Content: c.content}})
		if !isFallback(err, d) || d.Action != runstate.ActionReject {
			t.Errorf("%s: got %+v %v, want the fallback", c.content, d, err)
		}
		if len(failures) != 1 || !containsAll(failures[0].Err.Error(), c.want...) {
			t.Errorf("%s: failures %v, want one mentioning %q", c.content, failures, c.want)
		}
		if discarded := m.Stats().Discarded - before.Discarded; discarded != map[bool]uint64{true: 1}[c.discard] {
			t.Errorf("%s: %d instances discarded", c.content, discarded)
		}
		if d, err := m.Decide(context.Background(), policy.Request{Input: policy.Input{Content: "fine"}}); err != nil || d.Action != runstate.ActionQueue {
			t.Errorf("after %s: got %+v %v", c.content, d, err)
		}
	}
	if _, err := m.Decide(context.Background(), policy.Request{Input: policy.Input{Content: "log"}}); err != nil {
		t.Fatal(err)
	}
	if !containsAll(logs.String(), "hello from Go", "guest=unruly") {
		t.Errorf("log: %q", logs.String())
	}

	// A 3 MiB error (10 MiB: abi/guestabi's TestGuestErrorIsCut) is cut and made safe everywhere it goes: the failure,
	// the decision's error, the log.
	logs.Reset()
	failures = nil
	d, err := m.Decide(context.Background(), policy.Request{Input: policy.Input{Content: "bigerror"}})
	if !isFallback(err, d) || len(err.Error()) > 2*guestabi.MaxErrorMessage || strings.Contains(err.Error(), "\n") {
		t.Errorf("bigerror: %d bytes of error: %.200q", len(err.Error()), err)
	}
	if len(failures) != 1 || !strings.Contains(failures[0].Err.Error(), "… (") {
		t.Errorf("bigerror: failures %v", failures)
	}
	if logs.Len() > 4*guestabi.MaxErrorMessage || strings.Count(logs.String(), "\n") != 1 || strings.Contains(logs.String(), "\nlevel=ERROR") {
		t.Errorf("bigerror: %d bytes of log: %.300q", logs.Len(), logs.String())
	}
	logs.Reset()
	if _, err := m.Decide(context.Background(), policy.Request{Input: policy.Input{Content: "badlog"}}); err != nil {
		t.Fatal(err)
	}
	if strings.Count(logs.String(), "\n") != 1 || !strings.Contains(logs.String(), `line one\\x0alevel=ERROR`) || strings.Contains(logs.String(), "\x1b") {
		t.Errorf("badlog: %q", logs.String())
	}
}

// TestLimits: the module, request and configuration size limits are
// enforced with clear errors.
func TestLimits(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	huge := make([]byte, guestabi.MaxModuleBytes+1)
	copy(huge, "\x00asm\x01\x00\x00\x00")
	if _, err := e.Load(context.Background(), huge, Options{}); !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Errorf("huge module: %v", err)
	}
	path := filepath.Join(t.TempDir(), "huge.wasm")
	if err := os.WriteFile(path, huge, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.LoadFile(context.Background(), path, Options{}); !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Errorf("huge module file: %v", err)
	}
	if _, err := e.Load(context.Background(), mustRead(t, cGuest()), Options{Config: make([]byte, guestabi.MaxRequestBytes+1)}); !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "configuration of") {
		t.Errorf("huge config: %v", err)
	}
	// The C example reads the request in place, whatever its size.
	m := load(t, e, filepath.Join(root, "guests", "examples", "c", "policy.wasm"), Options{})
	d, err := m.Decide(context.Background(), policy.Request{Input: policy.Input{Content: strings.Repeat("x", guestabi.MaxRequestBytes)}})
	if !isFallback(err, d) || !strings.Contains(err.Error(), "exceeds the limit of 16777216 bytes; the guest was not called") {
		t.Errorf("huge request: %v", err)
	}
	// Just under the limit is decided.
	d, err = m.Decide(context.Background(), policy.Request{Input: policy.Input{Content: strings.Repeat("x", guestabi.MaxRequestBytes-64)}})
	if err != nil || d.Action != runstate.ActionQueue {
		t.Errorf("request under the limit: %+v %v", d, err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestValidName(t *testing.T) {
	for n, want := range map[string]bool{"refine": true, "refine-c": true, "a.b_c-1": true, "0x": true,
		"": false, "-x": false, "a b": false, "a\nb": false, "é": false, strings.Repeat("a", 129): false, strings.Repeat("a", 128): true} {
		if validName(n) != want {
			t.Errorf("validName(%q) = %v", n, !want)
		}
	}
}

func TestCheckManifest(t *testing.T) {
	// checkManifest only looks the exports up; any definition will do.
	e := newEngine(t, EngineConfig{})
	m := load(t, e, hostile("partialstep"), Options{})
	def := m.compiled.ExportedFunctions()[guestabi.ExportPrepareStep]
	both := map[string]api.FunctionDefinition{guestabi.ExportInputPolicy: def, guestabi.ExportPrepareStep: def}
	onlyStep := map[string]api.FunctionDefinition{guestabi.ExportPrepareStep: def}
	cases := []struct {
		gm      guestabi.Manifest
		exports map[string]api.FunctionDefinition
		want    string // "" for valid
	}{
		{guestabi.Manifest{Name: "ok", Hooks: []string{"inputPolicy"}, Actions: []string{"queue"}}, both, ""},
		{guestabi.Manifest{ABI: 1, Name: "ok", Hooks: []string{"inputPolicy", "prepareStep"}, Actions: []string{"inject", "reject"}}, both, ""},
		{guestabi.Manifest{Name: "ok", Hooks: []string{"prepareStep"}}, onlyStep, ""},
		{guestabi.Manifest{ABI: 2, Name: "x", Hooks: []string{"prepareStep"}}, both, "ABI 2"},
		{guestabi.Manifest{Hooks: []string{"prepareStep"}}, both, "no name"},
		{guestabi.Manifest{Name: "x"}, both, "no hooks"},
		{guestabi.Manifest{Name: "x", Hooks: []string{"postStep"}}, both, `unknown hook "postStep"`},
		{guestabi.Manifest{Name: "x", Hooks: []string{"prepareStep", "prepareStep"}}, both, "twice"},
		{guestabi.Manifest{Name: "x", Hooks: []string{"inputPolicy"}, Actions: []string{"queue"}}, onlyStep, "does not export agenthost_input_policy"},
		{guestabi.Manifest{Name: "x", Hooks: []string{"inputPolicy"}}, both, "no actions"},
		{guestabi.Manifest{Name: "x", Hooks: []string{"inputPolicy"}, Actions: []string{"queue", "explode"}}, both, `unknown action "explode"`},
		{guestabi.Manifest{Name: "x", Hooks: []string{"inputPolicy"}, Actions: []string{"queue", "queue"}}, both, `action "queue" twice`},
		{guestabi.Manifest{Name: "x", Hooks: []string{"prepareStep"}, Actions: []string{"queue"}}, both, "without the inputPolicy hook"},
	}
	for _, c := range cases {
		err := checkManifest(c.gm, c.exports)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.gm, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: err = %v, want %q", c.gm, err, c.want)
		}
	}
}

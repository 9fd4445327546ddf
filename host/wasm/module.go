package wasm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/step"
	"github.com/agenthost/agenthost/host/toolpolicy"
)

// Defaults for Options.
const (
	DefaultCallTimeout = 100 * time.Millisecond
	DefaultLoadTimeout = 10 * time.Second
)

// Options configure one loaded module.
type Options struct {
	// Config is the configuration blob passed to the guest's agenthost_init
	// (the standard guests take JSON). A non-empty Config for a guest without
	// agenthost_init is a load error.
	Config []byte
	// Fallback is the decision a failed inputPolicy call returns. Zero: queue.
	Fallback runstate.Decision
	// CallTimeout bounds the guest's run time in every hook call (waiting for
	// an instance is bounded by the caller's context only). Zero:
	// DefaultCallTimeout.
	CallTimeout time.Duration
	// LoadTimeout bounds starting one instance (_initialize, version, init,
	// manifest). Zero: DefaultLoadTimeout.
	LoadTimeout time.Duration
	// MaxInstances bounds the pool: at most this many calls run at once, the
	// others wait. Zero: GOMAXPROCS.
	MaxInstances int
	// Logger receives guest log messages and failures. Nil: slog.Default().
	Logger *slog.Logger
	// OnFailure, if set, is called for every failed call, after the fallback
	// is chosen and before it is returned.
	OnFailure func(Failure)
	// ToolFallback is the decision a failed toolPolicy call returns. Zero:
	// ask, with a prompt of the host's. An empty prompt or message is
	// filled in by the host.
	ToolFallback toolpolicy.Decision
}

// Failure describes a failed guest call.
type Failure struct {
	Module string // the guest's manifest name
	Hook   string // guestabi.HookInputPolicy, HookPrepareStep or HookToolPolicy
	Err    error
	// Fallback is the decision returned instead (inputPolicy only).
	Fallback runstate.Decision
	// ToolFallback is the decision returned instead (toolPolicy only).
	ToolFallback toolpolicy.Decision
}

// Stats are a module's counters.
type Stats struct {
	Calls     uint64 // hook calls
	Failures  uint64 // failed calls (both hooks)
	Fallbacks uint64 // failed inputPolicy and toolPolicy calls, answered with the fallback
	Instances uint64 // instances started, including replacements
	Discarded uint64 // instances thrown away after a failure
}

// Module is a loaded guest. It implements policy.Policy and step.Hook and is
// safe for concurrent use.
type Module struct {
	eng      *Engine
	compiled wazero.CompiledModule
	opts     Options
	log      *slog.Logger
	gm       guestabi.Manifest
	pm       policy.Manifest
	hasInit  bool

	pool pool

	closeOnce sync.Once
	closed    atomic.Bool

	wd watchdog

	calls, failures, fallbacks, instances, discarded atomic.Uint64
}

var (
	_ policy.Policy = (*Module)(nil)
	_ step.Hook     = (*Module)(nil)
)

// Load compiles, checks and starts a guest. See the package documentation for
// what is checked.
func (e *Engine) Load(ctx context.Context, wasm []byte, opts Options) (*Module, error) {
	if len(wasm) < 8 || !bytes.Equal(wasm[:4], wasmMagic) {
		return nil, invalid("not a WebAssembly module (bad magic number)")
	}
	if len(wasm) > guestabi.MaxModuleBytes {
		return nil, invalid("module of %d bytes exceeds the limit of %d bytes", len(wasm), guestabi.MaxModuleBytes)
	}
	if len(opts.Config) > guestabi.MaxRequestBytes {
		return nil, invalid("configuration of %d bytes exceeds the limit of %d bytes", len(opts.Config), guestabi.MaxRequestBytes)
	}
	if opts.Fallback.Action == "" {
		opts.Fallback.Action = runstate.ActionQueue
	}
	if !opts.Fallback.Action.Valid() {
		return nil, fmt.Errorf("wasm: fallback action %q is not an action", opts.Fallback.Action)
	}
	if err := normToolFallback(&opts.ToolFallback); err != nil {
		return nil, err
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.LoadTimeout <= 0 {
		opts.LoadTimeout = DefaultLoadTimeout
	}
	if opts.MaxInstances <= 0 {
		opts.MaxInstances = runtime.GOMAXPROCS(0)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	compiled, err := e.rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, invalid("compile: %v", err)
	}
	if err := checkCompiled(compiled); err != nil {
		compiled.Close(ctx)
		return nil, err
	}
	m := &Module{
		eng:      e,
		compiled: compiled,
		opts:     opts,
		log:      opts.Logger,
		hasInit:  compiled.ExportedFunctions()[guestabi.ExportInit] != nil,
		pool:     pool{max: opts.MaxInstances},
		wd:       watchdog{epoch: time.Now()},
	}
	if len(opts.Config) > 0 && !m.hasInit {
		compiled.Close(ctx)
		return nil, invalid("configuration given, but the guest does not export %s", guestabi.ExportInit)
	}
	inst, err := m.newInstance(ctx)
	if err != nil {
		compiled.Close(ctx)
		return nil, err
	}
	mctx, cancel := context.WithTimeout(m.loadCtx(ctx), opts.LoadTimeout)
	gm, err := inst.manifest(mctx)
	cancel()
	if err == nil {
		err = checkManifest(gm, compiled.ExportedFunctions())
	}
	if err != nil {
		inst.close()
		compiled.Close(ctx)
		return nil, err
	}
	// The version is free form: keep it printable wherever it is shown.
	gm.Version = guestabi.SafeText([]byte(gm.Version), guestabi.MaxManifestString)
	m.gm = gm
	m.log = opts.Logger.With("guest", gm.Name)
	m.pm = policy.Manifest{Name: gm.Name, Version: gm.Version}
	for _, a := range gm.Actions {
		m.pm.Actions = append(m.pm.Actions, runstate.Action(a))
	}
	if m.HasHook(guestabi.HookInputPolicy) && !m.pm.CanReturn(opts.Fallback.Action) {
		// Decide can return the fallback, so the manifest must say so.
		m.pm.Actions = append(m.pm.Actions, opts.Fallback.Action)
	}
	m.pool.idle = append(m.pool.idle, inst)
	return m, nil
}

func checkManifest(gm guestabi.Manifest, exports map[string]api.FunctionDefinition) error {
	if gm.ABI != 0 && gm.ABI != guestabi.Version {
		return invalid("manifest says ABI %d, host supports %d", gm.ABI, guestabi.Version)
	}
	if gm.Name == "" {
		return invalid("manifest has no name")
	}
	if !validName(gm.Name) {
		return invalid("manifest name %q: want at most %d letters, digits, '.', '_' or '-', starting with a letter or digit",
			guestabi.SafeText([]byte(gm.Name), guestabi.MaxManifestString), guestabi.MaxManifestString)
	}
	if len(gm.Version) > guestabi.MaxManifestString {
		return invalid("manifest version is %d bytes, more than %d", len(gm.Version), guestabi.MaxManifestString)
	}
	if len(gm.Hooks) == 0 {
		return invalid("manifest declares no hooks")
	}
	seen := map[string]bool{}
	for _, h := range gm.Hooks {
		var export string
		switch h {
		case guestabi.HookInputPolicy:
			export = guestabi.ExportInputPolicy
		case guestabi.HookPrepareStep:
			export = guestabi.ExportPrepareStep
		case guestabi.HookToolPolicy:
			export = guestabi.ExportToolPolicy
		default:
			return invalid("manifest declares unknown hook %q", h)
		}
		if seen[h] {
			return invalid("manifest declares hook %q twice", h)
		}
		seen[h] = true
		if exports[export] == nil {
			return invalid("manifest declares hook %s but the module does not export %s", h, export)
		}
	}
	if seen[guestabi.HookInputPolicy] {
		if len(gm.Actions) == 0 {
			return invalid("manifest declares inputPolicy but no actions")
		}
		for i, a := range gm.Actions {
			if guestabi.ActionCode(a) == 0 {
				return invalid("manifest declares unknown action %q", a)
			}
			if slices.Contains(gm.Actions[:i], a) {
				return invalid("manifest declares action %q twice", a)
			}
		}
	} else if len(gm.Actions) > 0 {
		return invalid("manifest declares actions without the inputPolicy hook")
	}
	return nil
}

// validName reports whether a manifest name is fit for logs and metric
// labels: 1 to MaxManifestString of [A-Za-z0-9._-], starting with a letter or
// digit.
func validName(n string) bool {
	if n == "" || len(n) > guestabi.MaxManifestString {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// loadCtx is the context instances start under: the caller's values, but its
// own deadline, so that a short call deadline does not kill a slow start.
func (m *Module) loadCtx(ctx context.Context) context.Context {
	return context.WithValue(context.WithoutCancel(ctx), loggerKey{}, m.log)
}

// Manifest implements policy.Policy. Actions are the guest's plus the
// fallback's, since Decide returns the fallback when the guest fails.
func (m *Module) Manifest() policy.Manifest {
	pm := m.pm
	pm.Actions = slices.Clone(pm.Actions)
	return pm
}

// GuestManifest returns the manifest as the guest declared it.
func (m *Module) GuestManifest() guestabi.Manifest { return m.gm }

// HasHook reports whether the guest implements hook.
func (m *Module) HasHook(hook string) bool { return slices.Contains(m.gm.Hooks, hook) }

// Stats returns the module's counters.
func (m *Module) Stats() Stats {
	return Stats{Calls: m.calls.Load(), Failures: m.failures.Load(), Fallbacks: m.fallbacks.Load(),
		Instances: m.instances.Load(), Discarded: m.discarded.Load()}
}

// Close closes the module's idle instances and its compiled code; calls in
// flight finish and their instances are closed when they return.
func (m *Module) Close(ctx context.Context) error {
	m.closeOnce.Do(func() {
		m.closed.Store(true)
		for _, inst := range m.pool.close() {
			inst.close()
		}
	})
	return m.compiled.Close(ctx)
}

// ErrClosed is returned (wrapped in a failure) for calls on a closed Module.
var ErrClosed = errors.New("wasm: module closed")

func (m *Module) get(ctx context.Context) (*instance, error) {
	if m.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	inst, err := m.pool.take(ctx)
	if inst != nil || err != nil {
		return inst, err
	}
	if m.closed.Load() {
		// Handed a slot while Close ran: its compiled code may be gone.
		m.pool.give(nil)
		return nil, ErrClosed
	}
	inst, err = m.newInstance(ctx)
	if err != nil {
		m.pool.give(nil)
		return nil, err
	}
	return inst, nil
}

func (m *Module) put(inst *instance, healthy bool) {
	if !healthy {
		m.discarded.Add(1)
		inst.close()
		m.pool.give(nil)
		return
	}
	if !m.pool.give(inst) {
		inst.close() // the module was closed during the call
	}
}

func (m *Module) fail(hook string, err error, fb runstate.Decision) {
	m.failures.Add(1)
	m.log.Warn("guest call failed; using fallback", "hook", hook, "err", err, "fallback", fb.Action)
	if m.opts.OnFailure != nil {
		m.opts.OnFailure(Failure{Module: m.gm.Name, Hook: hook, Err: err, Fallback: fb})
	}
}

// ErrNoHook is returned by Decide and PrepareStep for a hook the guest does
// not implement.
var ErrNoHook = errors.New("wasm: guest does not implement this hook")

// Decide implements policy.Policy. A failed call is reported (log, OnFailure,
// Stats) and returns Options.Fallback, both as the decision and in a
// *policy.FallbackError, so the caller counts it and may use the decision.
func (m *Module) Decide(ctx context.Context, req policy.Request) (runstate.Decision, error) {
	if !m.HasHook(guestabi.HookInputPolicy) {
		return runstate.Decision{}, ErrNoHook
	}
	m.calls.Add(1)
	d, err := m.decide(ctx, &req)
	if err != nil {
		fb := m.opts.Fallback
		m.fallbacks.Add(1)
		m.fail(guestabi.HookInputPolicy, err, fb)
		return fb, &policy.FallbackError{Decision: fb, Err: err}
	}
	return d, nil
}

func (m *Module) decide(ctx context.Context, req *policy.Request) (runstate.Decision, error) {
	inst, err := m.get(ctx)
	if err != nil {
		return runstate.Decision{}, err
	}
	inst.buf = appendRequest(inst.buf[:0], req)
	out, err := m.invoke(ctx, inst, inst.policy, inst.buf)
	if err != nil {
		m.put(inst, false)
		return runstate.Decision{}, err
	}
	gd, err := guestabi.DecodeDecision(out)
	m.put(inst, true) // a bad answer is the guest's logic, not its state
	if err != nil {
		return runstate.Decision{}, err
	}
	d := runstate.Decision{Action: runstate.Action(gd.Action), CoalescePending: gd.CoalescePending}
	if !slices.Contains(m.gm.Actions, gd.Action) {
		return runstate.Decision{}, fmt.Errorf("guest %s returned %q, which its manifest does not declare (%s)", m.gm.Name, gd.Action, strings.Join(m.gm.Actions, ", "))
	}
	return d, nil
}

func appendRequest(dst []byte, r *policy.Request) []byte {
	gr := guestabi.PolicyRequest{
		ThreadID: r.ThreadID,
		Content:  r.Input.Content,
		Hint:     r.Input.Hint,
		Metadata: r.Input.Metadata,
	}
	var active guestabi.Run
	if r.Active != nil {
		active = toRun(r.Active)
		gr.Active = &active
	}
	var queued [4]guestabi.Run
	gr.Queued = queued[:0]
	for i := range r.Queued {
		gr.Queued = append(gr.Queued, toRun(&r.Queued[i]))
	}
	return guestabi.AppendPolicyRequest(dst, &gr)
}

func toRun(r *policy.RunInfo) guestabi.Run {
	return guestabi.Run{RunID: r.RunID, Seq: r.Seq, Steps: uint32(max(r.Steps, 0)), Inputs: r.Inputs}
}

// PrepareStep implements step.Hook. A failed call returns the request's
// settings unchanged and a nil error, after reporting the failure.
func (m *Module) PrepareStep(ctx context.Context, req step.Request) (step.Result, error) {
	if !m.HasHook(guestabi.HookPrepareStep) {
		return step.Result{}, ErrNoHook
	}
	m.calls.Add(1)
	res, err := m.prepareStep(ctx, &req)
	if err != nil {
		m.fail(guestabi.HookPrepareStep, err, runstate.Decision{})
		return step.Unchanged(req), nil
	}
	return res, nil
}

func (m *Module) prepareStep(ctx context.Context, req *step.Request) (step.Result, error) {
	in, err := json.Marshal(req)
	if err != nil {
		return step.Result{}, err
	}
	inst, err := m.get(ctx)
	if err != nil {
		return step.Result{}, err
	}
	out, err := m.invoke(ctx, inst, inst.step, in)
	if err != nil {
		m.put(inst, false)
		return step.Result{}, err
	}
	p, err := guestabi.DecodeResult(out)
	res := step.Result{StepSettings: req.StepSettings}
	if err == nil && len(p) > guestabi.MaxResultBytes {
		err = fmt.Errorf("result of %d bytes exceeds the limit of %d bytes", len(p), guestabi.MaxResultBytes)
	}
	if err == nil {
		err = json.Unmarshal(p, &res)
	}
	m.put(inst, true)
	if err != nil {
		return step.Result{}, fmt.Errorf("prepareStep result: %w", err)
	}
	if res.ActiveTools == nil {
		res.ActiveTools = []string{}
	}
	return res, nil
}

package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/agenthost/agenthost/abi/guestabi"
)

// DefaultMemoryLimitPages caps a guest's linear memory at 32 MiB.
const DefaultMemoryLimitPages = 512

// EngineConfig configures an Engine.
type EngineConfig struct {
	// CacheDir, if set, holds compiled modules across processes
	// (wazero.NewCompilationCacheWithDir). Empty: an in-memory cache.
	CacheDir string
	// MemoryLimitPages caps every guest's linear memory, in 64 KiB pages.
	// Zero: DefaultMemoryLimitPages.
	MemoryLimitPages uint32
}

// Engine compiles and instantiates guests. It is safe for concurrent use.
type Engine struct {
	rt    wazero.Runtime
	cache wazero.CompilationCache
}

// NewEngine creates an engine.
func NewEngine(ctx context.Context, cfg EngineConfig) (*Engine, error) {
	var cache wazero.CompilationCache
	if cfg.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("wasm: compilation cache: %w", err)
		}
		cache = c
	} else {
		cache = wazero.NewCompilationCache()
	}
	pages := cfg.MemoryLimitPages
	if pages == 0 {
		pages = DefaultMemoryLimitPages
	}
	rc := wazero.NewRuntimeConfig().
		WithCompilationCache(cache).
		WithMemoryLimitPages(pages).
		// Compiled guests check for closure, so a running call can be
		// stopped; watch.go says how a call is stopped.
		WithCloseOnContextDone(true)
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("wasm: wasi: %w", err)
	}
	_, err := rt.NewHostModuleBuilder(guestabi.ImportModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(hostLog),
			[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, nil).
		WithParameterNames("level", "ptr", "len").
		Export(guestabi.ImportLog).
		Instantiate(ctx)
	if err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("wasm: host module: %w", err)
	}
	return &Engine{rt: rt, cache: cache}, nil
}

// Close closes the engine, its modules and its instances.
func (e *Engine) Close(ctx context.Context) error {
	err := e.rt.Close(ctx)
	return errors.Join(err, e.cache.Close(ctx))
}

type loggerKey struct{}

// hostLog implements agenthost.log. The logger of the calling Module travels
// in the call's context.
func hostLog(ctx context.Context, m api.Module, stack []uint64) {
	level, ptr, n := int32(stack[0]), uint32(stack[1]), uint32(stack[2])
	l, _ := ctx.Value(loggerKey{}).(*slog.Logger)
	if l == nil {
		return
	}
	if n > guestabi.MaxLogMessage {
		n = guestabi.MaxLogMessage
	}
	b, ok := m.Memory().Read(ptr, n)
	if !ok {
		l.Warn("guest log message out of bounds")
		return
	}
	var lv slog.Level
	switch level {
	case guestabi.LogDebug:
		lv = slog.LevelDebug
	case guestabi.LogInfo:
		lv = slog.LevelInfo
	case guestabi.LogWarn:
		lv = slog.LevelWarn
	default:
		lv = slog.LevelError
	}
	l.Log(ctx, lv, guestabi.SafeText(b, guestabi.MaxLogMessage))
}

// LoadFile loads the module at path.
func (e *Engine) LoadFile(ctx context.Context, path string, opts Options) (*Module, error) {
	if fi, err := os.Stat(path); err == nil && fi.Size() > guestabi.MaxModuleBytes {
		return nil, fmt.Errorf("%s: %w", path, invalid("module of %d bytes exceeds the limit of %d bytes", fi.Size(), guestabi.MaxModuleBytes))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("wasm: %w", err)
	}
	m, err := e.Load(ctx, b, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

var wasmMagic = []byte{0, 'a', 's', 'm'}

// ErrInvalidModule wraps every load error.
var ErrInvalidModule = errors.New("invalid guest module")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidModule, fmt.Sprintf(format, args...))
}

type sig struct {
	params, results []api.ValueType
}

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64

	exportSigs = map[string]sig{
		guestabi.ExportABIVersion:  {nil, []api.ValueType{i32}},
		guestabi.ExportAlloc:       {[]api.ValueType{i32}, []api.ValueType{i32}},
		guestabi.ExportInit:        {[]api.ValueType{i32, i32}, []api.ValueType{i64}},
		guestabi.ExportManifest:    {nil, []api.ValueType{i64}},
		guestabi.ExportInputPolicy: {[]api.ValueType{i32, i32}, []api.ValueType{i64}},
		guestabi.ExportPrepareStep: {[]api.ValueType{i32, i32}, []api.ValueType{i64}},
		guestabi.ExportToolPolicy:  {[]api.ValueType{i32, i32}, []api.ValueType{i64}},
		guestabi.ExportInitialize:  {nil, nil},
	}
	logSig = sig{[]api.ValueType{i32, i32, i32}, nil}
)

func (s sig) String() string {
	return fmt.Sprintf("(%s) -> (%s)", types(s.params), types(s.results))
}

func types(ts []api.ValueType) string {
	var b bytes.Buffer
	for i, t := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(api.ValueTypeName(t))
	}
	return b.String()
}

func sameSig(def api.FunctionDefinition, s sig) bool {
	return bytes.Equal(def.ParamTypes(), s.params) && bytes.Equal(def.ResultTypes(), s.results)
}

var wasiAllowed = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range guestabi.WASIAllowed {
		m[n] = true
	}
	return m
}()

// checkCompiled checks what can be checked without running the guest.
func checkCompiled(c wazero.CompiledModule) error {
	exports := c.ExportedFunctions()
	v, ok := exports[guestabi.ExportABIVersion]
	if !ok {
		return invalid("no %s export: not an agenthost guest (ABI v%d)", guestabi.ExportABIVersion, guestabi.Version)
	}
	if !sameSig(v, exportSigs[guestabi.ExportABIVersion]) {
		return invalid("%s has signature %s, want %s", guestabi.ExportABIVersion,
			sig{v.ParamTypes(), v.ResultTypes()}, exportSigs[guestabi.ExportABIVersion])
	}
	for _, f := range c.ImportedFunctions() {
		mod, name, _ := f.Import()
		switch {
		case mod == guestabi.ImportModule && name == guestabi.ImportLog:
			if !sameSig(f, logSig) {
				return invalid("import %s.%s has signature %s, want %s", mod, name,
					sig{f.ParamTypes(), f.ResultTypes()}, logSig)
			}
		case mod == guestabi.WASIModule && wasiAllowed[name]:
		default:
			return invalid("imports %s.%s, which the host does not provide (allowed: %s.%s and %s functions %v)",
				mod, name, guestabi.ImportModule, guestabi.ImportLog, guestabi.WASIModule, guestabi.WASIAllowed)
		}
	}
	for _, m := range c.ImportedMemories() {
		mod, name, _ := m.Import()
		return invalid("imports memory %s.%s; a guest must define and export its own memory", mod, name)
	}
	if _, ok := c.ExportedMemories()[guestabi.ExportMemory]; !ok {
		return invalid("no exported memory named %q", guestabi.ExportMemory)
	}
	for name, s := range exportSigs {
		def, ok := exports[name]
		if !ok {
			continue
		}
		if !sameSig(def, s) {
			return invalid("export %s has signature %s, want %s", name, sig{def.ParamTypes(), def.ResultTypes()}, s)
		}
	}
	for _, name := range []string{guestabi.ExportAlloc, guestabi.ExportManifest} {
		if _, ok := exports[name]; !ok {
			return invalid("missing required export %s", name)
		}
	}
	return nil
}

package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/agenthost/agenthost/abi/guestabi"
)

// instance is one instantiated guest; used by one call at a time.
type instance struct {
	mod    api.Module
	mem    api.Memory
	alloc  api.Function
	policy api.Function
	step   api.Function
	tool   api.Function
	// region is the guest buffer agenthost_alloc returned, of regionCap bytes.
	region, regionCap uint32
	stack             [2]uint64
	buf               []byte
	output            *head

	// The watch of the call in flight (watch.go); gen, stopped, slot and
	// deadline are guarded by the module's watchdog lock.
	cctx     callContext
	stop     chan struct{} // closed to stop the call in flight
	stopped  error         // why the call was stopped, nil if it was not
	gen      uint64        // counts the instance's calls
	slot     int           // index in the watchdog's calls in flight, -1 if none
	deadline time.Duration // the call's deadline, since the watchdog's epoch
	unwatch  func() bool   // stops the watch of the caller's context
}

// newInstance starts an instance: _initialize, version check, init.
func (m *Module) newInstance(ctx context.Context) (*instance, error) {
	lctx, cancel := context.WithTimeout(m.loadCtx(ctx), m.opts.LoadTimeout)
	defer cancel()
	out := &head{}
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions(guestabi.ExportInitialize).
		WithStdout(out).
		WithStderr(out)
	mod, err := m.eng.rt.InstantiateModule(lctx, m.compiled, cfg)
	if err != nil {
		return nil, invalid("start: %v%s", err, out.suffix())
	}
	m.instances.Add(1)
	inst := &instance{
		mod:    mod,
		mem:    mod.Memory(),
		alloc:  mod.ExportedFunction(guestabi.ExportAlloc),
		policy: mod.ExportedFunction(guestabi.ExportInputPolicy),
		step:   mod.ExportedFunction(guestabi.ExportPrepareStep),
		tool:   mod.ExportedFunction(guestabi.ExportToolPolicy),
		output: out,
		stop:   make(chan struct{}),
		slot:   -1,
	}
	inst.cctx = callContext{m: m, inst: inst}
	if err := inst.start(lctx, m.opts.Config, m.hasInit); err != nil {
		inst.close()
		return nil, err
	}
	return inst, nil
}

func (inst *instance) start(ctx context.Context, config []byte, hasInit bool) error {
	stack := inst.stack[:]
	if err := inst.mod.ExportedFunction(guestabi.ExportABIVersion).CallWithStack(ctx, stack); err != nil {
		return invalid("%s: %v%s", guestabi.ExportABIVersion, err, inst.output.suffix())
	}
	if v := int32(stack[0]); v != guestabi.Version {
		return invalid("guest implements ABI version %d; this host supports version %d", v, guestabi.Version)
	}
	if !hasInit {
		return nil
	}
	out, err := inst.call(ctx, inst.mod.ExportedFunction(guestabi.ExportInit), config)
	if err == nil {
		_, err = guestabi.DecodeResult(out)
	}
	if err != nil {
		return invalid("%s: %v", guestabi.ExportInit, err)
	}
	return nil
}

func (inst *instance) manifest(ctx context.Context) (guestabi.Manifest, error) {
	var gm guestabi.Manifest
	stack := inst.stack[:]
	if err := inst.mod.ExportedFunction(guestabi.ExportManifest).CallWithStack(ctx, stack); err != nil {
		return gm, invalid("%s: %v%s", guestabi.ExportManifest, err, inst.output.suffix())
	}
	out, err := inst.result(stack[0])
	if err == nil && len(out) > guestabi.MaxManifestBytes {
		err = fmt.Errorf("manifest of %d bytes exceeds the limit of %d bytes", len(out), guestabi.MaxManifestBytes)
	}
	if err == nil {
		var p []byte
		p, err = guestabi.DecodeResult(out)
		if err == nil {
			err = json.Unmarshal(p, &gm)
		}
	}
	if err != nil {
		return gm, invalid("%s: %v", guestabi.ExportManifest, err)
	}
	return gm, nil
}

// call writes in into the guest, calls fn(ptr, len) and returns a view of
// the result body in guest memory, valid until the next call.
func (inst *instance) call(ctx context.Context, fn api.Function, in []byte) ([]byte, error) {
	stack := inst.stack[:]
	if len(in) > guestabi.MaxRequestBytes {
		return nil, fmt.Errorf("request of %d bytes exceeds the limit of %d bytes; the guest was not called", len(in), guestabi.MaxRequestBytes)
	}
	n := uint32(len(in))
	if n > inst.regionCap {
		stack[0] = uint64(max(n, 4096))
		if err := inst.alloc.CallWithStack(ctx, stack); err != nil {
			return nil, inst.callErr(guestabi.ExportAlloc, err)
		}
		p := uint32(stack[0])
		if p == 0 {
			return nil, fmt.Errorf("%s(%d) returned 0", guestabi.ExportAlloc, max(n, 4096))
		}
		if uint64(p)+uint64(max(n, 4096)) > uint64(inst.mem.Size()) {
			return nil, fmt.Errorf("%s returned a region outside memory", guestabi.ExportAlloc)
		}
		inst.region, inst.regionCap = p, max(n, 4096)
	}
	if n > 0 && !inst.mem.Write(inst.region, in) {
		return nil, errors.New("request region outside memory")
	}
	stack[0], stack[1] = uint64(inst.region), uint64(n)
	if err := fn.CallWithStack(ctx, stack); err != nil {
		return nil, inst.callErr(fn.Definition().ExportNames()[0], err)
	}
	return inst.result(stack[0])
}

func (inst *instance) result(packed uint64) ([]byte, error) {
	ptr, n := guestabi.Unpack(packed)
	b, ok := inst.mem.Read(ptr, n)
	if !ok {
		return nil, fmt.Errorf("result [%d, +%d) outside memory of %d bytes", ptr, n, inst.mem.Size())
	}
	return b, nil
}

func (inst *instance) callErr(name string, err error) error {
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return fmt.Errorf("%s: deadline exceeded, guest stopped", name)
		case sys.ExitCodeContextCanceled:
			return fmt.Errorf("%s: call canceled, guest stopped", name)
		}
		return fmt.Errorf("%s: guest exited with code %d%s", name, exit.ExitCode(), inst.output.suffix())
	}
	return fmt.Errorf("%s: %w%s", name, guestErr{err}, inst.output.suffix())
}

// guestErr is an error of a guest call with wazero's wasm stack trace left
// out of its text: the frames are named by the guest's name section, which
// is the guest's to write, and make a multi-line log entry. The text is cut
// to guestabi.MaxErrorMessage and made safe.
type guestErr struct{ err error }

func (e guestErr) Error() string {
	msg := e.err.Error()
	if i := strings.Index(msg, "\nwasm stack trace:"); i >= 0 {
		msg = msg[:i]
	}
	return guestabi.SafeText([]byte(msg), guestabi.MaxErrorMessage)
}

func (e guestErr) Unwrap() error { return e.err }

func (inst *instance) close() { inst.mod.Close(context.Background()) }

// head keeps the first bytes a guest writes to stdout and stderr, for error
// messages: a Go guest's runtime prints the cause of a fatal error first
// ("fatal error: out of memory"), then goroutine traces.
type head struct {
	mu sync.Mutex
	b  []byte
}

const headMax = 512

func (t *head) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := headMax - len(t.b); room > 0 {
		t.b = append(t.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (t *head) suffix() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.b) == 0 {
		return ""
	}
	return fmt.Sprintf(" (guest output: %q)", t.b)
}

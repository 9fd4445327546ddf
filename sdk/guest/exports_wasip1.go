//go:build wasip1

//lint:file-ignore U1000 the functions here are called by the host through go:wasmexport.

package guest

import (
	"errors"
	"unsafe"

	"github.com/agenthost/agenthost/abi/guestabi"
)

//go:wasmimport agenthost log
func logImport(level int32, ptr unsafe.Pointer, n int32)

func hostLog(level int32, msg string) {
	if msg == "" {
		return
	}
	logImport(level, unsafe.Pointer(unsafe.StringData(msg)), int32(len(msg)))
}

var (
	// in is the region handed to the host by agenthost_alloc.
	in []byte
	// out holds the last result; valid until the next call.
	out []byte
	// req is reused across inputPolicy calls.
	req Request
)

func result(b []byte) uint64 {
	out = b
	if len(b) == 0 {
		return 0
	}
	return guestabi.Pack(uint32(uintptr(unsafe.Pointer(&b[0]))), uint32(len(b)))
}

func errResult(err error) uint64 {
	return result(guestabi.AppendError(out[:0], err.Error()))
}

func input(ptr, n uint32) []byte {
	if n == 0 {
		return nil
	}
	// A slice of an array pointer: unsafe.Slice would call the runtime to
	// check the length.
	return (*[1 << 32]byte)(unsafe.Add(unsafe.Pointer(nil), uintptr(ptr)))[:n:n]
}

//go:wasmexport agenthost_abi_version
func abiVersion() int32 { return guestabi.Version }

//go:wasmexport agenthost_alloc
func alloc(size uint32) uint32 {
	if uint32(cap(in)) < size || in == nil {
		in = make([]byte, max(size, 1024))
	}
	return uint32(uintptr(unsafe.Pointer(&in[0])))
}

//go:wasmexport agenthost_init
func initGuest(ptr, n uint32) uint64 {
	var cfg []byte
	if n > 0 {
		cfg = append([]byte(nil), input(ptr, n)...)
	}
	err := protect(func() error {
		if registered == nil || registered.Init == nil {
			return nil
		}
		return registered.Init(cfg)
	})
	if err != nil {
		return errResult(err)
	}
	return result(append(out[:0], guestabi.StatusOK))
}

//go:wasmexport agenthost_manifest
func manifestExport() uint64 {
	m, err := manifest()
	if err != nil {
		return errResult(err)
	}
	return result(appendManifest(append(out[:0], guestabi.StatusOK), &m))
}

// inputPolicy is written for the cost of a call in the host: under
// wazero's interruptible mode every function entry and every taken branch
// of Go's wasm code can cost a check that leaves the compiled code, so the
// per-call path is one function with a deferred recover (no closure
// through protect), reads the request header in straight-line code and
// writes the decision into a fixed buffer.
//
//go:wasmexport agenthost_input_policy
func inputPolicy(ptr, n uint32) (res uint64) {
	defer func() {
		if r := recover(); r != nil {
			res = errResult(panicError(r))
		}
	}()
	g := registered
	if g == nil || g.InputPolicy == nil {
		return errResult(errNoHook)
	}
	if err := readRequest(input(ptr, n), &req); err != nil {
		return errResult(err)
	}
	d, err := g.InputPolicy(&req)
	if err != nil {
		return errResult(err)
	}
	decision = [guestabi.DecisionSize]byte{guestabi.StatusOK, actionCode(d.Action), coalesceFlag(d.CoalescePending), 0}
	return guestabi.Pack(uint32(uintptr(unsafe.Pointer(&decision[0]))), guestabi.DecisionSize)
}

// decision holds the last inputPolicy decision; valid until the next call.
var decision [guestabi.DecisionSize]byte

// actionCode is guestabi.ActionCode, first comparing the string's data
// with the constants': a guest returns one of them almost always, and a
// pointer comparison is one branch where the string comparison is several.
func actionCode(a string) byte {
	switch p := unsafe.StringData(a); {
	case p == unsafe.StringData(Queue) && len(a) == len(Queue):
		return guestabi.CodeQueue
	case p == unsafe.StringData(Inject) && len(a) == len(Inject):
		return guestabi.CodeInject
	case p == unsafe.StringData(Interrupt) && len(a) == len(Interrupt):
		return guestabi.CodeInterrupt
	}
	return guestabi.ActionCode(a)
}

func coalesceFlag(c bool) byte {
	if c {
		return guestabi.FlagCoalescePending
	}
	return 0
}

// prepareStep and toolPolicy take the short path of inputPolicy: the
// deferred recover in the export instead of a closure through protect.
//
//go:wasmexport agenthost_prepare_step
func prepareStep(ptr, n uint32) (res uint64) {
	defer func() {
		if r := recover(); r != nil {
			res = errResult(panicError(r))
		}
	}()
	g := registered
	if g == nil || g.PrepareStep == nil {
		return errResult(errNoHook)
	}
	var r guestabi.StepRequest
	if err := decodeStepRequest(input(ptr, n), &r); err != nil {
		return errResult(err)
	}
	sr, err := g.PrepareStep(&r)
	if err != nil {
		return errResult(err)
	}
	return result(appendStepResult(append(out[:0], guestabi.StatusOK), &sr))
}

//go:wasmexport agenthost_tool_policy
func toolPolicy(ptr, n uint32) (res uint64) {
	defer func() {
		if r := recover(); r != nil {
			res = errResult(panicError(r))
		}
	}()
	g := registered
	if g == nil || g.ToolPolicy == nil {
		return errResult(errNoHook)
	}
	var r guestabi.ToolRequest
	if err := readToolRequest(input(ptr, n), &r); err != nil {
		return errResult(err)
	}
	d, err := g.ToolPolicy(&r)
	if err == nil {
		err = guestabi.ValidToolDecision(d)
	}
	if err != nil {
		return errResult(err)
	}
	return result(guestabi.AppendToolDecision(out[:0], d))
}

// manifest returns the manifest of the registered guest.
func manifest() (guestabi.Manifest, error) {
	g := registered
	if g == nil {
		return guestabi.Manifest{}, errors.New("no guest registered (call guest.Register from init)")
	}
	m := guestabi.Manifest{ABI: guestabi.Version, Name: g.Name, Version: g.Version, Actions: g.Actions}
	if g.InputPolicy != nil {
		m.Hooks = append(m.Hooks, guestabi.HookInputPolicy)
	}
	if g.PrepareStep != nil {
		m.Hooks = append(m.Hooks, guestabi.HookPrepareStep)
	}
	if g.ToolPolicy != nil {
		m.Hooks = append(m.Hooks, guestabi.HookToolPolicy)
	}
	return m, nil
}

// protect runs f, turning a panic into an error.
func protect(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError(r)
		}
	}()
	return f()
}

var errNoHook = errors.New("hook not implemented by this guest")

// panicError describes a recovered panic without fmt.
func panicError(r any) error {
	switch v := r.(type) {
	case error:
		return errors.New("panic: " + v.Error())
	case string:
		return errors.New("panic: " + v)
	}
	return errors.New("panic")
}

// Package wasm loads inputPolicy, prepareStep and toolPolicy extensions
// compiled to WebAssembly (ABI v1, abi/guestabi/SPEC.md) and runs them
// sandboxed on wazero.
//
// Start with Engine: NewEngine creates the wazero runtime (memory cap,
// interruptible calls, the on-disk compilation cache) and Engine.Load turns a
// module into a *Module, which implements policy.Policy and step.Hook;
// Module.ToolPolicy returns its toolpolicy.Policy.
//
// Loading checks, in order: the bytes are a wasm module; it exports
// agenthost_abi_version with the right signature; every function it imports
// is on the allow-list (agenthost.log and the WASI functions in
// guestabi.WASIAllowed), so a module that imports, say, sock_accept is
// refused rather than linked; the ABI exports have their signatures; an
// instance starts (_initialize), reports ABI version 1, accepts its
// configuration blob (agenthost_init) and returns a valid manifest whose
// hooks it exports. Any failure is a load error naming the cause.
//
// At run time a Module keeps a pool of instances (a wazero module is not safe
// for concurrent use), at most Options.MaxInstances of them. Every call runs
// under a deadline; a guest that runs past it, or whose caller gives up, is
// stopped (the module's watchdog has wazero close it, ADR 0150) and its
// instance discarded. A call that traps, exits, exceeds the deadline, returns
// bytes that do not decode, or returns a decision its manifest does not
// declare is a failure: the instance is discarded (except for bad output),
// Options.OnFailure and the logger hear of it, Stats counts it, and the call
// returns the fallback (Options.Fallback, queue by default, for inputPolicy;
// the unchanged settings for prepareStep) with a nil error; for toolPolicy,
// Options.ToolFallback (ask by default) in a *toolpolicy.FallbackError. A guest never
// brings the host down.
//
// Check and RunCases are the logic of `agenthost policy check` and
// `agenthost policy test`.
package wasm

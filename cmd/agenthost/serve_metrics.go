package main

import (
	"io"

	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/wasm"
)

// guestMetrics returns the /metrics writer of the wasm guests serve loaded
// (the policy, if it is a module, and the prepareStep hooks): their calls,
// failures and fallbacks by module and hook.
func guestMetrics(pol policy.Policy, hooks []*wasm.Module) func(io.Writer) {
	var mods []wasm.Hooked
	if m, ok := pol.(*wasm.Module); ok {
		mods = append(mods, wasm.Hooked{Hook: wasm.HookPolicy, Module: m})
	}
	for _, m := range hooks {
		mods = append(mods, wasm.Hooked{Hook: wasm.HookPrepareStep, Module: m})
	}
	return func(w io.Writer) { wasm.WriteMetrics(w, mods) }
}

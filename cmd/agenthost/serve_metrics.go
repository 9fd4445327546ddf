package main

import (
	"io"

	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/wasm"
)

// guestMetrics returns the /metrics writer of the wasm guests serve loaded
// (the policy, if it is a module, and the prepareStep hooks): their calls,
// failures and fallbacks by module.
func guestMetrics(pol policy.Policy, hooks []*wasm.Module) func(io.Writer) {
	var mods []*wasm.Module
	if m, ok := pol.(*wasm.Module); ok {
		mods = append(mods, m)
	}
	mods = append(mods, hooks...)
	return func(w io.Writer) { wasm.WriteMetrics(w, mods) }
}

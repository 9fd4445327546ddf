package main

import (
	"fmt"
	"io"

	"github.com/agenthost/agenthost/host/driverhost"
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

// serveMetrics returns the /metrics writer of serve's own metrics: the
// store driver's stalls (pd nil: an in-process driver, none), then the
// guests' (guestMetrics).
func serveMetrics(pd *driverhost.Driver, pol policy.Policy, hooks []*wasm.Module) func(io.Writer) {
	guests := guestMetrics(pol, hooks)
	return func(w io.Writer) {
		if pd != nil {
			fmt.Fprintf(w, "# HELP agenthost_driver_stalls_total Store driver processes killed for not answering a call within driver_call_timeout.\n")
			fmt.Fprintf(w, "# TYPE agenthost_driver_stalls_total counter\n")
			fmt.Fprintf(w, "agenthost_driver_stalls_total %d\n", pd.Stalls())
		}
		guests(w)
	}
}

package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/wasm"
)

// guestMetrics returns the /metrics collector of the wasm guests serve
// loaded (the policy, if it is a module, and the prepareStep hooks): their
// calls, failures and fallbacks by module and hook.
func guestMetrics(pol policy.Policy, hooks []*wasm.Module, toolPol *wasm.Module) prometheus.Collector {
	var mods []wasm.Hooked
	if m, ok := pol.(*wasm.Module); ok {
		mods = append(mods, wasm.Hooked{Hook: wasm.HookPolicy, Module: m})
	}
	for _, m := range hooks {
		mods = append(mods, wasm.Hooked{Hook: wasm.HookPrepareStep, Module: m})
	}
	if toolPol != nil {
		mods = append(mods, wasm.Hooked{Hook: wasm.HookToolPolicy, Module: toolPol})
	}
	return wasm.Collector(mods)
}

// driverMetrics returns the collectors of serve's store driver: its stalls
// (pd nil: an in-process driver, none).
func driverMetrics(pd *driverhost.Driver) []prometheus.Collector {
	if pd == nil {
		return nil
	}
	return []prometheus.Collector{prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "agenthost_driver_stalls_total",
		Help: "Store driver processes killed for not answering a call within driver_call_timeout.",
	}, func() float64 { return float64(pd.Stalls()) })}
}

package wasm

import (
	"fmt"
	"io"
)

// WriteMetrics writes the counters of the given modules in the Prometheus
// text format, labelled by the guest's manifest name (which Load restricts
// to [A-Za-z0-9._-]): calls, failed calls, inputPolicy fallbacks, instances
// started and thrown away.
func WriteMetrics(w io.Writer, mods []*Module) {
	type metric struct {
		name, help string
		v          func(Stats) uint64
	}
	for _, m := range []metric{
		{"agenthost_guest_calls_total", "Hook calls into a wasm guest, by module.", func(s Stats) uint64 { return s.Calls }},
		{"agenthost_guest_failures_total", "Failed hook calls into a wasm guest (trap, deadline, error result, undeclared action), by module.", func(s Stats) uint64 { return s.Failures }},
		{"agenthost_guest_fallbacks_total", "Failed inputPolicy calls answered with the module's fallback decision, by module.", func(s Stats) uint64 { return s.Fallbacks }},
		{"agenthost_guest_instances_total", "Guest instances started, including replacements, by module.", func(s Stats) uint64 { return s.Instances }},
		{"agenthost_guest_instances_discarded_total", "Guest instances thrown away after a failed call, by module.", func(s Stats) uint64 { return s.Discarded }},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", m.name, m.help, m.name)
		for _, mod := range mods {
			fmt.Fprintf(w, "%s{module=%q} %d\n", m.name, mod.gm.Name, m.v(mod.Stats()))
		}
	}
}

package wasm

import (
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
)

// The hook a module is loaded for, the hook label of its metrics.
const (
	HookPolicy      = "policy"
	HookPrepareStep = "prepare_step"
	HookToolPolicy  = "tool_policy"
)

// Hooked is a module and the hook it is loaded for (HookPolicy,
// HookPrepareStep or HookToolPolicy).
type Hooked struct {
	Hook   string
	Module *Module
}

// WriteMetrics writes the counters of the given modules in the Prometheus
// text format, labelled by the guest's manifest name (which Load restricts
// to [A-Za-z0-9._-]) and the hook: calls, failed calls, inputPolicy and
// toolPolicy fallbacks, instances started and thrown away. A module listed
// twice is counted once, and modules sharing a name and a hook (one guest
// loaded as two prepareStep hooks) are summed into one series: Prometheus
// rejects a scrape with the same series twice.
func WriteMetrics(w io.Writer, mods []Hooked) {
	keys, stats := aggregate(mods)
	for _, m := range guestMetrics {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", m.name, m.help, m.name)
		for i, k := range keys {
			fmt.Fprintf(w, "%s{module=%q,hook=%q} %d\n", m.name, k.name, k.hook, m.v(stats[i]))
		}
	}
}

type guestKey struct{ name, hook string }

// aggregate sums the modules' stats by manifest name and hook, each module
// once.
func aggregate(mods []Hooked) ([]guestKey, []Stats) {
	var keys []guestKey
	members := map[guestKey][]*Module{}
	seen := map[Hooked]bool{}
	for _, h := range mods {
		if h.Module == nil || seen[h] {
			continue
		}
		seen[h] = true
		k := guestKey{h.Module.gm.Name, h.Hook}
		if _, ok := members[k]; !ok {
			keys = append(keys, k)
		}
		members[k] = append(members[k], h.Module)
	}
	stats := make([]Stats, len(keys))
	for i, k := range keys {
		for _, m := range members[k] {
			s := m.Stats()
			stats[i].Calls += s.Calls
			stats[i].Failures += s.Failures
			stats[i].Fallbacks += s.Fallbacks
			stats[i].Instances += s.Instances
			stats[i].Discarded += s.Discarded
		}
	}
	return keys, stats
}

type guestMetric struct {
	name, help string
	v          func(Stats) uint64
	desc       *prometheus.Desc
}

var guestMetrics = func() []guestMetric {
	ms := []guestMetric{
		{"agenthost_guest_calls_total", "Hook calls into a wasm guest, by module and hook.", func(s Stats) uint64 { return s.Calls }, nil},
		{"agenthost_guest_failures_total", "Failed hook calls into a wasm guest (trap, deadline, error result, undeclared action), by module and hook.", func(s Stats) uint64 { return s.Failures }, nil},
		{"agenthost_guest_fallbacks_total", "Failed inputPolicy and toolPolicy calls answered with the module's fallback decision, by module and hook.", func(s Stats) uint64 { return s.Fallbacks }, nil},
		{"agenthost_guest_instances_total", "Guest instances started, including replacements, by module and hook.", func(s Stats) uint64 { return s.Instances }, nil},
		{"agenthost_guest_instances_discarded_total", "Guest instances thrown away after a failed call, by module and hook.", func(s Stats) uint64 { return s.Discarded }, nil},
	}
	for i := range ms {
		ms[i].desc = prometheus.NewDesc(ms[i].name, ms[i].help, []string{"module", "hook"}, nil)
	}
	return ms
}()

// Collector returns the counters of WriteMetrics as a
// prometheus.Collector, read at each scrape.
func Collector(mods []Hooked) prometheus.Collector { return collector(mods) }

type collector []Hooked

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range guestMetrics {
		ch <- m.desc
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	keys, stats := aggregate(c)
	for _, m := range guestMetrics {
		for i, k := range keys {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.v(stats[i])), k.name, k.hook)
		}
	}
}

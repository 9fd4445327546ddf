package wasm

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestWriteMetricsNoDuplicateSeries: one guest used as the policy and as
// two prepareStep hooks, one of them listed twice, gives one series per
// hook, each once: Prometheus rejects a scrape with a series twice.
func TestWriteMetricsNoDuplicateSeries(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	pol := load(t, e, cGuest(), Options{})
	step1 := load(t, e, cGuest(), Options{})
	step2 := load(t, e, cGuest(), Options{})
	var b strings.Builder
	WriteMetrics(&b, []Hooked{{HookPolicy, pol}, {HookPrepareStep, step1}, {HookPrepareStep, step2}, {HookPrepareStep, step1}})
	seen := map[string]bool{}
	series := 0
	for line := range strings.SplitSeq(b.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, " ")
		if seen[name] {
			t.Errorf("series %s written twice:\n%s", name, b.String())
		}
		seen[name] = true
		series++
	}
	if series != 10 {
		t.Errorf("%d series, want 10 (5 counters, 2 hooks):\n%s", series, b.String())
	}
	for _, want := range []string{`hook="policy"`, `hook="prepare_step"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no series with %s:\n%s", want, b.String())
		}
	}
}

// TestCollectorNoDuplicateSeries: the collector sums like WriteMetrics, so
// a registry accepts it.
func TestCollectorNoDuplicateSeries(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	pol := load(t, e, cGuest(), Options{})
	step1 := load(t, e, cGuest(), Options{})
	step2 := load(t, e, cGuest(), Options{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(Collector([]Hooked{{HookPolicy, pol}, {HookPrepareStep, step1}, {HookPrepareStep, step2}, {HookPrepareStep, step1}}))
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 10 {
		t.Errorf("%d series (%v), want 10 (5 counters, 2 hooks)", n, err)
	}
}

package wasm

import (
	"context"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/agenthost/agenthost/guests/policy/rules"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
)

// nativeRefine is the refine policy as native Go, for comparison.
type nativeRefine struct{}

func (nativeRefine) Manifest() policy.Manifest {
	return policy.Manifest{Name: "refine", Actions: []runstate.Action{"queue", "inject", "interrupt"}}
}

func (nativeRefine) Decide(_ context.Context, r policy.Request) (runstate.Decision, error) {
	return runstate.Decision{Action: runstate.Action(rules.Refine(r.Input.Hint, r.Input.Content))}, nil
}

// BenchmarkDecide measures one inputPolicy decision through the host, with
// the per-call deadline on (its length does not change the cost; a long one
// keeps a loaded machine from turning a stall into a fallback) and the
// request encoding included, for the refine
// policy as a Go guest, as a C guest and as native Go. It reports the p50 and
// p99 latency of single calls.
func BenchmarkDecide(b *testing.B) {
	e := newEngine(b, EngineConfig{})
	req := request(decideCases[1])
	for _, g := range []struct {
		name string
		p    func() policy.Policy
	}{
		{"guest=go", func() policy.Policy {
			return load(b, e, goGuest(b, "refine"), Options{CallTimeout: time.Second})
		}},
		{"guest=c", func() policy.Policy { return load(b, e, cGuest(), Options{CallTimeout: time.Second}) }},
		{"native", func() policy.Policy { return nativeRefine{} }},
		{"guest=go-queue", func() policy.Policy { return load(b, e, goGuest(b, "queue"), Options{CallTimeout: time.Second}) }},
	} {
		b.Run(g.name, func(b *testing.B) {
			p := g.p()
			ctx := context.Background()
			lat := make([]time.Duration, 0, 1<<16)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				d, err := p.Decide(ctx, req)
				el := time.Since(t0)
				if len(lat) < cap(lat) {
					lat = append(lat, el)
				}
				if err != nil || (d.Action != runstate.ActionInject && g.name != "guest=go-queue") {
					b.Fatal(d, err)
				}
			}
			b.StopTimer()
			reportPercentiles(b, lat)
			if m, ok := p.(*Module); ok && m.Stats().Failures > 0 {
				b.Fatalf("failures: %+v", m.Stats())
			}
		})
	}
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkLoad measures loading a module (compile, checks, first instance,
// manifest) with a fresh engine: cold (an empty compilation cache) and
// cached (the compiled code read back from the on-disk cache).
func BenchmarkLoad(b *testing.B) {
	for _, g := range []struct{ name, path string }{
		{"go", goGuest(b, "refine")},
		{"c", cGuest()},
	} {
		wasm, err := os.ReadFile(g.path)
		if err != nil {
			b.Fatal(err)
		}
		warm := b.TempDir()
		loadOnce(b, warm, wasm)
		b.Run(g.name+"/cold", func(b *testing.B) {
			for b.Loop() {
				loadOnce(b, b.TempDir(), wasm)
			}
		})
		b.Run(g.name+"/cached", func(b *testing.B) {
			for b.Loop() {
				loadOnce(b, warm, wasm)
			}
		})
	}
}

func loadOnce(b *testing.B, cache string, wasm []byte) {
	ctx := context.Background()
	e, err := NewEngine(ctx, EngineConfig{CacheDir: cache})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	m, err := e.Load(ctx, wasm, Options{})
	if err != nil {
		b.Fatal(err)
	}
	m.Close(ctx)
}

// BenchmarkInstance measures starting one pooled instance (instantiate,
// _initialize, version, init) and what it costs in memory: its linear
// memory and the host heap it holds.
func BenchmarkInstance(b *testing.B) {
	e := newEngine(b, EngineConfig{})
	for _, g := range []struct{ name, path string }{
		{"go", goGuest(b, "refine")},
		{"c", cGuest()},
	} {
		b.Run(g.name, func(b *testing.B) {
			m := load(b, e, g.path, Options{})
			ctx := context.Background()
			var linear uint64
			for b.Loop() {
				inst, err := m.newInstance(ctx)
				if err != nil {
					b.Fatal(err)
				}
				linear = uint64(inst.mem.Size())
				inst.close()
			}
			b.StopTimer()
			// Memory: hold n instances at once and measure the heap.
			const n = 16
			insts := make([]*instance, 0, n)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range n {
				inst, err := m.newInstance(ctx)
				if err != nil {
					b.Fatal(err)
				}
				insts = append(insts, inst)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(linear), "linear-bytes/instance")
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/instance")
			for _, inst := range insts {
				inst.close()
			}
		})
	}
}

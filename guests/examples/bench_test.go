package examples

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/wasm"
)

// nativeExample is the example policy as native Go, for comparison.
type nativeExample struct{}

func (nativeExample) Manifest() policy.Manifest {
	return policy.Manifest{Name: "example-native", Actions: []runstate.Action{"queue", "inject", "interrupt", "reject"}}
}

func (nativeExample) Decide(_ context.Context, r policy.Request) (runstate.Decision, error) {
	switch {
	case r.Input.Hint == "stop":
		return runstate.Decision{Action: runstate.ActionInterrupt}, nil
	case r.Active != nil && r.Input.Hint == "refine":
		return runstate.Decision{Action: runstate.ActionInject}, nil
	case r.Input.Content == "":
		return runstate.Decision{Action: runstate.ActionReject}, nil
	}
	return runstate.Decision{Action: runstate.ActionQueue, CoalescePending: len(r.Queued) > 0}, nil
}

// BenchmarkExampleDecide measures one decision of the example policy through
// the host (request encoding, pooled instance, per-call deadline, decoding
// and manifest check included) for each of the five languages and as native
// Go, on the same request: a busy thread, one queued run, a refine hint. It
// reports the p50 and p99 latency of single calls.
func BenchmarkExampleDecide(b *testing.B) {
	ctx := context.Background()
	e, err := wasm.NewEngine(ctx, wasm.EngineConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	goWasm := filepath.Join(b.TempDir(), "example-go.wasm")
	cmd := exec.Command(goTool(), "build", "-buildmode=c-shared", "-o", goWasm, "./go")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	req := policy.Request{
		ThreadID: "t-1",
		Input:    policy.Input{Content: "in bullet points, please", Hint: "refine", Metadata: map[string]string{"user": "u1"}},
		Active:   &policy.RunInfo{RunID: "r-1", Seq: 1, Steps: 3, Inputs: []string{"summarise this thread"}},
		Queued:   []policy.RunInfo{{RunID: "r-2", Seq: 2, Inputs: []string{"and the costs"}}},
	}
	for _, g := range []struct{ name, path string }{
		{"c", filepath.Join("c", "policy.wasm")},
		{"rust", filepath.Join("rust", "policy.wasm")},
		{"assemblyscript", filepath.Join("assemblyscript", "policy.wasm")},
		{"wat", filepath.Join("wat", "policy.wasm")},
		{"go", goWasm},
		{"native", ""},
	} {
		b.Run("lang="+g.name, func(b *testing.B) {
			var p policy.Policy = nativeExample{}
			if g.path != "" {
				// A long deadline: a loaded machine must not turn a stall
				// into a fallback (the deadline's length does not change
				// the cost of a call).
				m, err := e.LoadFile(ctx, g.path, wasm.Options{CallTimeout: time.Second})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close(ctx)
				p = m
			}
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
				if err != nil || d.Action != runstate.ActionInject {
					b.Fatal(d, err)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			}
		})
	}
}

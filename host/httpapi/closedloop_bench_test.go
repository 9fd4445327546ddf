package httpapi_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/agenthost/agenthost/host/httpapi"
	"github.com/agenthost/agenthost/soak"
)

// BenchmarkClosedLoop is the closed loop of agenthost-loadgen closed (submit
// with a key, then result?wait=) against the handler over memstore in this
// process: the HTTP layer's and the runtime's cost per run, client
// included, without a driver process or a disk. Its allocs/op are per run.
func BenchmarkClosedLoop(b *testing.B) {
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			s := newServer(b, false, httpapi.Options{})
			c := soak.NewClient(s.URL)
			b.ReportAllocs()
			b.ResetTimer()
			st, err := soak.ClosedLoop{Clients: clients, Runs: b.N, PerThread: 50, Prefix: fmt.Sprintf("b%d", b.N)}.Run(context.Background(), c)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(st.Percentile(50).Microseconds()), "p50-µs")
		})
	}
}

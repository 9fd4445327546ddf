package host_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/internal/pgtest"
)

// BenchmarkPgRunsEndToEnd: runs per second with a zero-delay scripted model
// over pgstore (each host with its own driver subprocess, one database), with
// 1 and 3 hosts. 64 clients, each on threads of its own, submit one input at
// a time and wait for the answer; client c submits to host c mod hosts, so
// each host owns the threads of its clients. bench/dbospeer measures DBOS
// Transact doing the equivalent work on the same server (make bench gives
// both the server in AGENTHOST_PG_URL).
func BenchmarkPgRunsEndToEnd(b *testing.B) {
	for _, hosts := range []int{1, 3} {
		b.Run(fmt.Sprintf("hosts=%d/clients=64", hosts), func(b *testing.B) {
			url := pgtest.URL(b)
			rts := make([]*host.Runtime, hosts)
			for i := range rts {
				d := launchBuiltin(b, "pgstore", map[string]string{"url": url})
				rts[i] = benchRuntime(b, d, nil, model.Script{}, 64)
			}
			const clients = 64
			ctx := context.Background()
			b.ResetTimer()
			var wg sync.WaitGroup
			for c := range clients {
				n := b.N / clients
				if c < b.N%clients {
					n++
				}
				rt := rts[c%hosts]
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range n {
						tk, err := rt.Submit(ctx, fmt.Sprintf("T%d-%d", c, i/50), fmt.Sprintf("in %d", i), host.SubmitOptions{IdempotencyKey: fmt.Sprintf("k%d-%d", c, i)})
						if err != nil {
							b.Error(err)
							return
						}
						if _, err := tk.Wait(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
		})
	}
}

package soak_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/plugins/badgerstore/badgerdriver"
	"github.com/agenthost/agenthost/soak"
)

// BenchmarkHTTPClosedLoop: `agenthost serve` on badgerstore (its driver a
// subprocess, durable) with a zero-delay scripted model, measured from
// outside as agenthost-loadgen closed does: each client submits with an
// idempotency key, then GET result?wait=, then the next. Beside it, the
// same work through the Go API on a runtime over badger in process. The two
// take turns (HTTP, Go, Go, HTTP, ...), b.N runs each in rounds; the ratios
// are the medians of the rounds' pairs. With 1 client it reports latency,
// with 64 runs/s. Each round also runs the same loop with one request per
// run (POST .../inputs?wait=, "1req-" figures): an extra figure beside the
// submit-then-GET one, which is what the targets measure.
func BenchmarkHTTPClosedLoop(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	bin, err := soak.Build(ctx, dir)
	if err != nil {
		b.Fatal(err)
	}
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`{}`), 0o644); err != nil {
		b.Fatal(err)
	}
	addr, err := soak.FreeAddr()
	if err != nil {
		b.Fatal(err)
	}
	srv := &soak.Server{Bin: bin, Data: filepath.Join(dir, "data"), Addr: addr, Script: script, LogPath: filepath.Join(dir, "server.log"),
		Env: []string{"AGENTHOST_SHUTDOWN_TIMEOUT=1s"}}
	b.Cleanup(func() { srv.Cleanup() })
	c := soak.NewClient("http://" + addr)
	if err := srv.Start(ctx, c); err != nil {
		b.Fatal(err)
	}
	d, err := badgerdriver.Open(badgerdriver.DefaultConfig(filepath.Join(dir, "inprocess")))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close(ctx) })
	m, err := model.NewScripted(model.Script{})
	if err != nil {
		b.Fatal(err)
	}
	rt, err := host.New(ctx, host.Config{Driver: d, Model: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rt.Close(ctx) })

	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			round := max(clients*20, 100)
			var httpLat, goLat, oneLat []time.Duration
			var httpTook, goTook, oneTook time.Duration
			var ratesRatio, p50Ratio []float64
			k := 0
			for done := 0; done < b.N; k++ {
				n := min(round, b.N-done)
				prefix := fmt.Sprintf("r%d-%d-%d", clients, b.N, k)
				var hs, one soak.LoopStats
				var gl []time.Duration
				var gt time.Duration
				httpSide := func() {
					var err error
					hs, err = soak.ClosedLoop{Clients: clients, Runs: n, PerThread: 50, Prefix: prefix}.Run(ctx, c)
					if err != nil {
						b.Fatal(err)
					}
				}
				goSide := func() { gl, gt = goLoop(b, rt, clients, n, prefix) }
				oneSide := func() {
					var err error
					one, err = soak.ClosedLoop{Clients: clients, Runs: n, PerThread: 50, Prefix: "one-" + prefix, OneRequest: true}.Run(ctx, c)
					if err != nil {
						b.Fatal(err)
					}
				}
				if k%2 == 0 {
					httpSide()
					goSide()
					oneSide()
				} else {
					oneSide()
					goSide()
					httpSide()
				}
				httpLat, goLat = append(httpLat, hs.Latencies...), append(goLat, gl...)
				httpTook, goTook = httpTook+hs.Elapsed, goTook+gt
				oneLat, oneTook = append(oneLat, one.Latencies...), oneTook+one.Elapsed
				ratesRatio = append(ratesRatio, (float64(hs.Runs)/hs.Elapsed.Seconds())/(float64(len(gl))/gt.Seconds()))
				p50Ratio = append(p50Ratio, float64(hs.Percentile(50))/float64(pct(gl, 50)))
				done += n
			}
			b.ReportMetric(float64(len(httpLat))/httpTook.Seconds(), "http-runs/s")
			b.ReportMetric(float64(len(goLat))/goTook.Seconds(), "go-runs/s")
			b.ReportMetric(float64(pct(httpLat, 50).Microseconds())/1000, "http-p50-ms")
			b.ReportMetric(float64(pct(httpLat, 99).Microseconds())/1000, "http-p99-ms")
			b.ReportMetric(float64(pct(goLat, 50).Microseconds())/1000, "go-p50-ms")
			b.ReportMetric(median(ratesRatio), "ratio:http/go-runs/s")
			b.ReportMetric(median(p50Ratio), "ratio:http/go-p50")
			b.ReportMetric(float64(len(oneLat))/oneTook.Seconds(), "http-1req-runs/s")
			b.ReportMetric(float64(pct(oneLat, 50).Microseconds())/1000, "http-1req-p50-ms")
		})
	}
}

// goLoop is the closed loop through the Go API.
func goLoop(b *testing.B, rt *host.Runtime, clients, n int, prefix string) ([]time.Duration, time.Duration) {
	ctx := context.Background()
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	began := time.Now()
	for k := range clients {
		per := n / clients
		if k < n%clients {
			per++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				t0 := time.Now()
				tk, err := rt.Submit(ctx, fmt.Sprintf("go-%s-%d-%d", prefix, k, i/50), "closed loop", host.SubmitOptions{IdempotencyKey: fmt.Sprintf("go-%s-%d-%d", prefix, k, i)})
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := tk.Wait(ctx); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	took := time.Since(began)
	slices.Sort(lat)
	return lat, took
}

func pct(sorted []time.Duration, p float64) time.Duration {
	s := slices.Clone(sorted)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(int(float64(len(s))*p/100), len(s)-1)]
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

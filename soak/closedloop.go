package soak

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ClosedLoop configures a closed-loop measurement: Clients clients, each
// submitting one input with an idempotency key and waiting for its answer
// (GET result?wait=) before the next, until Runs runs are answered or
// Duration has passed, whichever comes first (0: no bound of that kind; one
// must be set).
type ClosedLoop struct {
	Clients  int
	Runs     int
	Duration time.Duration
	// PerThread is how many inputs a client sends to a thread before it
	// moves to a fresh one (0: all to one thread per client).
	PerThread int
	// Prefix names the threads and keys, so that repeated measurements on
	// one server do not meet each other's threads. Default "cl".
	Prefix string
	// Wait is the wait of each result request. Default 30s.
	Wait time.Duration
	// NetHTTP sends the requests through the Client's net/http client
	// rather than each client's own HTTP/1.1 connections (see wireConn),
	// which plain http bases use by default.
	NetHTTP bool
	// OneRequest submits with ?wait= (POST .../inputs?wait=), so that a
	// run answered within the wait costs one request, not two; a run not
	// answered in time is waited for with GET result?wait= as usual.
	OneRequest bool
}

// LoopStats is what a closed-loop measurement saw.
type LoopStats struct {
	Runs    int           // runs answered (completed)
	Elapsed time.Duration // from the first submission to the last answer
	// Latencies are the submit-to-answer times, sorted.
	Latencies []time.Duration
}

// RunsPerSec is the runs answered per second.
func (s LoopStats) RunsPerSec() float64 { return float64(s.Runs) / s.Elapsed.Seconds() }

// Percentile returns the p-th percentile (0 < p ≤ 100) of the latencies.
func (s LoopStats) Percentile(p float64) time.Duration {
	if len(s.Latencies) == 0 {
		return 0
	}
	i := min(int(float64(len(s.Latencies))*p/100), len(s.Latencies)-1)
	return s.Latencies[i]
}

// String is the measurement in one line.
func (s LoopStats) String() string {
	return fmt.Sprintf("runs=%d in %s: %.1f runs/s, p50 %s p90 %s p99 %s", s.Runs, s.Elapsed.Round(time.Millisecond), s.RunsPerSec(),
		s.Percentile(50).Round(time.Microsecond), s.Percentile(90).Round(time.Microsecond), s.Percentile(99).Round(time.Microsecond))
}

// Run measures: it returns the first error a client met (a refused
// submission, a run that did not complete, a transport error), with what
// was measured until then.
func (cl ClosedLoop) Run(ctx context.Context, c *Client) (LoopStats, error) {
	if cl.Clients <= 0 {
		return LoopStats{}, errors.New("closed loop: clients must be positive")
	}
	if cl.Runs <= 0 && cl.Duration <= 0 {
		return LoopStats{}, errors.New("closed loop: give a number of runs or a duration")
	}
	if cl.Prefix == "" {
		cl.Prefix = "cl"
	}
	if cl.Wait <= 0 {
		cl.Wait = 30 * time.Second
	}
	if cl.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cl.Duration)
		defer cancel()
	}
	var (
		left  atomic.Int64
		mu    sync.Mutex
		lat   []time.Duration
		first error
		wg    sync.WaitGroup
	)
	left.Store(int64(cl.Runs))
	if cl.Runs <= 0 {
		left.Store(1 << 62)
	}
	start := time.Now()
	for k := range cl.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var wc *wireConn
			if !cl.NetHTTP && useWire(c) {
				wc = newWireConn(ctx, c)
				defer wc.release()
			}
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
			mine = make([]time.Duration, 0, min(left.Load()/int64(cl.Clients)+1, 4096))
			name := cl.Prefix + "-" + strconv.Itoa(k) // the client's threads and keys
			thread := name
			for i := 0; left.Add(-1) >= 0; i++ {
				if cl.PerThread > 0 && i%cl.PerThread == 0 {
					thread = name + "-" + strconv.Itoa(i/cl.PerThread)
				}
				began := time.Now()
				err := cl.one(ctx, c, wc, thread, name+"-"+strconv.Itoa(i))
				if ctx.Err() != nil {
					return // the duration is over
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					left.Store(-1 << 62)
					return
				}
				mine = append(mine, time.Since(began))
			}
		}()
	}
	wg.Wait()
	st := LoopStats{Runs: len(lat), Elapsed: time.Since(start), Latencies: lat}
	slices.Sort(st.Latencies)
	return st, first
}

func (cl ClosedLoop) one(ctx context.Context, c *Client, wc *wireConn, thread, key string) error {
	var adm Admission
	var err error
	var res Result
	var settled bool
	content := "closed loop " + key
	switch {
	case wc != nil && cl.OneRequest:
		adm, res, settled, err = wc.submitWait(ctx, thread, key, content, cl.Wait)
	case wc != nil:
		adm, err = wc.submit(ctx, thread, key, content)
	case cl.OneRequest:
		adm, res, settled, err = c.SubmitWait(ctx, thread, key, SubmitBody{Content: content}, cl.Wait)
	default:
		adm, err = c.Submit(ctx, thread, key, SubmitBody{Content: content})
	}
	if err != nil {
		return fmt.Errorf("submitting to %s: %w", thread, err)
	}
	if settled {
		if res.State != "completed" {
			return fmt.Errorf("run %s ended %s (%s): %s", adm.RunID, res.State, res.TerminalReason, res.Error)
		}
		return nil
	}
	for {
		var res Result
		var settled bool
		if wc != nil {
			res, settled, err = wc.result(ctx, adm.RunID, cl.Wait)
		} else {
			res, settled, err = c.Result(ctx, adm.RunID, cl.Wait)
		}
		switch {
		case err != nil:
			return fmt.Errorf("waiting for run %s: %w", adm.RunID, err)
		case !settled:
			continue
		case res.State != "completed":
			return fmt.Errorf("run %s ended %s (%s): %s", adm.RunID, res.State, res.TerminalReason, res.Error)
		}
		return nil
	}
}

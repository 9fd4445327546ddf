package storedrivertest

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

var benchRound atomic.Int64

// BenchCommits measures commits on d from threads goroutines, each
// committing to a thread of its own (so none conflict): b.N commits in all,
// each a new run and its input message with the thread header. It reports
// commits/s and the p50 and p99 latency of one commit in µs.
func BenchCommits(b *testing.B, d driver.Driver, threads int) {
	ctx := context.Background()
	round := benchRound.Add(1)
	per := make([]int, threads)
	for i := range b.N {
		per[i%threads]++
	}
	lat := make([][]time.Duration, threads)
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range threads {
		wg.Go(func() {
			th := fmt.Sprintf("bench-%d-%d", round, w)
			l := make([]time.Duration, 0, per[w])
			for v := int64(0); v < int64(per[w]); v++ {
				bt := benchBatch(th, v)
				t0 := time.Now()
				if _, err := d.Commit(ctx, bt); err != nil {
					failed.Store(err)
					return
				}
				l = append(l, time.Since(t0))
			}
			lat[w] = l
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	reportRate(b, lat, elapsed, "commits/s")
}

// BenchRoundTrip measures one read (LoadThread of a thread with an open
// run) from one goroutine, reporting p50 and p99 latency in µs.
func BenchRoundTrip(b *testing.B, d driver.Driver) {
	ctx := context.Background()
	th := seedThread(b, d)
	benchLatency(b, timedCall{"", func() error {
		_, err := d.LoadThread(ctx, th)
		return err
	}})
}

// BenchInfoRoundTrip measures Info, the call that does the least work in
// the driver, alternating with LoadThread calls so that both meet the same
// load: p50-µs is Info's, load-p50-µs LoadThread's. Their difference is the
// driver's share of a round trip; Info alone is the transport's.
func BenchInfoRoundTrip(b *testing.B, d driver.Driver) {
	ctx := context.Background()
	th := seedThread(b, d)
	benchLatency(b, timedCall{"", func() error {
		_, err := d.Info(ctx)
		return err
	}}, timedCall{"load-", func() error {
		_, err := d.LoadThread(ctx, th)
		return err
	}})
}

// seedThread commits a thread of its own for a benchmark to read.
func seedThread(b *testing.B, d driver.Driver) string {
	th := fmt.Sprintf("bench-rt-%d", benchRound.Add(1))
	if _, err := d.Commit(context.Background(), benchBatch(th, 0)); err != nil {
		b.Fatal(err)
	}
	return th
}

// timedCall is a call benchLatency times, and the prefix of its metrics.
type timedCall struct {
	prefix string
	call   func() error
}

// benchLatency makes b.N rounds of the calls, one at a time and in turn,
// and reports each call's p50 and p99 in µs as prefix+"p50-µs" and
// prefix+"p99-µs".
func benchLatency(b *testing.B, calls ...timedCall) {
	lat := make([][]time.Duration, len(calls))
	for i := range lat {
		lat[i] = make([]time.Duration, 0, b.N)
	}
	b.ResetTimer()
	for range b.N {
		for i, c := range calls {
			t0 := time.Now()
			if err := c.call(); err != nil {
				b.Fatal(err)
			}
			lat[i] = append(lat[i], time.Since(t0))
		}
	}
	b.StopTimer()
	for i, c := range calls {
		slices.Sort(lat[i])
		b.ReportMetric(float64(lat[i][len(lat[i])/2].Nanoseconds())/1e3, c.prefix+"p50-µs")
		b.ReportMetric(float64(lat[i][len(lat[i])*99/100].Nanoseconds())/1e3, c.prefix+"p99-µs")
	}
}

// benchBatch is the commit that admits an input on thread th at version v.
// Its run and message ids have the form the host gives them (a prefix and
// 32 hex digits that grow with time, as a version 7 UUID does), since a
// driver may rely on it to check new ids faster (badgerstore does).
func benchBatch(th string, v int64) driver.Batch {
	n := v + 1
	cid := fmt.Sprintf("%s-c%d", th, n)
	run, in := benchID("run"), benchID("msg")
	return driver.Batch{
		CommitID: cid, ThreadID: th, ExpectedVersion: v,
		Thread: record.Thread{ID: th, Version: n, NextRunSeq: n + 1, NextMessageSeq: n + 1, OpenRunIDs: []string{run},
			LastCommitID: cid, UpdatedAt: time.Now()},
		Runs: []record.Run{{ID: run, ThreadID: th, Seq: n, State: record.StateQueued, Attempt: 1,
			InputMessageIDs: []string{in}, AssistantMessageID: benchID("msg"), CreatedAt: time.Now()}},
		Messages: []record.Message{{ID: in, ThreadID: th, RunID: run, Seq: n, Role: record.RoleUser,
			Content: "a question of about this length, as users ask them", CreatedAt: time.Now()}},
	}
}

// BenchStepCommits measures CommitSteps on d (a driver of store protocol 2)
// from runs goroutines, each the executor of an active run of its own on a
// thread of its own: b.N step commits in all, one step each (a model
// message, a tool result or a take, in turn). It reports steps/s and the
// p50 and p99 latency of one step commit in µs.
func BenchStepCommits(b *testing.B, d driver.Driver, runs int) {
	ss, ok := d.(driver.StepStore)
	if !ok {
		b.Fatalf("%T keeps no step records (store protocol 1)", d)
	}
	ctx := context.Background()
	round := benchRound.Add(1)
	active := make([]record.Run, runs)
	for w := range runs {
		th := NewBuilder(fmt.Sprintf("bench-steps-%d-%d", round, w))
		r := Activate(th.Run(th.ID+"-run"), StepOwner, StepAttempt)
		bt := th.Batch([]string{r.ID}, []record.Run{r}, []record.Message{th.Msg(r.ID+"-in", r.ID)}, nil)
		if _, err := d.Commit(ctx, bt); err != nil {
			b.Fatal(err)
		}
		active[w] = r
	}
	per := make([]int, runs)
	for i := range b.N {
		per[i%runs]++
	}
	lat := make([][]time.Duration, runs)
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range runs {
		wg.Go(func() {
			r := active[w]
			l := make([]time.Duration, 0, per[w])
			for seq := int64(1); seq <= int64(per[w]); seq++ {
				sb := StepBatchOf(r, Step(r, seq))
				t0 := time.Now()
				if err := ss.CommitSteps(ctx, sb); err != nil {
					failed.Store(err)
					return
				}
				l = append(l, time.Since(t0))
			}
			lat[w] = l
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	reportRate(b, lat, elapsed, "steps/s")
}

// reportRate reports the calls timed in lat (one slice per worker) as a
// rate over elapsed, in unit, and their p50 and p99 latencies.
func reportRate(b *testing.B, lat [][]time.Duration, elapsed time.Duration, unit string) {
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), unit)
	b.ReportMetric(float64(all[len(all)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// benchSeq orders the ids benchID makes within a millisecond.
var benchSeq atomic.Uint64

// benchID makes an id of the form the host's have (store.NewID): the
// prefix, then 32 hex digits that begin with the time in milliseconds and
// grow with each id. The host's draw the rest from crypto/rand, whose cost
// is not a commit's.
func benchID(prefix string) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	binary.BigEndian.PutUint64(b[8:], benchSeq.Add(1))
	return prefix + "_" + hex.EncodeToString(b[:])
}

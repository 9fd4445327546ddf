package soak

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Report is what the final checks found.
type Report struct {
	Checked   int             // accepted submissions checked
	Lost      int             // accepted submissions without a result, or whose result does not answer them
	Answered  int             // answered by their own run
	Absorbed  int             // answered by the run that absorbed theirs
	Failed    int             // ended failed, with an error
	Unasked   int             // of those, inputs that did not ask the scripted model to fail
	Stopped   int             // ended interrupted or canceled
	Keys      int             // idempotency keys checked again
	Runs      int             // runs seen on the threads
	Latencies []time.Duration // submit to answer, answered submissions
	Errors    map[string]int  // failed submissions by their run's error
	Problems  []string        // every violation, lost inputs included
}

func (r *Report) fail(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Check checks from the outside, over HTTP, what the soak must guarantee:
// every accepted submission has a result that accounts for it; every key
// returns the same admission; no thread had two active runs and the runs
// of a thread settled in seq order; every absorbed run points at a
// completed run that holds its inputs. wait bounds the wait for results.
func Check(ctx context.Context, c *Client, subs []Submission, threads []string, wait time.Duration) *Report {
	rep := &Report{Checked: len(subs), Errors: map[string]int{}}
	deadline := time.Now().Add(wait)

	// Results, by run (several submissions may share one run).
	byRun := map[string][]Submission{}
	for _, s := range subs {
		byRun[s.RunID] = append(byRun[s.RunID], s)
	}
	runIDs := make([]string, 0, len(byRun))
	for id := range byRun {
		runIDs = append(runIDs, id)
	}
	sort.Strings(runIDs)
	results := make(map[string]Result, len(runIDs))
	var mu sync.Mutex
	parallel(16, len(runIDs), func(i int) {
		id := runIDs[i]
		for time.Now().Before(deadline) && ctx.Err() == nil {
			rctx, cancel := context.WithTimeout(ctx, 40*time.Second)
			res, ok, err := c.Result(rctx, id, 30*time.Second)
			cancel()
			if err == nil && ok {
				mu.Lock()
				results[id] = res
				mu.Unlock()
				return
			}
			if err != nil && !retryable(err) {
				mu.Lock()
				rep.fail("result of %s: %v", id, err)
				mu.Unlock()
				return
			}
			sleep(ctx, 200*time.Millisecond)
		}
	})

	// The threads' runs.
	runs := map[string]RunRecord{}
	for _, t := range threads {
		var rs []RunRecord
		var err error
		for try := 0; try < 20; try++ {
			if rs, err = c.ThreadRuns(ctx, t); err == nil || !retryable(err) {
				break
			}
			sleep(ctx, 250*time.Millisecond)
		}
		if err != nil {
			if p, ok := err.(*Problem); ok && p.Code == "not_found" {
				continue // no submission reached it
			}
			rep.fail("runs of thread %s: %v", t, err)
			continue
		}
		rep.Runs += len(rs)
		checkThread(rep, t, rs)
		for _, r := range rs {
			runs[r.ID] = r
		}
	}

	// Every accepted submission: a result that accounts for it.
	for _, s := range subs {
		res, ok := results[s.RunID]
		if !ok {
			rep.Lost++
			rep.fail("lost: %s (key %s, thread %s, run %s): no result", s.Content, s.Key, s.Thread, s.RunID)
			continue
		}
		run, ok := runs[s.RunID]
		if !ok {
			rep.Lost++
			rep.fail("lost: %s: run %s is not among thread %s's runs", s.Content, s.RunID, s.Thread)
			continue
		}
		if !slices.Contains(run.InputMessageIDs, s.InputMessageID) {
			rep.fail("run %s does not hold input %s it was admitted with", s.RunID, s.InputMessageID)
		}
		switch {
		case res.State == "completed" && res.TerminalReason == "completed":
			if res.Answer == nil || !strings.Contains(res.Answer.Content, s.Content) {
				rep.Lost++
				rep.fail("lost: %s: run %s completed with an answer that does not hold it: %v", s.Content, s.RunID, res.Answer)
				continue
			}
			rep.Answered++
			rep.latency(s, runs[s.RunID])
		case res.TerminalReason == "absorbed":
			if res.Answer == nil || res.AnsweredByRunID == "" || res.AnsweredByRunID == s.RunID {
				rep.Lost++
				rep.fail("lost: %s: absorbed run %s without the absorbing run's answer: %+v", s.Content, s.RunID, res)
				continue
			}
			if !strings.Contains(res.Answer.Content, s.Content) {
				rep.fail("absorbed %s: the answer of %s does not hold it: %q", s.Content, res.AnsweredByRunID, res.Answer.Content)
			}
			rep.Absorbed++
			rep.latency(s, runs[res.AnsweredByRunID])
		case res.State == "failed":
			if res.Error == "" {
				rep.fail("run %s failed without an error", s.RunID)
			}
			rep.Failed++
			rep.Errors[res.Error]++
			if !strings.Contains(s.Content, "please fail") {
				// Nothing in the soak excuses a failure the input did not
				// ask for: kills and restarts must not fail a run.
				rep.Unasked++
				rep.fail("unasked failure: %s: run %s failed: %s", s.Content, s.RunID, res.Error)
			}
		case res.State == "interrupted":
			rep.Stopped++
		default:
			rep.Lost++
			rep.fail("lost: %s: run %s settled as %s/%s", s.Content, s.RunID, res.State, res.TerminalReason)
		}
	}

	// Absorptions: into a completed run that holds the absorbed inputs.
	for _, r := range runs {
		if r.TerminalReason != "absorbed" && r.AbsorbedIntoRunID == "" {
			continue
		}
		if r.State != "superseded" || r.TerminalReason != "absorbed" {
			rep.fail("run %s points at %s but is %s/%s", r.ID, r.AbsorbedIntoRunID, r.State, r.TerminalReason)
		}
		into, ok := runs[r.AbsorbedIntoRunID]
		if !ok {
			rep.fail("absorbed run %s points at unknown run %q", r.ID, r.AbsorbedIntoRunID)
			continue
		}
		if into.State != "completed" {
			rep.fail("run %s absorbed %s but did not complete (%s/%s)", into.ID, r.ID, into.State, into.TerminalReason)
		}
		if into.ThreadID != r.ThreadID {
			rep.fail("run %s absorbed %s of another thread", into.ID, r.ID)
		}
		for _, m := range r.InputMessageIDs {
			if !slices.Contains(into.InputMessageIDs, m) {
				rep.fail("run %s absorbed %s but does not hold its input %s", into.ID, r.ID, m)
			}
		}
	}

	// Keys: the same admission as before the kills.
	var kmu sync.Mutex
	parallel(16, len(subs), func(i int) {
		s := subs[i]
		var a Admission
		var err error
		for try := 0; try < 20; try++ {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			a, err = c.Submit(rctx, s.Thread, s.Key, SubmitBody{Content: s.Content, Hint: s.Hint})
			cancel()
			if !retryable(err) {
				break
			}
			sleep(ctx, 250*time.Millisecond)
		}
		kmu.Lock()
		defer kmu.Unlock()
		rep.Keys++
		switch {
		case err != nil:
			rep.fail("key %s on %s: %v", s.Key, s.Thread, err)
		case a.RunID != s.RunID || a.InputMessageID != s.InputMessageID:
			rep.fail("key %s on %s: admitted as %s/%s, now %s/%s", s.Key, s.Thread, s.RunID, s.InputMessageID, a.RunID, a.InputMessageID)
		}
	})
	return rep
}

// checkThread checks one thread's runs (in seq order): at most one active;
// the runs that executed (completed, failed, interrupted but not canceled)
// ran one after the other in seq order.
func checkThread(rep *Report, thread string, rs []RunRecord) {
	active := 0
	var prev *RunRecord
	for i := range rs {
		r := &rs[i]
		if i > 0 && r.Seq <= rs[i-1].Seq {
			rep.fail("thread %s: runs out of seq order: %d after %d", thread, r.Seq, rs[i-1].Seq)
		}
		if r.State == "active" {
			active++
		}
		executed := (r.State == "completed" || r.State == "failed" || r.State == "interrupted") &&
			r.TerminalReason != "canceled" && r.StartedAt != nil && r.EndedAt != nil
		if !executed {
			continue
		}
		if prev != nil {
			if r.EndedAt.Before(*prev.EndedAt) {
				rep.fail("thread %s: run %s (seq %d) ended at %s, before run %s (seq %d) at %s",
					thread, r.ID, r.Seq, r.EndedAt.Format(time.RFC3339Nano), prev.ID, prev.Seq, prev.EndedAt.Format(time.RFC3339Nano))
			}
			if r.StartedAt.Before(*prev.EndedAt) {
				rep.fail("thread %s: run %s (seq %d) started at %s, while run %s (seq %d) was active until %s",
					thread, r.ID, r.Seq, r.StartedAt.Format(time.RFC3339Nano), prev.ID, prev.Seq, prev.EndedAt.Format(time.RFC3339Nano))
			}
		}
		prev = r
	}
	if active > 1 {
		rep.fail("thread %s: %d active runs", thread, active)
	}
}

func (r *Report) latency(s Submission, answering RunRecord) {
	if answering.EndedAt != nil {
		r.Latencies = append(r.Latencies, answering.EndedAt.Sub(s.SubmittedAt))
	}
}

// Percentile returns the p-th percentile (0..100) of ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

// parallel calls f(0..n-1) on k goroutines.
func parallel(k, n int, f func(int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

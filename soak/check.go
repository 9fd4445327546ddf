package soak

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
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
	Carried   int             // failed or stopped inputs a later run of their thread answered (they stay in its prompt)
	Completed []string        // ids of the completed runs
	Keys      int             // idempotency keys checked again
	Runs      int             // runs seen on the threads
	Latencies []time.Duration // submit to answer, answered submissions
	Errors    map[string]int  // failed submissions by their run's error
	// Duplicates counts inputs answered by more than one completed run;
	// DupsBy splits them by what explains the second answer: "fault" (a
	// fault the soak injected while the answering runs lived, or one of
	// them recovered), "interrupt" (a run of the thread interrupted then),
	// "unexplained" (nothing: invariant I11b broken, a problem).
	Duplicates int
	DupsBy     map[string]int
	Problems   []string // every violation, lost inputs included
}

func (r *Report) fail(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Fault is a fault the soak injected, from its start to the moment the
// service was back (a server kill until the restarted server answered, a
// driver kill until a new driver ran, a nemesis's hold).
type Fault struct {
	Kind       string // "server kill", "driver kill", or a nemesis's name
	Start, End time.Time
}

// answerSep joins the inputs in the scripted model's echo answer.
const answerSep = " | "

// answerParts splits a scripted echo answer into the inputs it answers:
// the user messages of the prompt after its last answer (model.Echo), so
// an input is answered when its whole content is one part, not when the
// answer merely contains its text.
func answerParts(answer string) []string {
	if answer == "" {
		return nil
	}
	return strings.Split(answer, answerSep)
}

// Check checks from the outside, over HTTP, what the soak must guarantee:
// every accepted submission is answered exactly once, by the completed run
// that holds it (its own or the run that absorbed it), or ended failed or
// interrupted; an input answered twice is explained by one of faults or an
// interrupt of its thread, or it is a problem; every key returns the same
// admission; no thread had two active runs and the runs of a thread settled
// in seq order; every absorbed run points at a completed run that holds its
// inputs. wait bounds the wait for results.
func Check(ctx context.Context, c *Client, subs []Submission, threads []string, faults []Fault, wait time.Duration) *Report {
	rep := &Report{Checked: len(subs), Errors: map[string]int{}, DupsBy: map[string]int{}}
	deadline := time.Now().Add(wait)

	// The threads' runs.
	runs := map[string]RunRecord{}
	byThread := map[string][]RunRecord{}
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
		byThread[t] = rs
		for _, r := range rs {
			runs[r.ID] = r
		}
	}

	// Results: of every submission's run, and of every completed run (an
	// answer counts wherever it is).
	want := map[string]bool{}
	for _, s := range subs {
		want[s.RunID] = true
	}
	for id, r := range runs {
		if r.State == "completed" {
			want[id] = true
		}
	}
	runIDs := make([]string, 0, len(want))
	for id := range want {
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

	// The runs again, now that every result settled: the first reading
	// may have been taken while some were still active.
	for _, t := range threads {
		rs, ok := byThread[t]
		if !ok {
			continue
		}
		if again, err := c.ThreadRuns(ctx, t); err == nil {
			rs = again
		}
		rep.Runs += len(rs)
		checkThread(rep, t, rs)
		for _, r := range rs {
			runs[r.ID] = r
		}
	}

	for id, r := range runs {
		if r.State != "completed" {
			continue
		}
		rep.Completed = append(rep.Completed, id)
		if _, ok := results[id]; !ok {
			// Completed since the first reading, and no submission of
			// ours: its answer counts all the same.
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if res, ok, err := c.Result(rctx, id, 0); err == nil && ok {
				results[id] = res
			}
			cancel()
		}
	}
	sort.Strings(rep.Completed)

	// Who answered what: the completed runs answering each content.
	answeredBy := map[string][]string{}
	for id, res := range results {
		if res.State != "completed" || res.Answer == nil {
			continue
		}
		for _, part := range answerParts(res.Answer.Content) {
			answeredBy[part] = append(answeredBy[part], id)
		}
	}

	// Every accepted submission: a result that accounts for it, and no
	// second answer unless a fault or an interrupt explains it.
	for _, s := range subs {
		by := answeredBy[s.Content]
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
			if !slices.Contains(by, s.RunID) {
				rep.Lost++
				rep.fail("lost: %s: run %s completed with an answer that does not answer it: %s", s.Content, s.RunID, answerText(res))
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
			if !slices.Contains(by, res.AnsweredByRunID) {
				rep.Lost++
				rep.fail("lost: %s: absorbed by %s, whose answer does not answer it: %q", s.Content, res.AnsweredByRunID, res.Answer.Content)
				continue
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
			continue
		}
		// An input its run did not answer stays in the thread's prompt:
		// the next run to complete answers it (once).
		if (res.State == "failed" || res.State == "interrupted") && len(by) > 0 {
			rep.Carried++
		}
		if len(by) > 1 {
			rep.Duplicates++
			why := explain(by, runs, byThread[s.Thread], faults)
			rep.DupsBy[why]++
			if why == "unexplained" {
				rep.fail("answered %d times with no fault or interrupt in between: %s (run %s) answered by %v", len(by), s.Content, s.RunID, by)
			}
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

// explain says what makes a second answer by the runs by legitimate: a
// fault injected while they lived (from the first one's start to the last
// one's end) or one of them recovered after a fault ("fault"), or a run of
// the thread interrupted in that window ("interrupt"); else "unexplained".
func explain(by []string, runs map[string]RunRecord, thread []RunRecord, faults []Fault) string {
	var from, to time.Time
	for _, id := range by {
		r := runs[id]
		if r.Attempt > 1 {
			return "fault"
		}
		start := r.CreatedAt
		if r.StartedAt != nil {
			start = *r.StartedAt
		}
		if from.IsZero() || start.Before(from) {
			from = start
		}
		if r.EndedAt != nil && r.EndedAt.After(to) {
			to = *r.EndedAt
		}
	}
	for _, f := range faults {
		if !f.Start.After(to) && !f.End.Before(from) {
			return "fault"
		}
	}
	for _, r := range thread {
		if r.State == "interrupted" && r.TerminalReason != "canceled" && r.EndedAt != nil &&
			!r.EndedAt.Before(from) && !r.EndedAt.After(to) {
			return "interrupt"
		}
	}
	return "unexplained"
}

// twice is the summary lines' field of inputs answered twice, by what
// explains it.
func (r *Report) twice() string {
	if r == nil {
		return "answered_twice=?"
	}
	return fmt.Sprintf("answered_twice=%d(fault:%d,interrupt:%d,unexplained:%d)",
		r.Duplicates, r.DupsBy["fault"], r.DupsBy["interrupt"], r.DupsBy["unexplained"])
}

func answerText(res Result) string {
	if res.Answer == nil {
		return "(none)"
	}
	return strconv.Quote(res.Answer.Content)
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

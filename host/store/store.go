// Package store is the host's store layer: it runs the run-state reducer
// (package host/runstate) over a store driver (package abi/driver).
//
// Every mutation follows one loop: load the thread with its version, reduce,
// and commit the effects as one batch conditional on that version; on a
// version conflict, load again and retry. The policy decision of an admission
// is taken inside the loop, against the snapshot that the commit is
// conditional on, and only when the reducer says the thread is busy.
//
// The store also answers the questions the runtime asks of durable state:
// which runs are active (ListActive), which need executing after a restart
// (ScanRecoverable), and what answered a run (Result), following an absorbed
// run's pointer to the run that answered it.
package store

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
)

// Errors of the store layer, beyond the reducer's and the driver's (which it
// returns wrapped, so errors.Is works on them too).
var (
	// ErrContention: the thread kept changing under the store for
	// Options.MaxRetries attempts.
	ErrContention = errors.New("thread contention: too many version conflicts")
	// ErrOutcomeUnknown: a commit failed in a way that leaves its outcome
	// unknown, and reading back could not settle it.
	ErrOutcomeUnknown = errors.New("commit outcome unknown")
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// NewID returns a fresh id with the given prefix ("run", "msg", ...).
	// Default: the prefix, "_", and a time-ordered UUID.
	NewID func(prefix string) string
	// Now returns the current time. Default: time.Now.
	Now func() time.Time
	// MaxRetries bounds the attempts of one mutation under version conflicts.
	// Default 64.
	MaxRetries int
	// MaxAttempts bounds the executions of a run across recoveries. Default 3.
	MaxAttempts int
	// PageSize is the page size of scans. Default 256.
	PageSize int
	// ObserveCommit, when set, is called after every driver commit with its
	// latency and error.
	ObserveCommit func(d time.Duration, err error)
	// Fence maps the owner a run executes under (the host epoch of Start,
	// CommitTerminal and Recover) to the lease epoch its commits are fenced
	// by; 0 for none. Default: no fences (one host per store).
	Fence func(owner string) int64
	// OwnerLive reports whether a lease epoch other than the committer's is
	// live. A fenced commit on a thread that such a lease owns is refused
	// with driver.ErrFenced before it is sent (the driver would refuse it
	// too). Default: every owner is taken to be live, leaving it to the
	// driver.
	OwnerLive func(epoch int64) bool
}

// Store is the store layer over one driver. It is safe for concurrent use.
type Store struct {
	d     driver.Driver
	opt   Options
	snaps snapCache
}

// New returns a store layer over d.
func New(d driver.Driver, opt Options) *Store {
	if opt.NewID == nil {
		opt.NewID = NewID
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.MaxRetries <= 0 {
		opt.MaxRetries = 64
	}
	if opt.MaxAttempts <= 0 {
		opt.MaxAttempts = 3
	}
	if opt.PageSize <= 0 {
		opt.PageSize = 256
	}
	if opt.Fence == nil {
		opt.Fence = func(string) int64 { return 0 }
	}
	if opt.OwnerLive == nil {
		opt.OwnerLive = func(int64) bool { return false }
	}
	return &Store{d: d, opt: opt, snaps: snapCache{m: map[string]driver.ThreadSnapshot{}, max: 4096}}
}

// NewID returns prefix + "_" + a time-ordered UUID (version 7) in hex.
func NewID(prefix string) string {
	return prefix + "_" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
}

// Driver returns the driver the store writes to.
func (s *Store) Driver() driver.Driver { return s.d }

// Submission is an input submitted to a thread.
type Submission struct {
	ThreadID string
	Key      string // idempotency key, optional
	Content  string
	Hint     string
	Metadata map[string]string
}

// ThreadView is what an input policy sees of a busy thread.
type ThreadView struct {
	Thread record.Thread
	Active *record.Run  // the active run, if any
	Queued []record.Run // the queued runs, in seq order
	Input  Submission   // the submission being decided
}

// Decider returns the input policy's decision for a submission to a busy
// thread. It may be called more than once for one submission (once per
// attempt of the optimistic loop), each time with the current view.
type Decider func(ctx context.Context, v ThreadView) (runstate.Decision, error)

// Admission is the outcome of Admit.
type Admission struct {
	runstate.Admission
	// AnsweredByRunID is set on a duplicate whose run was absorbed: the run
	// whose answer answers this input.
	AnsweredByRunID string
	// ThreadOwner is the thread's owner (a lease epoch, 0: none) as of the
	// admission's commit; 0 for a duplicate.
	ThreadOwner int64
}

// Admit admits a submission: the input message, its run (or its place in an
// existing run) and its idempotency record, in one commit.
func (s *Store) Admit(ctx context.Context, sub Submission, decide Decider) (Admission, error) {
	m := runstate.Admit{
		ThreadID: sub.ThreadID, Key: sub.Key, Content: sub.Content, Hint: sub.Hint, Metadata: sub.Metadata,
		RunID: s.opt.NewID("run"), InputMessageID: s.opt.NewID("msg"), AssistantMessageID: s.opt.NewID("msg"),
	}
	// An admission reads the thread fresh: its policy decides from it, and a
	// decision (a rejection) that no commit checks must not come from a
	// stale snapshot.
	eff, err := s.apply(ctx, sub.ThreadID, sub.Key, 0, false, func(snap runstate.Snapshot) (runstate.Effects, error) {
		m.Now = s.opt.Now()
		m.Decision = nil
		eff, err := runstate.Reduce(snap, m)
		if !errors.Is(err, runstate.ErrDecisionRequired) {
			return eff, err
		}
		if decide == nil {
			return runstate.Effects{}, fmt.Errorf("%w, and no input policy is configured", err)
		}
		d, err := decide(ctx, view(snap, sub))
		if err != nil {
			return runstate.Effects{}, fmt.Errorf("input policy: %w", err)
		}
		m.Decision = &d
		return runstate.Reduce(snap, m)
	})
	if err != nil {
		return Admission{}, err
	}
	adm := Admission{Admission: *eff.Admission}
	if eff.Thread != nil {
		adm.ThreadOwner = eff.Thread.Owner
	}
	if adm.Duplicate {
		res, err := s.Result(ctx, adm.RunID)
		if err != nil {
			return Admission{}, fmt.Errorf("duplicate key %q: reading its run: %w", sub.Key, err)
		}
		if res.AnsweredByRunID != adm.RunID {
			adm.AnsweredByRunID = res.AnsweredByRunID
		}
	}
	return adm, nil
}

func view(snap runstate.Snapshot, sub Submission) ThreadView {
	v := ThreadView{Thread: snap.Thread, Input: sub}
	for i := range snap.Open {
		if snap.Open[i].State == record.StateActive {
			r := snap.Open[i]
			v.Active = &r
		} else {
			v.Queued = append(v.Queued, snap.Open[i])
		}
	}
	return v
}

// Start makes the head of the thread's queue active under owner.
func (s *Store) Start(ctx context.Context, threadID, owner string) (record.Run, error) {
	eff, err := s.reduce(ctx, threadID, s.opt.Fence(owner), func() runstate.Mutation {
		return runstate.Start{ThreadID: threadID, Owner: owner, Now: s.opt.Now()}
	})
	if err != nil {
		return record.Run{}, err
	}
	return *eff.Run, nil
}

// CommitTerminal ends an active run; see runstate.CommitTerminal. It returns
// the run as committed and the absorb entries that were dropped.
func (s *Store) CommitTerminal(ctx context.Context, m runstate.CommitTerminal) (record.Run, []runstate.DroppedAbsorb, error) {
	eff, err := s.reduce(ctx, m.ThreadID, s.opt.Fence(m.Owner), func() runstate.Mutation {
		m.Now = s.opt.Now()
		return m
	})
	if err != nil {
		return record.Run{}, nil, err
	}
	return *eff.Run, eff.Dropped, nil
}

// Recover returns run, found active under the gone owner deadOwner, to the
// queue (or fails it once it has used its attempts), committing as the owner
// by. A run that is queued is returned as it is.
func (s *Store) Recover(ctx context.Context, run record.Run, deadOwner, by string) (record.Run, error) {
	eff, err := s.reduce(ctx, run.ThreadID, s.opt.Fence(by), func() runstate.Mutation {
		return runstate.Recover{ThreadID: run.ThreadID, RunID: run.ID, DeadOwner: deadOwner, MaxAttempts: s.opt.MaxAttempts, Now: s.opt.Now()}
	})
	if err != nil {
		return record.Run{}, err
	}
	return *eff.Run, nil
}

// Cancel ends a queued run at an operator's request.
func (s *Store) Cancel(ctx context.Context, runID string) (record.Run, error) {
	run, err := s.GetRun(ctx, runID)
	if err != nil {
		return record.Run{}, err
	}
	if runstate.IsTerminal(run.State) {
		return record.Run{}, fmt.Errorf("%w: run %s is %s", runstate.ErrNotQueued, runID, run.State)
	}
	eff, err := s.reduce(ctx, run.ThreadID, 0, func() runstate.Mutation {
		return runstate.Cancel{ThreadID: run.ThreadID, RunID: runID, Now: s.opt.Now()}
	})
	if err != nil {
		return record.Run{}, err
	}
	return *eff.Run, nil
}

func (s *Store) reduce(ctx context.Context, threadID string, fence int64, mut func() runstate.Mutation) (runstate.Effects, error) {
	return s.apply(ctx, threadID, "", fence, true, func(snap runstate.Snapshot) (runstate.Effects, error) {
		return runstate.Reduce(snap, mut())
	})
}

// apply runs the optimistic loop: load, reduce, commit conditionally, retry
// on conflict. A fence other than 0 fences the commit by that lease epoch,
// which becomes the thread's owner (see driver.Leaser).
func (s *Store) apply(ctx context.Context, threadID, key string, fence int64, useCache bool, reduce func(runstate.Snapshot) (runstate.Effects, error)) (runstate.Effects, error) {
	if threadID == "" {
		return runstate.Effects{}, fmt.Errorf("%w: empty thread id", runstate.ErrInvalid)
	}
	// The first attempt may start from the snapshot this store layer's own
	// last commit on the thread left (no read); whatever it decides is
	// either checked by the commit's version, or redone from a fresh read.
	var cached driver.ThreadSnapshot
	fromCache := false
	if useCache {
		cached, fromCache = s.snaps.get(threadID)
	}
	for attempt := 0; attempt < s.opt.MaxRetries; attempt++ {
		ts := cached
		if !fromCache {
			// Load the thread before the key: an admission that writes the
			// key after this load also moves the version, so this commit
			// conflicts.
			var err error
			if ts, err = s.d.LoadThread(ctx, threadID); err != nil {
				return runstate.Effects{}, fmt.Errorf("loading thread %s: %w", threadID, err)
			}
		}
		// redo starts the attempt again from a fresh read: a decision made
		// from a cached snapshot that no commit would check.
		redo := func() bool {
			if !fromCache {
				return false
			}
			fromCache = false
			s.snaps.forget(threadID)
			attempt--
			return true
		}
		snap := runstate.Snapshot{Thread: ts.Thread, Open: ts.Runs}
		if o := ts.Thread.Owner; fence != 0 && o != 0 && o != fence && s.opt.OwnerLive(o) {
			if redo() {
				continue
			}
			return runstate.Effects{}, &FencedError{ThreadID: threadID, Owner: o}
		}
		if key != "" {
			k, err := s.d.GetIdempotency(ctx, threadID, key)
			switch {
			case err == nil:
				snap.Idempotency = &k
			case !errors.Is(err, driver.ErrNotFound):
				return runstate.Effects{}, fmt.Errorf("looking up key %q: %w", key, err)
			}
		}
		eff, err := reduce(snap)
		if err != nil || eff.Empty() {
			if redo() {
				continue
			}
			return eff, err
		}
		b := Batch(snap.Thread.Version, eff, s.opt.NewID("commit"))
		if fence != 0 {
			b.Fence, b.Thread.Owner = fence, fence
		}
		began := time.Now()
		_, err = s.d.Commit(ctx, b)
		if s.opt.ObserveCommit != nil {
			s.opt.ObserveCommit(time.Since(began), err)
		}
		fromCache = false
		if err != nil {
			s.snaps.forget(threadID)
		}
		switch {
		case err == nil:
			s.snaps.put(b, snap.Open, eff.RunRecords)
			return eff, nil
		case errors.Is(err, driver.ErrVersionConflict):
			if err := ctx.Err(); err != nil {
				return runstate.Effects{}, err
			}
			continue
		case errors.Is(err, driver.ErrFenced):
			return runstate.Effects{}, &FencedError{ThreadID: threadID, Owner: snap.Thread.Owner, Err: err}
		case errors.Is(err, driver.ErrInvalidArgument), errors.Is(err, driver.ErrTooLarge):
			return runstate.Effects{}, fmt.Errorf("committing to thread %s: %w", threadID, err)
		}
		// The commit may or may not have landed: settle it by reading.
		applied, serr := s.settle(ctx, b)
		switch {
		case serr != nil:
			return runstate.Effects{}, fmt.Errorf("%w: committing to thread %s: %w (reading back: %w)", ErrOutcomeUnknown, threadID, err, serr)
		case applied:
			return eff, nil
		default:
			return runstate.Effects{}, fmt.Errorf("committing to thread %s (not applied): %w", threadID, err)
		}
	}
	return runstate.Effects{}, fmt.Errorf("%w: thread %s, %d attempts", ErrContention, threadID, s.opt.MaxRetries)
}

// FencedError is a fenced commit refused: the committer's lease is not live,
// or Owner, another live lease, owns the thread. It wraps driver.ErrFenced.
type FencedError struct {
	ThreadID string
	Owner    int64 // the thread's owner as last read
	Err      error // the driver's refusal; nil when refused before sending
}

func (e *FencedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("committing to thread %s: %v", e.ThreadID, e.Err)
	}
	return fmt.Sprintf("%v: thread %s is owned by live lease %d", driver.ErrFenced, e.ThreadID, e.Owner)
}

func (e *FencedError) Unwrap() error { return driver.ErrFenced }

// settle reads back a batch whose commit failed and reports whether it was
// applied.
func (s *Store) settle(ctx context.Context, b driver.Batch) (bool, error) {
	ts, err := s.d.LoadThread(ctx, b.ThreadID)
	if err != nil {
		return false, err
	}
	switch {
	case ts.Thread.LastCommitID == b.CommitID:
		return true, nil
	case ts.Thread.Version == b.ExpectedVersion:
		return false, nil
	}
	return false, fmt.Errorf("thread %s moved to version %d past the batch's %d", b.ThreadID, ts.Thread.Version, b.Thread.Version)
}

// Batch turns effects computed from a snapshot at version expected into the
// driver batch that commits them.
func Batch(expected int64, eff runstate.Effects, commitID string) driver.Batch {
	t := *eff.Thread
	t.LastCommitID = commitID
	b := driver.Batch{
		CommitID:        commitID,
		ThreadID:        t.ID,
		ExpectedVersion: expected,
		Thread:          t,
		Runs:            eff.RunRecords,
		Idempotency:     eff.Idempotency,
	}
	for _, h := range eff.HistoryMutations {
		b.Messages = append(b.Messages, h.Message) // HistoryAppend is the only op
	}
	return b
}

// Thread returns a thread's header and open runs.
func (s *Store) Thread(ctx context.Context, threadID string) (driver.ThreadSnapshot, error) {
	return s.d.LoadThread(ctx, threadID)
}

// GetRun returns a run.
func (s *Store) GetRun(ctx context.Context, id string) (record.Run, error) {
	runs, err := s.d.GetRuns(ctx, []string{id})
	if err != nil {
		return record.Run{}, err
	}
	return runs[0], nil
}

// Result is what answered a run.
type Result struct {
	RunID string
	// State and TerminalReason are the asked run's.
	State          record.RunState
	TerminalReason record.TerminalReason
	// Settled: the run is terminal.
	Settled bool
	// AnsweredByRunID is the run whose answer answers this run's inputs: the
	// run itself, or the run that absorbed it. Empty while unsettled and for
	// runs that ended without an answer.
	AnsweredByRunID string
	// Answer is the answering run's assistant message, nil when there is none.
	Answer *record.Message
	// Error is the asked run's error, for a failed run.
	Error string
}

// Result reports what answered run id, following absorbedIntoRunId.
func (s *Store) Result(ctx context.Context, id string) (Result, error) {
	run, err := s.GetRun(ctx, id)
	if err != nil {
		return Result{}, err
	}
	res := Result{RunID: id, State: run.State, TerminalReason: run.TerminalReason, Settled: runstate.IsTerminal(run.State), Error: run.Error}
	ans := run
	for hops := 0; ans.TerminalReason == record.ReasonAbsorbed; hops++ {
		if hops == 8 || ans.AbsorbedIntoRunID == "" {
			return Result{}, fmt.Errorf("run %s: absorbed, but its pointer %q leads nowhere", id, ans.AbsorbedIntoRunID)
		}
		if ans, err = s.GetRun(ctx, ans.AbsorbedIntoRunID); err != nil {
			return Result{}, fmt.Errorf("run %s was absorbed into %s: %w", id, run.AbsorbedIntoRunID, err)
		}
	}
	if ans.State != record.StateCompleted {
		return res, nil
	}
	res.AnsweredByRunID = ans.ID
	msgs, err := s.d.ReadHistory(ctx, ans.ThreadID, ans.AnswerSeq-1, 1)
	if err != nil {
		return Result{}, fmt.Errorf("reading the answer of run %s: %w", ans.ID, err)
	}
	if len(msgs) != 1 || msgs[0].ID != ans.AssistantMessageID {
		return Result{}, fmt.Errorf("run %s completed, but its answer %s is not at position %d", ans.ID, ans.AssistantMessageID, ans.AnswerSeq)
	}
	res.Answer = &msgs[0]
	return res, nil
}

// Messages returns the thread's whole history, in append order.
func (s *Store) Messages(ctx context.Context, threadID string) ([]record.Message, error) {
	var out []record.Message
	for after := int64(0); ; {
		page, err := s.d.ReadHistory(ctx, threadID, after, s.opt.PageSize)
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			return out, nil
		}
		out = append(out, page...)
		after = page[len(page)-1].Seq
	}
}

// ThreadRuns returns every run of the thread, in seq order.
func (s *Store) ThreadRuns(ctx context.Context, threadID string) ([]record.Run, error) {
	msgs, err := s.Messages(ctx, threadID)
	if err != nil {
		return nil, err
	}
	return s.runsOf(ctx, msgs)
}

// runsOf returns the runs the messages were written for, in seq order. Every
// run has at least one input admitted with it, so this is every run.
func (s *Store) runsOf(ctx context.Context, msgs []record.Message) ([]record.Run, error) {
	var ids []string
	seen := map[string]bool{}
	for _, m := range msgs {
		if !seen[m.RunID] {
			seen[m.RunID] = true
			ids = append(ids, m.RunID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return s.d.GetRuns(ctx, ids) // first appearance in history is seq order
}

// History returns the thread's settled conversation (runstate.History).
func (s *Store) History(ctx context.Context, threadID string) ([]record.Message, error) {
	msgs, err := s.Messages(ctx, threadID)
	if err != nil {
		return nil, err
	}
	runs, err := s.runsOf(ctx, msgs)
	if err != nil {
		return nil, err
	}
	return runstate.History(runs, msgs)
}

// Prompt returns what the model sees for run runID, given the messages it took
// by injection (runstate.Prompt).
func (s *Store) Prompt(ctx context.Context, run record.Run, taken []record.Message) ([]record.Message, error) {
	msgs, err := s.Messages(ctx, run.ThreadID)
	if err != nil {
		return nil, err
	}
	runs, err := s.runsOf(ctx, msgs)
	if err != nil {
		return nil, err
	}
	return runstate.Prompt(runs, msgs, run.ID, taken)
}

// Runs iterates over the runs in state st, in id order, a page at a time.
func (s *Store) Runs(ctx context.Context, st record.RunState) iter.Seq2[record.Run, error] {
	return func(yield func(record.Run, error) bool) {
		after := ""
		for {
			page, err := s.d.ListRuns(ctx, st, after, s.opt.PageSize)
			if err != nil {
				yield(record.Run{}, err)
				return
			}
			for _, r := range page {
				if !yield(r, nil) {
					return
				}
			}
			if len(page) < s.opt.PageSize {
				return
			}
			after = page[len(page)-1].ID
		}
	}
}

// ListActive iterates over the active runs.
func (s *Store) ListActive(ctx context.Context) iter.Seq2[record.Run, error] {
	return s.Runs(ctx, record.StateActive)
}

// ScanRecoverable iterates over the runs a host must execute after a
// restart: every queued run, and every active run whose owner is not live.
func (s *Store) ScanRecoverable(ctx context.Context, live func(owner string) bool) iter.Seq2[record.Run, error] {
	return func(yield func(record.Run, error) bool) {
		for r, err := range s.Runs(ctx, record.StateActive) {
			if err != nil || !live(r.Owner) {
				if !yield(r, err) || err != nil {
					return
				}
			}
		}
		for r, err := range s.Runs(ctx, record.StateQueued) {
			if !yield(r, err) || err != nil {
				return
			}
		}
	}
}

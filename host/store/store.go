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
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
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
	// HistoryWindow is how many of a thread's last history messages a
	// run's prompt is drawn from (see Prompt). Default DefaultHistoryWindow.
	HistoryWindow int
	// HistoryCacheMessages bounds the messages cached of all threads'
	// histories together. Default 100,000, and at least twice
	// HistoryWindow. The prompt memo, which holds about twice the window
	// of each thread it keeps, keeps as many threads as this allows (at
	// most 256).
	HistoryCacheMessages int
	// OwnerLive reports whether a lease epoch other than the committer's is
	// live. A fenced commit on a thread that such a lease owns is refused
	// with driver.ErrFenced before it is sent (the driver would refuse it
	// too). Default: every owner is taken to be live, leaving it to the
	// driver.
	OwnerLive func(epoch int64) bool
	// MayTake reports whether the committer may take a thread that no other
	// live lease owns: owner is its stored owner (0, or a lease that is not
	// live) and open its open runs. A fenced commit that would take such a
	// thread is refused with a FencedError before it is sent when MayTake
	// says no, and an admission does not start its run there (the thread
	// belongs with another host, ADR 0143). Default: it may.
	MayTake func(threadID string, owner int64, open []record.Run) bool
	// OwnEpoch is the lease epoch the committer executes under now (0:
	// none). A thread that another live lease owns is read afresh, not
	// taken from the snapshot this layer's last commit left: that host's
	// commits have most likely moved it on since, and a commit from the
	// cached snapshot would only conflict. A snapshot that host told of
	// since (Learn, LearnOpen) is used as this layer's own. Default: always 0.
	OwnEpoch func() int64
}

// DefaultHistoryWindow is the default of Options.HistoryWindow.
const DefaultHistoryWindow = 200

// Store is the store layer over one driver. It is safe for concurrent use.
type Store struct {
	d     driver.Driver
	steps driver.StepStore // nil: the driver keeps no step records
	opt   Options
	snaps snapCache
	hist  histCache
	done  doneCache
	memo  promptMemo

	// gen is the driver generation the caches were filled under (see
	// revalidate).
	gen   atomic.Uint64
	genMu sync.Mutex
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
	if opt.HistoryWindow <= 0 {
		opt.HistoryWindow = DefaultHistoryWindow
	}
	if opt.HistoryCacheMessages <= 0 {
		opt.HistoryCacheMessages = 100_000
	}
	opt.HistoryCacheMessages = max(opt.HistoryCacheMessages, 2*opt.HistoryWindow)
	if opt.Fence == nil {
		opt.Fence = func(string) int64 { return 0 }
	}
	if opt.OwnerLive == nil {
		opt.OwnerLive = func(int64) bool { return false }
	}
	if opt.OwnEpoch == nil {
		opt.OwnEpoch = func() int64 { return 0 }
	}
	if opt.MayTake == nil {
		opt.MayTake = func(string, int64, []record.Run) bool { return true }
	}
	ss, _ := d.(driver.StepStore)
	s := &Store{d: d, steps: ss, opt: opt, snaps: snapCache{f: newFIFO[snapEntry](4096)},
		hist: histCache{f: newFIFO[*histEntry](1024), perThread: opt.HistoryWindow + opt.PageSize, budget: opt.HistoryCacheMessages},
		done: doneCache{f: newFIFO[doneRun](8192)}, memo: promptMemo{f: newFIFO[*threadMemo](memoThreads(opt))}}
	if g, ok := d.(Generational); ok {
		s.gen.Store(g.Generation())
	}
	return s
}

// memoThreads is how many threads the prompt memo keeps: each holds about
// twice the window (the messages from the window's start, and the runs'
// contributions), and all together about HistoryCacheMessages.
func memoThreads(opt Options) int {
	return min(256, max(1, opt.HistoryCacheMessages/(2*opt.HistoryWindow)))
}

// NewID returns prefix + "_" + a time-ordered UUID (version 7) in hex.
// It is written into one buffer: the string is its only allocation, where
// formatting the UUID then removing its dashes made three for each id (a
// step's id among them).
func NewID(prefix string) string {
	u := uuid.Must(uuid.NewV7())
	b := make([]byte, 0, 64)
	if len(prefix)+1+2*len(u) > cap(b) {
		b = make([]byte, 0, len(prefix)+1+2*len(u))
	}
	b = append(b, prefix...)
	b = append(b, '_')
	b = hex.AppendEncode(b, u[:])
	return string(b)
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
	// StartAs, when set, starts the admitted run under this owner in the
	// admission's own commit if the thread is idle (no open run) and no
	// other live lease owns it: the effects of Admit then Start, written
	// together, saving a commit. Otherwise the admission is as without it.
	StartAs string
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
	// Started is the admitted run, active, when the admission started it
	// (Submission.StartAs).
	Started *record.Run
	// Committed is the thread as the admission's commit left it (header
	// and open runs), when this layer still holds it; Appended the
	// messages the commit wrote (the input). Both nil for a duplicate.
	Committed *driver.ThreadSnapshot
	Appended  []record.Message
}

// Admit admits a submission: the input message, its run (or its place in an
// existing run) and its idempotency record, in one commit.
func (s *Store) Admit(ctx context.Context, sub Submission, decide Decider) (Admission, error) {
	m := runstate.Admit{
		ThreadID: sub.ThreadID, Key: sub.Key, Content: sub.Content, Hint: sub.Hint, Metadata: sub.Metadata,
		RunID: s.opt.NewID("run"), InputMessageID: s.opt.NewID("msg"), AssistantMessageID: s.opt.NewID("msg"),
	}
	fenceOf := unfenced
	if sub.StartAs != "" {
		fenceOf = func(eff runstate.Effects) int64 {
			if eff.Run != nil && eff.Run.State == record.StateActive {
				return s.opt.Fence(sub.StartAs)
			}
			return 0
		}
	}
	// An admission may start from the snapshot the last commit left: to an
	// idle thread it writes a run (the commit checks the version, and the
	// driver the key's uniqueness); but a busy thread's input policy decides
	// from a fresh read, since a decision (a rejection) that no commit
	// checks must not come from a stale snapshot.
	eff, err := s.apply(ctx, sub.ThreadID, sub.Key, fenceOf, true, func(snap runstate.Snapshot, cached bool) (runstate.Effects, error) {
		m.Now = s.opt.Now()
		m.Decision = nil
		m.StartAs = ""
		if sub.StartAs != "" && !s.ownedElsewhere(snap, sub.StartAs) {
			m.StartAs = sub.StartAs
		}
		eff, err := runstate.Reduce(snap, m)
		if cached && errors.Is(err, runstate.ErrDecisionRequired) {
			return runstate.Effects{}, errStale
		}
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
	var fe *FencedError
	if errors.As(err, &fe) && sub.StartAs != "" {
		// Starting the run was refused (another live lease owns the thread,
		// or this host's lease died): nothing was written; admit it only.
		sub.StartAs = ""
		return s.Admit(ctx, sub, decide)
	}
	if err != nil {
		return Admission{}, err
	}
	adm := Admission{Admission: *eff.Admission}
	if eff.Thread != nil {
		adm.ThreadOwner = eff.Thread.Owner
	}
	if eff.Run != nil && eff.Run.State == record.StateActive {
		r := *eff.Run
		adm.Started = &r
	}
	if eff.Thread != nil && !adm.Duplicate {
		if ts, ok := s.Committed(sub.ThreadID, eff.Thread.Version); ok {
			adm.Committed = &ts
		}
		for _, h := range eff.HistoryMutations {
			adm.Appended = append(adm.Appended, h.Message)
		}
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

// ownedElsewhere reports whether the thread belongs to a live lease other
// than the one owner executes under, or with another host (MayTake): a
// start there would be fenced, so an admission does not try it (ADR 0120).
func (s *Store) ownedElsewhere(snap runstate.Snapshot, owner string) bool {
	return s.takenElsewhere(snap.Thread.ID, snap.Thread.Owner, s.opt.Fence(owner), snap.Open)
}

// takenElsewhere reports whether a commit fenced by fence may not take a
// thread stored with owner o and open runs open.
func (s *Store) takenElsewhere(threadID string, o, fence int64, open []record.Run) bool {
	if fence == 0 || o == fence {
		return false
	}
	return o != 0 && s.opt.OwnerLive(o) || !s.opt.MayTake(threadID, o, open)
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
	if s.steps == nil {
		m.Final = nil // a driver without step records refuses a batch with steps
	}
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
// by; a waiting run stays active and waiting, owned by by (see
// runstate.Recover). A run that is queued is returned as it is.
func (s *Store) Recover(ctx context.Context, run record.Run, deadOwner, by string) (record.Run, error) {
	eff, err := s.reduce(ctx, run.ThreadID, s.opt.Fence(by), func() runstate.Mutation {
		return runstate.Recover{ThreadID: run.ThreadID, RunID: run.ID, DeadOwner: deadOwner, MaxAttempts: s.opt.MaxAttempts, NewOwner: by, Now: s.opt.Now()}
	})
	if err != nil {
		return record.Run{}, err
	}
	return *eff.Run, nil
}

// Cancel ends a queued run at an operator's request.
func (s *Store) Cancel(ctx context.Context, runID string) (record.Run, error) {
	return s.cancel(ctx, runID, false)
}

// CancelActive ends a queued or active run at an operator's request. The
// canceled run's Owner is set when it was active: the host executing it,
// which is to stop it.
func (s *Store) CancelActive(ctx context.Context, runID string) (record.Run, error) {
	return s.cancel(ctx, runID, true)
}

func (s *Store) cancel(ctx context.Context, runID string, active bool) (record.Run, error) {
	run, err := s.GetRun(ctx, runID)
	if err != nil {
		return record.Run{}, err
	}
	if runstate.IsTerminal(run.State) {
		return record.Run{}, fmt.Errorf("%w: run %s is %s", runstate.ErrNotQueued, runID, run.State)
	}
	eff, err := s.reduce(ctx, run.ThreadID, 0, func() runstate.Mutation {
		return runstate.Cancel{ThreadID: run.ThreadID, RunID: runID, Active: active, Now: s.opt.Now()}
	})
	if err != nil {
		return record.Run{}, err
	}
	return *eff.Run, nil
}

func (s *Store) reduce(ctx context.Context, threadID string, fence int64, mut func() runstate.Mutation) (runstate.Effects, error) {
	return s.apply(ctx, threadID, "", func(runstate.Effects) int64 { return fence }, true, func(snap runstate.Snapshot, _ bool) (runstate.Effects, error) {
		return runstate.Reduce(snap, mut())
	})
}

func unfenced(runstate.Effects) int64 { return 0 }

// errStale: a decision needs a fresh snapshot (see apply).
var errStale = errors.New("decided from a cached snapshot")

// apply runs the optimistic loop: load, reduce, commit conditionally, retry
// on conflict. A fence other than 0 fences the commit by that lease epoch,
// which becomes the thread's owner (see driver.Leaser).
// reduce is told whether its snapshot came from the cache; it may then
// return errStale to have it read fresh.
func (s *Store) apply(ctx context.Context, threadID, key string, fenceOf func(runstate.Effects) int64, useCache bool, reduce func(runstate.Snapshot, bool) (runstate.Effects, error)) (runstate.Effects, error) {
	if threadID == "" {
		return runstate.Effects{}, fmt.Errorf("%w: empty thread id", runstate.ErrInvalid)
	}
	// The first attempt may start from the snapshot this store layer's own
	// last commit on the thread left (no read); whatever it decides is
	// either checked by the commit's version, or redone from a fresh read.
	gen := s.revalidate()
	var cached driver.ThreadSnapshot
	fromCache := false
	if useCache {
		var told bool
		cached, told, fromCache = s.snaps.get(threadID)
		if o := cached.Thread.Owner; fromCache && !told && o != 0 && o != s.opt.OwnEpoch() && s.opt.OwnerLive(o) {
			// Another host's thread, as this layer last committed or read
			// it: likely stale. One its owner told of (Learn) is as fresh
			// as the owner's last commit.
			fromCache = false
		}
	}
	conflicted := false // a commit of this loop met a conflict
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
			if useCache && s.current(gen) {
				s.snaps.set(ts) // the freshest this layer knows
			}
		}
		// redo starts the attempt again from a fresh read: a decision made
		// from a cached snapshot that no commit would check.
		redo := func() bool {
			if !fromCache {
				return false
			}
			fromCache = false
			attempt--
			return true
		}
		snap := runstate.Snapshot{Thread: ts.Thread, Open: ts.Runs, StepsKept: s.steps != nil}
		// The key is not looked up at the first attempt: had it been
		// written, the driver refuses the batch's copy (ErrVersionConflict),
		// and the retry reads it. A decision (a busy thread) is not taken
		// without it, though: reduce says so (errStale), and the key is read.
		lookup := func() error {
			k, err := s.d.GetIdempotency(ctx, threadID, key)
			switch {
			case err == nil:
				snap.Idempotency = &k
			case !errors.Is(err, driver.ErrNotFound):
				return fmt.Errorf("looking up key %q: %w", key, err)
			}
			return nil
		}
		keyRead := key == "" || (!fromCache && conflicted)
		if key != "" && keyRead {
			if err := lookup(); err != nil {
				return runstate.Effects{}, err
			}
		}
		eff, err := reduce(snap, fromCache || !keyRead)
		if errors.Is(err, errStale) && !fromCache && !keyRead {
			if err := lookup(); err != nil {
				return runstate.Effects{}, err
			}
			eff, err = reduce(snap, false)
		}
		if err != nil || eff.Empty() {
			if redo() {
				continue
			}
			return eff, err
		}
		fence := fenceOf(eff)
		if o := ts.Thread.Owner; s.takenElsewhere(threadID, o, fence, ts.Runs) {
			if redo() {
				continue
			}
			return runstate.Effects{}, &FencedError{ThreadID: threadID, Owner: o}
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
			if s.current(gen) {
				s.snaps.put(b, snap.Open, eff.RunRecords)
				s.done.put(b)
				s.hist.appendCommitted(b.ThreadID, b.Messages, b.Runs)
			}
			return eff, nil
		case errors.Is(err, driver.ErrVersionConflict):
			if err := ctx.Err(); err != nil {
				return runstate.Effects{}, err
			}
			conflicted = true
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
		Steps:           eff.Steps,
	}
	for _, h := range eff.HistoryMutations {
		b.Messages = append(b.Messages, h.Message) // HistoryAppend is the only op
	}
	return b
}

// GiveUp commits that the lease fence no longer owns the thread, if it owns
// it and the thread has no open run: its owner becomes 0, and the next
// fenced start, by any live lease, takes it (ADR 0143). It reports whether
// it did; a thread that is not idle or not fence's, or that changed under
// the commit, is left as it is (false, no error).
func (s *Store) GiveUp(ctx context.Context, threadID string, fence int64) (bool, error) {
	if fence == 0 {
		return false, nil
	}
	gen := s.revalidate()
	ts, _, ok := s.snaps.get(threadID)
	if !ok {
		var err error
		if ts, err = s.d.LoadThread(ctx, threadID); err != nil {
			return false, fmt.Errorf("loading thread %s: %w", threadID, err)
		}
	}
	if ts.Thread.Owner != fence || len(ts.Thread.OpenRunIDs) > 0 || ts.Thread.Version == 0 {
		return false, nil
	}
	t := ts.Thread
	t.Version++
	t.Owner = 0
	t.LastCommitID = s.opt.NewID("commit")
	b := driver.Batch{CommitID: t.LastCommitID, ThreadID: threadID, ExpectedVersion: ts.Thread.Version, Thread: t, Fence: fence}
	began := time.Now()
	_, err := s.d.Commit(ctx, b)
	if s.opt.ObserveCommit != nil {
		s.opt.ObserveCommit(time.Since(began), err)
	}
	switch {
	case err == nil:
		if s.current(gen) {
			s.snaps.put(b, nil, nil)
		}
		return true, nil
	case errors.Is(err, driver.ErrVersionConflict), errors.Is(err, driver.ErrFenced):
		s.snaps.forget(threadID)
		return false, nil
	}
	s.snaps.forget(threadID)
	return false, fmt.Errorf("giving up thread %s: %w", threadID, err)
}

// MayHaveQueued reports whether the thread may have a queued run, as far as
// this store layer's last commit or read on it tells: false only when that
// showed none. (Admissions made since elsewhere announce themselves.)
func (s *Store) MayHaveQueued(threadID string) bool {
	s.revalidate()
	t, ok := s.snaps.peek(threadID)
	return !ok || len(t.OpenRunIDs) > 0
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
	res, _, err := s.ResultRun(ctx, id)
	return res, err
}

// ResultRun is Result, with the run's record as read when the result is
// not settled (the zero Run otherwise).
func (s *Store) ResultRun(ctx context.Context, id string) (Result, record.Run, error) {
	s.revalidate()
	if res, ok := s.cachedResult(id); ok {
		return res, record.Run{}, nil
	}
	run, err := s.GetRun(ctx, id)
	if err != nil {
		return Result{}, record.Run{}, err
	}
	if !runstate.IsTerminal(run.State) {
		return Result{RunID: id, State: run.State, TerminalReason: run.TerminalReason, Error: run.Error}, run, nil
	}
	res, err := s.result(ctx, id, run)
	return res, record.Run{}, err
}

// result is the result of run id, settled, as read.
func (s *Store) result(ctx context.Context, id string, run record.Run) (Result, error) {
	var err error
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

// KnownSettled reports whether this store layer committed run id terminal.
func (s *Store) KnownSettled(id string) bool {
	s.revalidate()
	_, ok := s.done.get(id)
	return ok
}

// cachedResult answers Result from the terminal runs this store layer
// committed, when the run and what answered it are among them.
func (s *Store) cachedResult(id string) (Result, bool) {
	d, ok := s.done.get(id)
	if !ok {
		return Result{}, false
	}
	run := d.run
	res := Result{RunID: id, State: run.State, TerminalReason: run.TerminalReason, Settled: true, Error: run.Error}
	for hops := 0; d.run.TerminalReason == record.ReasonAbsorbed; hops++ {
		if hops == 8 {
			return Result{}, false
		}
		if d, ok = s.done.get(d.run.AbsorbedIntoRunID); !ok {
			return Result{}, false
		}
	}
	if d.run.State == record.StateCompleted {
		res.AnsweredByRunID = d.run.ID
		msg := *d.answer
		res.Answer = &msg
	}
	return res, true
}

// Messages returns the thread's whole history, in append order. It reads
// the whole thread: for operators and checks, not for the path of a run.
func (s *Store) Messages(ctx context.Context, threadID string) ([]record.Message, error) {
	return s.allMessages(ctx, threadID)
}

// ThreadRuns returns every run of the thread, in seq order (of their first
// message). It reads the whole thread.
func (s *Store) ThreadRuns(ctx context.Context, threadID string) ([]record.Run, error) {
	msgs, err := s.allMessages(ctx, threadID)
	if err != nil {
		return nil, err
	}
	return s.runsOf(ctx, msgs, nil, nil)
}

// History returns a thread's settled conversation (see runstate.History).
// It reads the whole thread.
func (s *Store) History(ctx context.Context, threadID string) ([]record.Message, error) {
	msgs, err := s.allMessages(ctx, threadID)
	if err != nil {
		return nil, err
	}
	runs, err := s.runsOf(ctx, msgs, nil, nil)
	if err != nil {
		return nil, err
	}
	return runstate.History(runs, msgs)
}

func (s *Store) allMessages(ctx context.Context, threadID string) ([]record.Message, error) {
	var msgs []record.Message
	last := int64(0)
	for {
		page, err := s.d.ReadHistory(ctx, threadID, last, s.opt.PageSize)
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			return msgs, nil
		}
		msgs = append(msgs, page...)
		last = page[len(page)-1].Seq
	}
}

// runsOf returns the runs msgs belong to, in the order of their first
// message: those in current as they are, those known returns as they are
// (terminal runs read before), the others read.
func (s *Store) runsOf(ctx context.Context, msgs []record.Message, known func(ids []string) map[string]record.Run, current []record.Run) ([]record.Run, error) {
	var ids, need []string
	seen := map[string]bool{}
	for _, m := range msgs {
		if !seen[m.RunID] {
			seen[m.RunID] = true
			ids = append(ids, m.RunID)
		}
	}
	byID := make(map[string]record.Run, len(ids))
	if known != nil {
		byID = known(ids)
	}
	for _, r := range current {
		byID[r.ID] = r
	}
	for _, id := range ids {
		if _, ok := byID[id]; !ok {
			need = append(need, id)
		}
	}
	for len(need) > 0 {
		n := min(len(need), s.opt.PageSize)
		fetched, err := s.d.GetRuns(ctx, need[:n])
		if err != nil {
			return nil, err
		}
		for _, r := range fetched {
			byID[r.ID] = r
		}
		need = need[n:]
	}
	runs := make([]record.Run, 0, len(ids)+len(current))
	for _, id := range ids {
		runs = append(runs, byID[id])
	}
	for _, r := range current {
		if !seen[r.ID] {
			runs = append(runs, r)
		}
	}
	return runs, nil
}

// Prompt returns what the model sees for run (see runstate.PromptWindow):
// the end of the thread's settled conversation — the whole runs among the
// last Options.HistoryWindow messages of its history — then the run's
// inputs, then taken. It reads what is new since the last prompt of the
// thread (cached, see histCache), not the thread, and projects only that
// (see promptMemo). The slice returned may share its messages with the
// cache: the caller may append to it (its capacity is its length) but must
// not change its elements.
func (s *Store) Prompt(ctx context.Context, run record.Run, taken []record.Message) ([]record.Message, error) {
	// The run was started through this store layer, whose commit left the
	// thread's end: what the prompt needs was written before it.
	end := int64(-1)
	if snap, ok := s.snaps.peek(run.ThreadID); ok {
		end = snap.NextMessageSeq - 1
	}
	gen := s.revalidate()
	tail, from, err := s.tail(ctx, run.ThreadID, end, run.InputMessageIDs)
	if err != nil {
		return nil, err
	}
	took := s.memo.take(run.ThreadID, gen)
	m, keep := took, false
	defer func() {
		switch {
		case keep && s.current(gen):
			s.memo.put(run.ThreadID, m)
		case took != nil:
			s.memo.release(run.ThreadID, took)
		}
	}()
	if m == nil {
		m = newThreadMemo(gen, from-1)
	}
	lookup := func(ids []string) (map[string]record.Run, error) { return s.terminalRuns(ctx, run.ThreadID, ids) }
	ok, err := m.advance(tail, from, run.ID, lookup)
	if err == nil && !ok && len(tail) > 0 {
		m = newThreadMemo(gen, tail[0].Seq-1) // start again from what tail holds
		ok, err = m.advance(tail, from, run.ID, lookup)
	}
	if err != nil {
		return nil, err
	}
	var p []record.Message
	if ok {
		p, ok = m.prompt(run, from, taken, tail)
	}
	keep = ok
	if ok && !verifyMemo {
		return p, nil
	}
	full, err := s.promptWindow(ctx, run, tail, from, taken)
	if err != nil || !ok {
		return full, err
	}
	if !slices.EqualFunc(p, full, func(a, b record.Message) bool { return a.ID == b.ID && a.Seq == b.Seq && a.Content == b.Content }) {
		keep = false
		return nil, fmt.Errorf("prompt of run %s: the memo's %d messages differ from the window's %d", run.ID, len(p), len(full))
	}
	return p, nil
}

// terminalRuns returns the runs among ids of a thread, known terminal or
// read.
func (s *Store) terminalRuns(ctx context.Context, thread string, ids []string) (map[string]record.Run, error) {
	byID := s.hist.terminal(thread, ids)
	var need []string
	for _, id := range ids {
		if _, ok := byID[id]; !ok {
			need = append(need, id)
		}
	}
	var done []record.Run
	for len(need) > 0 {
		n := min(len(need), s.opt.PageSize)
		fetched, err := s.d.GetRuns(ctx, need[:n])
		if err != nil {
			return nil, err
		}
		for _, r := range fetched {
			byID[r.ID] = r
			if runstate.IsTerminal(r.State) {
				done = append(done, r)
			}
		}
		need = need[n:]
	}
	s.hist.addTerminal(thread, done)
	return byID, nil
}

// promptWindow projects run's prompt from tail, the thread's end, whose
// window starts at from (see runstate.PromptWindow).
func (s *Store) promptWindow(ctx context.Context, run record.Run, tail []record.Message, from int64, taken []record.Message) ([]record.Message, error) {
	window := tail[sort.Search(len(tail), func(i int) bool { return tail[i].Seq >= from }):]
	runs, err := s.runsOf(ctx, window, func(ids []string) map[string]record.Run { return s.hist.terminal(run.ThreadID, ids) }, []record.Run{run})
	if err != nil {
		return nil, err
	}
	s.hist.addTerminal(run.ThreadID, runs)
	// The window alone, when the run's inputs are in it (they usually are:
	// admitted near the end), spares indexing the cached messages before.
	own := 0
	for _, m := range window {
		if m.RunID == run.ID && m.Role == record.RoleUser {
			own++
		}
	}
	if own == len(run.InputMessageIDs) {
		tail = window
	}
	return runstate.PromptWindow(runs, tail, from, run.ID, taken)
}

// MessagesByID returns the thread's messages with the given ids, found at
// the end of its history (they are inputs of its open runs), which reaches
// up to position end (-1: as the thread is now). An id it does not find is
// absent from the result.
func (s *Store) MessagesByID(ctx context.Context, threadID string, end int64, ids []string) (map[string]record.Message, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	tail, _, err := s.tail(ctx, threadID, end, ids)
	if err != nil {
		return nil, err
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	out := make(map[string]record.Message, len(ids))
	for i := len(tail) - 1; i >= 0 && len(out) < len(want); i-- {
		if want[tail[i].ID] {
			out[tail[i].ID] = tail[i]
		}
	}
	return out, nil
}

// tail returns the end of a thread's history, up to position end (-1: the
// thread's end as read now), from at least position from = end -
// HistoryWindow + 1, and further back as far as needed to hold the messages
// want names (inputs of the thread's open runs, written near its end). It
// starts from what histCache holds, reads only what is new, and caches the
// result; with it, the terminal runs known among them. Its cost is that of
// the messages read, never the thread's length, unless a wanted id is not
// in the thread at all.
func (s *Store) tail(ctx context.Context, threadID string, end int64, want []string) ([]record.Message, int64, error) {
	if end < 0 {
		ts, err := s.d.LoadThread(ctx, threadID)
		if err != nil {
			return nil, 0, fmt.Errorf("loading thread %s: %w", threadID, err)
		}
		end = max(ts.Thread.NextMessageSeq-1, 0)
	}
	gen := s.revalidate()
	from := max(end-int64(s.opt.HistoryWindow)+1, 1)
	msgs := s.hist.get(threadID)
	last := int64(0)
	if n := len(msgs); n > 0 {
		last = msgs[n-1].Seq
	}
	if len(msgs) == 0 || last < from-1 {
		// Nothing cached, or too far behind to be worth completing.
		msgs, last = nil, from-1
	}
	for last < end {
		page, err := s.d.ReadHistory(ctx, threadID, last, min(s.opt.PageSize, int(end-last)))
		if err != nil {
			return nil, 0, err
		}
		if len(page) == 0 {
			break
		}
		msgs = append(msgs[:len(msgs):len(msgs)], page...)
		last = page[len(page)-1].Seq
	}
	for missing := absent(msgs, want); len(missing) > 0; {
		first := last + 1
		if len(msgs) > 0 {
			first = msgs[0].Seq
		}
		if first <= 1 {
			break
		}
		after := max(first-1-int64(s.opt.PageSize), 0)
		page, err := s.d.ReadHistory(ctx, threadID, after, int(first-1-after))
		if err != nil {
			return nil, 0, err
		}
		if len(page) == 0 {
			break
		}
		for _, m := range page {
			delete(missing, m.ID)
		}
		msgs = append(page[:len(page):len(page)], msgs...)
	}
	if s.current(gen) {
		s.hist.put(threadID, msgs)
	}
	return msgs, from, nil
}

// absent returns the ids among want that msgs does not hold. It looks from
// the end of msgs, where the inputs of open runs are, and stops once it
// found them all: it costs the messages after the first one wanted, not
// all of msgs.
func absent(msgs []record.Message, want []string) map[string]bool {
	if len(want) == 0 {
		return nil
	}
	missing := make(map[string]bool, len(want))
	for _, id := range want {
		missing[id] = true
	}
	for i := len(msgs) - 1; i >= 0 && len(missing) > 0; i-- {
		delete(missing, msgs[i].ID)
	}
	return missing
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

// CachedMessages returns how many history messages the store layer holds
// in its cache, of all threads (bounded by Options.HistoryCacheMessages).
func (s *Store) CachedMessages() int { return s.hist.held() }

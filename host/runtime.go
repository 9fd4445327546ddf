package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/host/toolpolicy"
)

// Config configures a Runtime.
type Config struct {
	// Driver is the store driver. Required. The runtime does not close it.
	Driver driver.Driver
	// Policy decides inputs that arrive at busy threads. Default: queue.
	Policy policy.Policy
	// PrepareStep hooks rewrite each step's settings, in order, before the
	// host's own injection hook.
	PrepareStep []model.PrepareStep
	// Model runs the steps. Required.
	Model model.Model
	// Tools the model may call.
	Tools []model.Tool
	// ToolPolicy, when set, decides each tool call before it is made:
	// allow runs it, deny gives the model the policy's message as its
	// result, ask makes the run wait for a person's answer (Answer). It
	// needs a store that keeps step records. Nil: every call runs.
	ToolPolicy ToolPolicy
	// ToolPolicyFallback is the decision when ToolPolicy fails and offers
	// no fallback of its own. Default: ask.
	ToolPolicyFallback *ToolDecision
	// ApprovalTimeout is how long a call the tool policy asked about waits
	// for an answer; past it the call is rejected (the model is told no
	// answer came). Default DefaultApprovalTimeout (24h).
	ApprovalTimeout time.Duration
	// ToolTimeout bounds each tool call of a tool that sets no limit of its
	// own (model.TimeLimited). Default DefaultToolTimeout.
	ToolTimeout time.Duration
	// System is the system prompt of every step (hooks may rewrite it).
	System string
	// HistoryWindow is how many of a thread's last history messages a run's
	// prompt is drawn from: the whole runs among them, in the order they
	// ended, then the run's own inputs (see store.Options.HistoryWindow).
	// Default store.DefaultHistoryWindow.
	HistoryWindow int
	// MaxSteps bounds a run's model steps. Default 16.
	MaxSteps int
	// MaxConcurrentRuns bounds the runs executing at once. Default 64.
	MaxConcurrentRuns int
	// MaxAttempts bounds a run's executions across recoveries. Default 3.
	MaxAttempts int
	// LeaseTTL is how long this host's lease lives unless renewed, with a
	// driver that has leases (several hosts on one store); it is renewed
	// every third of it. A host that dies holds its threads this long.
	// Default 10s. A driver without leases lets one host alone use its
	// data; that host's lease lives until Close (ADR 0122).
	LeaseTTL time.Duration
	// PollInterval is how often a host sharing its store looks for work that
	// no notice announced (dead leases' runs, missed notices). Default 2s.
	PollInterval time.Duration
	// HostName labels this host's lease for operators. Default: the
	// machine's host name and the process id.
	HostName string
	// Logger receives the runtime's log. Default: slog.Default().
	Logger *slog.Logger
	// EventRuns is how many settled runs' events are kept. Default 10000.
	EventRuns int
	// ObserveCommit, when set, is called after every store commit with its
	// latency and error (for metrics such as httpapi.CommitLatency).
	ObserveCommit func(d time.Duration, err error)
	// Observer, when set, is told of admissions, runs and events (traces).
	Observer Observer
	// NewID and Now replace id generation and the clock (for tests).
	NewID func(prefix string) string
	Now   func() time.Time
}

// Runtime is a running agenthost. It joins four parts, each of which knows
// nothing of the others: the store layer (what is durable), the lease
// keeper (who this host is, and who else is live), the coordinator (which
// thread a worker executes next) and the ticket resolver (who waits for
// which run). Admission, recovery, the executor and the notices between
// hosts are the runtime's own code over them.
type Runtime struct {
	cfg     Config
	st      *store.Store
	lease   *leaseKeeper
	coord   *coordinator
	tickets *resolver
	// decisions remembers the input policy's decision for the runs this
	// process admitted, for their admitted event (see decisionLog).
	decisions decisionLog
	reg       *registry // nil when the policy can never inject
	log       *slog.Logger
	events    *eventLog
	stats     counters
	waits     waitTimers // deadlines of the waiting runs this host owns
	// noGiveUp: whether the store driver refused to give a thread up (one
	// certified before a thread could have no owner); handBack stops.
	noGiveUp giveUpGate

	baseCtx    context.Context // canceled when Close gives up waiting
	abandonAll context.CancelFunc

	loops     sync.WaitGroup // the lease's upkeep, the watch and the poll
	stopLoops context.CancelFunc
	pollCh    chan struct{}
}

// New starts a runtime: it takes a new lease, recovers every run that a
// previous process left active or queued, and starts executing.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Driver == nil {
		return nil, errors.New("host: Config.Driver is required")
	}
	if cfg.Model == nil {
		return nil, errors.New("host: Config.Model is required")
	}
	if cfg.Policy == nil {
		cfg.Policy = policy.Static{Name: "queue", Decision: runstate.Decision{Action: runstate.ActionQueue}}
	}
	m := cfg.Policy.Manifest()
	if len(m.Actions) == 0 {
		return nil, fmt.Errorf("host: policy %q declares no actions", m.Name)
	}
	for _, a := range m.Actions {
		if !a.Valid() {
			return nil, fmt.Errorf("host: policy %q declares unknown action %q", m.Name, a)
		}
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = 16
	}
	if cfg.ToolTimeout <= 0 {
		cfg.ToolTimeout = DefaultToolTimeout
	}
	if cfg.ApprovalTimeout <= 0 {
		cfg.ApprovalTimeout = DefaultApprovalTimeout
	}
	if cfg.ToolPolicyFallback == nil {
		fb := ToolDecision{Verdict: toolpolicy.Ask, Approvals: 1, Prompt: "The tool policy failed to decide this call; approve it?"}
		cfg.ToolPolicyFallback = &fb
	} else if err := cfg.ToolPolicyFallback.Check(); err != nil {
		return nil, fmt.Errorf("host: tool policy fallback: %w", err)
	}
	if cfg.MaxConcurrentRuns <= 0 {
		cfg.MaxConcurrentRuns = 64
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.MaxAttempts >= startSlots {
		// Each attempt's started event has an id of its own (see eventSlots).
		return nil, fmt.Errorf("host: Config.MaxAttempts %d exceeds %d", cfg.MaxAttempts, startSlots-1)
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.EventRuns <= 0 {
		cfg.EventRuns = 10000
	}
	if cfg.NewID == nil {
		cfg.NewID = store.NewID
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	info, err := cfg.Driver.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("host: reading the driver's info: %w", err)
	}
	rt := &Runtime{
		cfg:     cfg,
		lease:   newLeaseKeeper(cfg.Driver, info, cfg),
		coord:   newCoordinator(cfg.MaxConcurrentRuns),
		tickets: newResolver(),
		log:     cfg.Logger,
		events:  newEventLog(cfg.EventRuns),
		pollCh:  make(chan struct{}, 1),
	}
	x, err := rt.lease.acquire(ctx)
	if err != nil {
		return nil, err
	}
	if err := rt.lease.refresh(ctx); err != nil {
		_ = rt.lease.release()
		return nil, fmt.Errorf("host: reading the live leases: %w", err)
	}
	if !rt.lease.alone() {
		rt.log.Info("sharing the store: took a lease", "epoch", x.Epoch, "holder", rt.lease.holder, "ttl", cfg.LeaseTTL)
	}
	rt.st = store.New(cfg.Driver, store.Options{
		NewID: cfg.NewID, Now: cfg.Now, MaxAttempts: cfg.MaxAttempts, ObserveCommit: cfg.ObserveCommit, HistoryWindow: cfg.HistoryWindow,
		Fence: rt.lease.fence, OwnerLive: rt.lease.isLive, MayTake: rt.mayTake,
		OwnEpoch: rt.lease.epoch.Load,
	})
	if !rt.st.StepsKept() && cfg.ToolPolicy != nil {
		_ = rt.lease.release()
		return nil, fmt.Errorf("host: a tool policy needs a store that keeps step records (a run that waits for approval is its steps), and driver %s speaks store protocol %d, which keeps none: upgrade the driver or remove the tool policy", info.Name, info.ProtocolVersion)
	}
	if !rt.st.StepsKept() {
		rt.log.Warn("the store driver keeps no step records: a recovered run restarts from its first step, and injection takes nothing",
			"driver", info.Name, "protocol", info.ProtocolVersion)
	}
	if m.CanReturn(runstate.ActionInject) {
		rt.reg = newRegistry()
	}
	rt.baseCtx, rt.abandonAll = context.WithCancel(context.Background())
	if err := rt.scan(ctx); err != nil {
		rt.abandonAll()
		_ = rt.lease.release()
		return nil, err
	}
	rt.coord.start(rt.startAndExecute)
	rt.startLoops()
	return rt, nil
}

// Epoch is the owner of the runs this runtime executes now: its current
// lease's, as record.Run.Owner names it.
func (rt *Runtime) Epoch() string { return rt.lease.owner() }

// LeaseEpoch is the epoch of the lease this runtime executes under: the
// store's lease with a driver that has leases, else one of this process's
// (ADR 0122).
func (rt *Runtime) LeaseEpoch() int64 { return rt.lease.epoch.Load() }

// Store returns the runtime's store layer.
func (rt *Runtime) Store() *store.Store { return rt.st }

// scan queues again every active run whose owner is gone and schedules
// every thread with work: at start, and with a shared store at every poll.
func (rt *Runtime) scan(ctx context.Context) error {
	owner := rt.lease.owner()
	live := func(o string) bool { return o == owner || rt.lease.ownerLive(o) }
	threads := map[string]bool{}
	var order []string
	var todo []record.Run
	for r, err := range rt.st.ScanRecoverable(ctx, live) {
		if err != nil {
			return fmt.Errorf("host: scanning recoverable runs: %w", err)
		}
		if r.State == record.StateActive {
			if !rt.mayTake(r.ThreadID, leaseEpoch(r.Owner), nil) {
				continue // its home recovers it (ADR 0143), or this host later
			}
			todo = append(todo, r)
		}
		if !threads[r.ThreadID] {
			threads[r.ThreadID] = true
			order = append(order, r.ThreadID)
		}
	}
	// Recover concurrently: each recovery is its own commit, and a driver
	// that groups concurrent commits makes a large recovery fast.
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		work     = make(chan record.Run)
	)
	for range min(len(todo), 64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				if err := rt.recoverOne(ctx, r); err != nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, r := range todo {
		work <- r
	}
	close(work)
	wg.Wait()
	for _, th := range order {
		// Leave a thread that another live host owns to it (its own poll
		// finds the work if a notice was lost).
		if rt.ownsOrMayTake(ctx, th) {
			rt.coord.kick(th)
		}
	}
	return firstErr
}

func (rt *Runtime) recoverOne(ctx context.Context, r record.Run) error {
	rec, err := rt.st.Recover(ctx, r, r.Owner, rt.lease.owner())
	switch {
	case errors.Is(err, runstate.ErrNotOwner), errors.Is(err, runstate.ErrRunTerminal):
		return nil // it moved on since the scan
	case errors.Is(err, driver.ErrFenced):
		return nil // another live host took the thread, or this host's lease died
	case err != nil:
		return fmt.Errorf("host: recovering run %s: %w", r.ID, err)
	}
	rt.stats.recovered.Add(1)
	rt.log.Info("recovered run", "run", r.ID, "thread", r.ThreadID, "previous_owner", r.Owner, "state", rec.State, "attempt", rec.Attempt)
	if runstate.IsTerminal(rec.State) {
		rt.stats.terminal.add(string(rec.TerminalReason))
		rt.emit(rec.ID, rec.ThreadID, EventTerminal, map[string]string{"state": string(rec.State), "reason": string(rec.TerminalReason), "error": rec.Error})
		rt.settled(rec.ID)
		rt.replySettled(rec.ThreadID, rec.ID)
	}
	return nil
}

// SubmitOptions are the optional parts of a submission.
type SubmitOptions struct {
	// IdempotencyKey makes retries safe: the same key on the same thread
	// returns the same admission.
	IdempotencyKey string
	// Hint is passed to the input policy, e.g. "refine" or "redirect".
	Hint     string
	Metadata map[string]string
}

// Submit admits an input to a thread. It returns once the input is durable.
// A busy thread's input policy may reject it (ErrBusy); a reused key with
// other content is ErrKeyReused.
func (rt *Runtime) Submit(ctx context.Context, threadID, input string, opts SubmitOptions) (*Ticket, error) {
	if rt.coord.isClosed() {
		return nil, ErrClosed
	}
	sub := store.Submission{ThreadID: threadID, Key: opts.IdempotencyKey, Content: input, Hint: opts.Hint, Metadata: opts.Metadata}
	res := rt.coord.reserveIdle(threadID)
	if res != 0 {
		sub.StartAs = rt.lease.owner() // an idle thread's run starts in the admission's commit
	}
	defer rt.coord.release(threadID, res) // unless handed off with its run

	adm, err := rt.st.Admit(ctx, sub, rt.decider())
	if err != nil {
		if errors.Is(err, runstate.ErrBusy) {
			rt.stats.admissions.add(string(runstate.ActionReject))
		}
		if errors.Is(err, store.ErrOutcomeUnknown) {
			// It may have landed (and started its run, owned by this host):
			// make sure the thread runs.
			rt.coord.kick(threadID)
		}
		return nil, speak(err)
	}
	t := &Ticket{rt: rt, RunID: adm.RunID, ThreadID: threadID, InputMessageID: adm.InputMessageID, Duplicate: adm.Duplicate}
	if adm.Duplicate {
		// The first attempt may have been committed without its caller
		// hearing back (and so without a kick): make sure the thread runs.
		rt.coord.kick(threadID)
		return t, nil
	}
	rt.tickets.admitted(adm.RunID)
	decision := "start"
	if adm.Decision != nil {
		decision = string(adm.Decision.Action)
	}
	rt.stats.admissions.add(decision)
	if !adm.Coalesced {
		rt.decisions.note(adm.RunID, decision) // the run's own decision, not a later joiner's
	}
	rt.emit(adm.RunID, threadID, EventAdmitted, map[string]string{"decision": decision, "input_message_id": adm.InputMessageID})
	if rt.cfg.Observer != nil {
		rt.cfg.Observer.Admitted(ctx, threadID, adm.RunID, decision)
	}
	if adm.Offer && rt.reg != nil {
		rt.reg.offer(threadID, adm.RunID, adm.ActiveRunID, record.Message{
			ID: adm.InputMessageID, ThreadID: threadID, RunID: adm.RunID, Role: record.RoleUser,
			Content: input, Hint: opts.Hint, Metadata: opts.Metadata,
		})
	}
	me := rt.lease.epoch.Load()
	if o := adm.ThreadOwner; o != 0 && o != me && rt.lease.isLive(o) {
		// Another live host owns the thread: wake it (offers stay with this
		// process, so for that host an injected input is a queued run).
		rt.notify(rt.wakeNotice(threadID, o, adm))
		return t, nil
	} else if adm.Started == nil && o != me && !rt.lease.alone() {
		if h := rt.lease.home(threadID); h != me {
			// Nobody live owns the thread, and it belongs with another
			// host: that host starts it (ADR 0143).
			rt.notify(rt.wakeNotice(threadID, h, adm))
			return t, nil
		}
	}
	if adm.InterruptRunID != "" {
		rt.coord.interrupt(threadID, adm.InterruptRunID) // a waiting run too: the kick below ends it
	}
	if adm.Started != nil {
		rt.coord.handOff(*adm.Started, res)
	}
	rt.coord.kick(threadID)
	return t, nil
}

// maxPolicyCalls bounds the input policy's calls for one submission. The
// admission's optimistic loop decides again at every attempt (a commit that
// conflicts with another to the thread is retried from a fresh read): on a
// busy thread each retry was a policy call, up to the store's retry bound,
// each up to a wasm guest's deadline.
const maxPolicyCalls = 3

// decider returns the input policy's decider for one submission. It asks
// the policy again only when what the policy reads of the thread changed
// since it last asked (the active run, its inputs and steps, the queued
// runs and their inputs), and at most maxPolicyCalls times: past that, the
// policy's last decision about this input stands (abi/guestabi/SPEC.md).
func (rt *Runtime) decider() store.Decider {
	var (
		calls int
		last  runstate.Decision
		seen  string // what the last call read of the thread
	)
	return func(ctx context.Context, v store.ThreadView) (runstate.Decision, error) {
		key := rt.viewKey(v)
		if calls > 0 && (key == seen || calls >= maxPolicyCalls) {
			return last, nil
		}
		d, err := rt.decide(ctx, v)
		if err != nil {
			return d, err
		}
		calls++
		last, seen = d, key
		return d, nil
	}
}

// viewKey names what decide reads of a thread view beyond the submission
// itself: the runs and their input messages (which never change once
// written), and the active run's steps.
func (rt *Runtime) viewKey(v store.ThreadView) string {
	var b strings.Builder
	run := func(r record.Run) {
		b.WriteString(r.ID)
		for _, id := range r.InputMessageIDs {
			b.WriteByte(',')
			b.WriteString(id)
		}
		b.WriteByte(';')
	}
	if v.Active != nil {
		run(*v.Active)
		n, _ := rt.coord.steps(v.Thread.ID, v.Active.ID) // 0 when not known, as decide sends
		fmt.Fprintf(&b, "steps=%d;", n)
	}
	b.WriteByte('|')
	for _, q := range v.Queued {
		run(q)
	}
	return b.String()
}

// decide asks the input policy about a busy thread. A policy that fails, or
// returns an action its manifest does not declare, falls back to queue.
func (rt *Runtime) decide(ctx context.Context, v store.ThreadView) (runstate.Decision, error) {
	req := policy.Request{ThreadID: v.Thread.ID, Input: policy.Input{Content: v.Input.Content, Hint: v.Input.Hint, Metadata: v.Input.Metadata}}
	// The policy sees the inputs of the open runs only: they are at the end
	// of the thread's history, read without reading the rest.
	var ids []string
	if v.Active != nil {
		ids = append(ids, v.Active.InputMessageIDs...)
	}
	for _, q := range v.Queued {
		ids = append(ids, q.InputMessageIDs...)
	}
	msgs, err := rt.st.MessagesByID(ctx, v.Thread.ID, v.Thread.NextMessageSeq-1, ids)
	if err != nil {
		return runstate.Decision{}, err
	}
	info := func(r record.Run) policy.RunInfo {
		ri := policy.RunInfo{RunID: r.ID, Seq: r.Seq}
		for _, id := range r.InputMessageIDs {
			ri.Inputs = append(ri.Inputs, msgs[id].Content)
		}
		return ri
	}
	if v.Active != nil {
		ri := info(*v.Active)
		if n, ok := rt.coord.steps(v.Thread.ID, v.Active.ID); ok {
			ri.Steps = n
		}
		req.Active = &ri
	}
	for _, q := range v.Queued {
		req.Queued = append(req.Queued, info(q))
	}
	m := rt.cfg.Policy.Manifest()
	d, err := rt.cfg.Policy.Decide(ctx, req)
	var fb *policy.FallbackError
	if errors.As(err, &fb) {
		// The policy reported and logged its failure and chose its fallback.
		rt.stats.policyFallbacks.Add(1)
		d, err = fb.Decision, nil
	}
	if err == nil {
		err = policy.Check(m, d)
	}
	if err != nil {
		if fb == nil {
			rt.stats.policyFallbacks.Add(1)
		}
		rt.log.Warn("input policy failed; queueing the input", "policy", m.Name, "thread", v.Thread.ID, "err", err)
		return runstate.Decision{Action: runstate.ActionQueue}, nil
	}
	return d, nil
}

// Run returns a run's durable record.
func (rt *Runtime) Run(ctx context.Context, runID string) (record.Run, error) {
	r, err := rt.st.GetRun(ctx, runID)
	return r, speak(err)
}

// Steps returns up to limit step records of run runID with Seq > afterSeq,
// in order: what the run committed as it went (see record.Step). A run of a
// store that keeps no step records has none. An unknown run is ErrNotFound.
func (rt *Runtime) Steps(ctx context.Context, runID string, afterSeq int64, limit int) ([]record.Step, error) {
	if _, err := rt.st.GetRun(ctx, runID); err != nil {
		return nil, speak(err)
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit %d must be positive", ErrInvalid, limit)
	}
	steps, err := rt.st.ReadSteps(ctx, runID, afterSeq, limit)
	return steps, speak(err)
}

// ThreadRuns returns a thread's runs in seq order.
func (rt *Runtime) ThreadRuns(ctx context.Context, threadID string) ([]record.Run, error) {
	runs, err := rt.st.ThreadRuns(ctx, threadID)
	return runs, speak(err)
}

// History returns a thread's settled conversation.
func (rt *Runtime) History(ctx context.Context, threadID string) ([]record.Message, error) {
	msgs, err := rt.st.History(ctx, threadID)
	return msgs, speak(err)
}

// Events returns a run's events after seq, and a channel closed when more
// arrive. Events are kept by this process only.
func (rt *Runtime) Events(runID string, afterSeq int64) ([]Event, <-chan struct{}) {
	return rt.events.since(runID, afterSeq)
}

func (rt *Runtime) emit(runID, threadID string, typ EventType, data map[string]string) {
	rt.emitAt(rt.cfg.Now(), runID, threadID, typ, data)
}

// emitAt emits an event of what happened at now.
func (rt *Runtime) emitAt(now time.Time, runID, threadID string, typ EventType, data map[string]string) {
	rt.events.emit(now, runID, threadID, typ, data)
	if typ == EventTerminal && data["reason"] == string(record.ReasonFailed) {
		rt.log.Error("run failed", "run", runID, "thread", threadID, "err", data["error"])
	}
	if rt.cfg.Observer != nil {
		rt.cfg.Observer.Event(Event{RunID: runID, ThreadID: threadID, Type: typ, Time: now, Data: data})
	}
}

// CloseReport says what Close left behind.
type CloseReport struct {
	// Settled: no run was left active or queued; nothing waits for recovery.
	Settled bool
	// Abandoned are the runs that were executing when the deadline passed.
	// They stay active in the store and the next start recovers them.
	Abandoned []string
	// Queued are the runs still queued: the next start executes them.
	Queued []string
	// Waiting are this host's runs that wait for answers to tool calls:
	// they need no execution, and the next start (or another host) takes
	// them over, still waiting. They do not make the close unsettled.
	Waiting []string
}

// Close stops admitting inputs, lets the runs in flight finish until ctx is
// done, then abandons the rest, leaving them durable for the next start.
// It never commits anything on behalf of an abandoned run, so in particular
// never an absorption. Close does not close the driver.
func (rt *Runtime) Close(ctx context.Context) (CloseReport, error) {
	rt.coord.close()
	done := rt.coord.wait()
	var abandoned []string
	select {
	case <-done:
	case <-ctx.Done():
		abandoned = rt.coord.executingRuns()
		rt.abandonAll()
		<-done
	}
	rt.abandonAll()
	rt.waits.close()
	rt.stopLoops()
	rt.loops.Wait()
	leaseErr := rt.lease.release()
	slices.Sort(abandoned)
	rep := CloseReport{Abandoned: abandoned}
	owner := rt.lease.owner()
	// Read what is left from the store: the report is about durable state.
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for r, e := range rt.st.Runs(rctx, record.StateQueued) {
		if e != nil {
			err = fmt.Errorf("host: listing queued runs for the close report: %w", e)
			break
		}
		if rt.threadOwnedHere(rctx, r) {
			rep.Queued = append(rep.Queued, r.ID)
		}
	}
	for r, e := range rt.st.ListActive(rctx) {
		if e != nil {
			err = fmt.Errorf("host: listing active runs for the close report: %w", e)
			break
		}
		switch {
		case r.Owner == owner && Waiting(r):
			rep.Waiting = append(rep.Waiting, r.ID)
			rep.Abandoned = slices.DeleteFunc(rep.Abandoned, func(id string) bool { return id == r.ID })
		case r.Owner == owner && !slices.Contains(rep.Abandoned, r.ID):
			rep.Abandoned = append(rep.Abandoned, r.ID) // e.g. a commit that failed
		}
	}
	rep.Settled = err == nil && len(rep.Abandoned) == 0 && len(rep.Queued) == 0
	return rep, cmp.Or(err, leaseErr)
}

// counters are the runtime's metrics.
type counters struct {
	admissions       labeled
	terminal         labeled
	absorptions      atomic.Int64
	droppedAbsorbs   atomic.Int64
	policyFallbacks  atomic.Int64
	recovered        atomic.Int64
	injectBoundaries atomic.Int64 // boundaries at which the injection hook ran
	commitErrors     atomic.Int64
	stepCommits      atomic.Int64 // step records committed (model, tool, take)
	stepsResumed     atomic.Int64 // step records recovered runs resumed from
	noticesSent      atomic.Int64
	noticesReceived  atomic.Int64
	handedBack       atomic.Int64 // threads given up to their home (ADR 0143)
	waitNotices      atomic.Int64 // waits that asked a run's host to tell them
	noticeRecords    atomic.Int64 // records taken from notices (snapshots, settled runs)
	toolDecisions    labeled      // by verdict
	toolPolicyFails  atomic.Int64
	answers          labeled // by action
	approvalTimeouts atomic.Int64
	waiting          atomic.Int64 // runs that went waiting
	resumed          atomic.Int64 // waiting runs executed again
}

type labeled struct {
	mu sync.Mutex
	m  map[string]int64
}

func (l *labeled) add(label string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]int64{}
	}
	l.m[label]++
}

func (l *labeled) snapshot() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int64, len(l.m))
	for k, v := range l.m {
		out[k] = v
	}
	return out
}

// Stats is a snapshot of the runtime's counters.
type Stats struct {
	Admissions       map[string]int64 // by decision ("start" for an idle thread)
	Terminal         map[string]int64 // runs ended, by terminal reason
	Absorptions      int64
	DroppedAbsorbs   int64
	PolicyFallbacks  int64
	Recovered        int64
	InjectBoundaries int64
	// InjectHook reports whether the injection hook is installed: only when
	// the policy's manifest declares inject (otherwise step boundaries do no
	// work and InjectBoundaries stays 0).
	InjectHook   bool
	CommitErrors int64
	// DurableSteps reports whether the store keeps step records: without
	// them a recovered run restarts from its first step and injection
	// takes nothing. StepCommits counts the step records written,
	// StepsResumed those recovered runs continued from.
	DurableSteps bool
	StepCommits  int64
	StepsResumed int64
	// With a shared store (several hosts): lease renewals, leases lost,
	// notices sent to other hosts and received from them.
	LeaseRenewals   int64
	LeasesLost      int64
	NoticesSent     int64
	NoticesReceived int64
	// HandedBack counts the idle threads this host gave up to the live
	// host they belong with (ADR 0143); WaitNotices the waits for runs of
	// other hosts that asked the run's host to tell this one when it ends.
	HandedBack  int64
	WaitNotices int64
	// NoticeRecords counts what this host took from notices instead of
	// reading it: threads' snapshots, settled runs' records.
	NoticeRecords int64
	// The tool policy: its decisions by verdict, its failures (answered
	// by the fallback), the answers given to asked calls by action, the
	// calls rejected by the approval time limit, the runs that went
	// waiting and those executed again after their answers.
	ToolDecisions      map[string]int64
	ToolPolicyFailures int64
	Answers            map[string]int64
	ApprovalTimeouts   int64
	Waits              int64
	Resumes            int64
}

// Stats returns the runtime's counters.
func (rt *Runtime) Stats() Stats {
	return Stats{
		Admissions:       rt.stats.admissions.snapshot(),
		Terminal:         rt.stats.terminal.snapshot(),
		Absorptions:      rt.stats.absorptions.Load(),
		DroppedAbsorbs:   rt.stats.droppedAbsorbs.Load(),
		PolicyFallbacks:  rt.stats.policyFallbacks.Load(),
		Recovered:        rt.stats.recovered.Load(),
		InjectBoundaries: rt.stats.injectBoundaries.Load(),
		InjectHook:       rt.reg != nil,
		CommitErrors:     rt.stats.commitErrors.Load(),
		DurableSteps:     rt.st.StepsKept(),
		StepCommits:      rt.stats.stepCommits.Load(),
		StepsResumed:     rt.stats.stepsResumed.Load(),
		LeaseRenewals:    rt.lease.renewals.Load(),
		LeasesLost:       rt.lease.lost.Load(),
		NoticesSent:      rt.stats.noticesSent.Load(),
		NoticesReceived:  rt.stats.noticesReceived.Load(),
		HandedBack:       rt.stats.handedBack.Load(),
		WaitNotices:      rt.stats.waitNotices.Load(),
		NoticeRecords:    rt.stats.noticeRecords.Load(),

		ToolDecisions:      rt.stats.toolDecisions.snapshot(),
		ToolPolicyFailures: rt.stats.toolPolicyFails.Load(),
		Answers:            rt.stats.answers.snapshot(),
		ApprovalTimeouts:   rt.stats.approvalTimeouts.Load(),
		Waits:              rt.stats.waiting.Load(),
		Resumes:            rt.stats.resumed.Load(),
	}
}

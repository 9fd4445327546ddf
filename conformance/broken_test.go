package conformance_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/conformance"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// Broken drivers: the reference in-memory driver with one rule broken each.
// The tests serve them in process through the SDK, or, for the one that
// must be killed, as this test binary re-executed with brokenEnv set.

const brokenEnv = "AGENTHOST_TEST_BROKEN_DRIVER"

// brokenDrivers maps each broken driver to the exact set of rules the suite
// must find it breaking: a rule missing means the suite lost sight of the
// fault, and a rule added means a fault in one place now reports as many
// (or the suite checks something the driver does right).
var brokenDrivers = map[string][]string{
	"first-run-only":     {"atomicity.absorbing-pair", "atomicity.batch-whole", "index.list-by-state", "invariant.I4", "scale.list", "semantics.S1"},
	"ignores-version":    {"concurrency.one-winner", "concurrency.stale-version", "concurrency.stale-young-version", "steps.batch-atomic"},
	"stale-state-index":  {"index.list-by-state"},
	"loses-acked-writes": {"durability.acked-survives-kill", "durability.reopen", "durability.steps", "invariant.I4"},
	"history-reversed":   {"reads.history-order", "semantics.S1"},
	"idempotency-global": {"atomicity.refused-batch-writes-nothing", "concurrency.conflict-writes-nothing", "reads.idempotency-by-thread", "semantics.S5"},
	"paging-skips":       {"index.list-by-state", "index.paging", "scale.list"},
	"ignores-fence":      {"leases.dead-fence", "leases.fence-foreign-owner", "leases.fenced-steps", "leases.fenced-steps-owner"},
	// Fenced steps checked as a fenced batch is: a live fence may write to
	// a thread no live lease owns.
	"steps-fence-weak":  {"leases.fenced-steps-owner"},
	"partial-batch":     {"atomicity.batch-whole", "atomicity.refused-batch-writes-nothing", "reads.history-paging"},
	"acks-before-write": {"durability.acked-survives-kill", "durability.steps"},
	"acks-unsynced":     {conformance.RulePowerCut},
	"young-unchecked":   {"concurrency.stale-young-version"},
	"crashes":           {"driver.crash"},
	"conflict-lands":    {"concurrency.conflict-writes-nothing", "concurrency.stale-version-writes-nothing", "steps.batch-atomic"},
}

// powerCutRules are the rules broken drivers break on top of
// brokenDrivers' when the suite can cut the power; a driver listed with
// none breaks no rule otherwise, and its test needs the power cut.
var powerCutRules = map[string][]string{
	"acks-before-write": {conformance.RulePowerCut},
	"acks-unsynced":     nil,
}

// brokenFactory returns the factory of broken driver name, nil if none.
func brokenFactory(name string) storedriver.Factory {
	if f := brokenStepFactory(name); f != nil {
		return f
	}
	if _, ok := brokenDrivers[name]; !ok && name != "data-elsewhere" {
		return nil
	}
	return storedriver.FactoryFunc(func(ctx context.Context, config map[string]string) (driver.Driver, error) {
		if name == "acks-before-write" || name == "acks-unsynced" || name == "data-elsewhere" {
			return openLogDriver(name, config)
		}
		d := memdriver.New()
		if name == "ignores-fence" || name == "steps-fence-weak" {
			d = memdriver.NewShared(nil) // with leases
		}
		return &broken{Driver: d, name: name, firstState: map[string]record.RunState{}, keyThread: map[string]string{}, owner: map[string]int64{}}, nil
	})
}

type broken struct {
	*memdriver.Driver
	name string

	mu         sync.Mutex
	firstState map[string]record.RunState // stale-state-index
	keyThread  map[string]string          // idempotency-global: key → first thread
	owner      map[string]int64           // ignores-fence: thread → the owner its last batch named
}

func (b *broken) Info(ctx context.Context) (driver.Info, error) {
	info, err := b.Driver.Info(ctx)
	info.Name = "broken-" + b.name
	if b.name == "loses-acked-writes" {
		info.Durable = true // it is not: everything lives in memory
	}
	return info, err
}

func (b *broken) Commit(ctx context.Context, bt driver.Batch) (int64, error) {
	switch b.name {
	case "first-run-only":
		if len(bt.Runs) > 1 {
			bt.Runs = bt.Runs[:1]
		}
	case "partial-batch":
		// Writes a batch of several messages without its last one.
		if len(bt.Messages) > 1 {
			bt.Messages = bt.Messages[:len(bt.Messages)-1]
		}
	case "ignores-fence":
		// Checks the version, writes the owner the batch names, and looks
		// at no lease: the memdriver underneath keeps every owner 0.
		b.mu.Lock()
		defer b.mu.Unlock()
		owner := bt.Thread.Owner
		bt.Fence, bt.Thread.Owner = 0, 0
		v, err := b.Driver.Commit(ctx, bt)
		if err == nil {
			b.owner[bt.ThreadID] = owner
		}
		return v, err
	case "crashes":
		// Dies in the first commit to the thread of one case.
		if bt.ThreadID == "refused" {
			// As the Go runtime reports a fatal error: on file
			// descriptor 2 itself.
			fmt.Fprintln(os.NewFile(2, "stderr"), "fatal error: simulated crash in commit")
			os.Exit(3)
		}
	case "young-unchecked":
		// Checks the version of a thread written before; one never
		// written takes any batch, the last writer winning.
		b.mu.Lock()
		defer b.mu.Unlock()
		snap, err := b.Driver.LoadThread(ctx, bt.ThreadID)
		if err == nil && snap.Thread.Version == 0 && bt.Thread.Version == bt.ExpectedVersion+1 {
			bt.ExpectedVersion = snap.Thread.Version
			bt.Thread.Version = snap.Thread.Version + 1
		}
		return b.Driver.Commit(ctx, bt)
	case "conflict-lands":
		// Refuses a stale batch as a conflict, but writes it.
		b.mu.Lock()
		defer b.mu.Unlock()
		snap, err := b.Driver.LoadThread(ctx, bt.ThreadID)
		if err == nil && bt.ExpectedVersion != snap.Thread.Version && bt.Thread.Version == bt.ExpectedVersion+1 {
			bt.ExpectedVersion = snap.Thread.Version
			bt.Thread.Version = snap.Thread.Version + 1
			_, _ = b.Driver.Commit(ctx, bt)
			return 0, driver.ErrVersionConflict
		}
		return b.Driver.Commit(ctx, bt)
	case "ignores-version":
		snap, err := b.Driver.LoadThread(ctx, bt.ThreadID)
		if err == nil && bt.ExpectedVersion != snap.Thread.Version && bt.Thread.Version == bt.ExpectedVersion+1 {
			bt.ExpectedVersion = snap.Thread.Version
			bt.Thread.Version = snap.Thread.Version + 1
		}
	}
	v, err := b.Driver.Commit(ctx, bt)
	if err == nil {
		b.mu.Lock()
		for _, r := range bt.Runs {
			if _, ok := b.firstState[r.ID]; !ok {
				b.firstState[r.ID] = r.State
			}
		}
		for _, k := range bt.Idempotency {
			if _, ok := b.keyThread[k.Key]; !ok {
				b.keyThread[k.Key] = k.ThreadID
			}
		}
		b.mu.Unlock()
	}
	return v, err
}

func (b *broken) CommitSteps(ctx context.Context, sb driver.StepBatch) error {
	if b.name == "steps-fence-weak" && sb.Fence != 0 {
		live, err := b.Driver.Leases(ctx)
		if err != nil {
			return err
		}
		isLive := func(e int64) bool {
			return slices.ContainsFunc(live, func(l driver.Lease) bool { return l.Epoch == e })
		}
		snap, err := b.Driver.LoadThread(ctx, sb.ThreadID)
		if err != nil {
			return err
		}
		if o := snap.Thread.Owner; isLive(sb.Fence) && o != sb.Fence && (o == 0 || !isLive(o)) {
			sb.Fence = 0 // accepted as if the fence owned the thread
		}
	}
	return b.Driver.CommitSteps(ctx, sb)
}

func (b *broken) ListRuns(ctx context.Context, st record.RunState, after string, limit int) ([]record.Run, error) {
	switch b.name {
	case "stale-state-index":
		if err := storedriver.ValidateListRuns(st, limit); err != nil {
			return nil, err
		}
		b.mu.Lock()
		var ids []string
		for id, s := range b.firstState {
			if s == st && id > after {
				ids = append(ids, id)
			}
		}
		b.mu.Unlock()
		slices.Sort(ids)
		ids = ids[:min(len(ids), limit)]
		runs, err := b.Driver.GetRuns(ctx, ids)
		for i := range runs {
			runs[i].State = st // the index's idea of it
		}
		return runs, err
	case "paging-skips":
		runs, err := b.Driver.ListRuns(ctx, st, after, limit+1)
		if err != nil {
			return nil, err
		}
		if after != "" && len(runs) > 0 {
			runs = runs[1:] // loses the first record of every later page
		}
		return runs[:min(len(runs), limit)], err
	}
	return b.Driver.ListRuns(ctx, st, after, limit)
}

func (b *broken) LoadThread(ctx context.Context, th string) (driver.ThreadSnapshot, error) {
	snap, err := b.Driver.LoadThread(ctx, th)
	if b.name == "ignores-fence" && err == nil {
		b.mu.Lock()
		snap.Thread.Owner = b.owner[th]
		b.mu.Unlock()
	}
	return snap, err
}

func (b *broken) ReadHistory(ctx context.Context, th string, afterSeq int64, limit int) ([]record.Message, error) {
	msgs, err := b.Driver.ReadHistory(ctx, th, afterSeq, limit)
	if b.name == "history-reversed" {
		slices.Reverse(msgs)
	}
	return msgs, err
}

func (b *broken) GetIdempotency(ctx context.Context, th, key string) (record.Idempotency, error) {
	if b.name == "idempotency-global" && th != "" && key != "" {
		b.mu.Lock()
		first, ok := b.keyThread[key]
		b.mu.Unlock()
		if ok {
			th = first
		}
	}
	return b.Driver.GetIdempotency(ctx, th, key)
}

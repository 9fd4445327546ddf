package pgdriver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// kind names the outcome of a commit by its driver sentinel.
func kind(err error) string {
	for _, s := range []struct {
		err  error
		name string
	}{{driver.ErrVersionConflict, "conflict"}, {driver.ErrFenced, "fenced"}, {driver.ErrInvalidArgument, "invalid"}} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}

// TestCommitManyAsCommit: a group (CommitMany) gives each batch the outcome
// Commit gives it, one batch after the other in the group's order (thread
// order, a thread's batches in theirs), and leaves the same threads: two
// batches of one thread in a group (two rounds of commit_group), a new
// thread, refusals by the checks (stale version, history, steps) beside
// batches that land, and a group whose write fails (a duplicate
// idempotency key), sent again batch by batch.
func TestCommitManyAsCommit(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	one, many := open(t, url, "group_one"), open(t, url, "group_many")

	// Before the group, on both: thread A with a queued run, thread C with
	// a key, thread E with an active run and its first step.
	a, c, e := storedrivertest.NewBuilder("A"), storedrivertest.NewBuilder("C"), storedrivertest.NewBuilder("E")
	a1 := a.Run("a1")
	c1 := c.Run("c1")
	e1 := storedrivertest.Activate(e.Run("e1"), storedrivertest.StepOwner, storedrivertest.StepAttempt)
	before := []driver.Batch{
		a.Batch([]string{a1.ID}, []record.Run{a1}, []record.Message{a.Msg("a1-in", a1.ID)}, nil),
		c.Batch([]string{c1.ID}, []record.Run{c1}, []record.Message{c.Msg("c1-in", c1.ID)}, []record.Idempotency{c.Key("kc", c1.ID, "c1-in")}),
		e.Batch([]string{e1.ID}, []record.Run{e1}, []record.Message{e.Msg("e1-in", e1.ID)}, nil),
	}
	before[2].Steps = []record.Step{storedrivertest.Step(e1, 1)}
	for _, d := range []*pgdriver.Driver{one, many} {
		for _, b := range before {
			if _, err := d.Commit(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, th := range []*storedrivertest.Builder{a, c, e} {
		th.Committed(before[i])
	}

	// Group 1: every check passes or refuses; no write fails.
	a1 = storedrivertest.Activate(a1, storedrivertest.StepOwner, storedrivertest.StepAttempt)
	ga1 := a.Batch(a.Open, []record.Run{a1}, nil, nil)
	a.Committed(ga1)
	a2 := a.Run("a2")
	ga2 := a.Batch([]string{a1.ID, a2.ID}, []record.Run{a2}, []record.Message{a.Msg("a2-in", a2.ID)}, []record.Idempotency{a.Key("ka2", a2.ID, "a2-in")})
	b := storedrivertest.NewBuilder("B")
	b1 := b.Run("b1")
	gb := b.Batch([]string{b1.ID}, []record.Run{b1}, []record.Message{b.Msg("b1-in", b1.ID)}, []record.Idempotency{b.Key("kb", b1.ID, "b1-in")})
	stale := c.Fork()
	stale.Version = 7
	gstale := stale.Batch(c.Open, nil, nil, nil)
	hist := e.Fork()
	hist.NextSeq = 1 // a message at seq 1 again
	ghist := hist.Batch(e.Open, nil, []record.Message{hist.Msg("e-again", e1.ID)}, nil)
	gstep := e.Fork().Batch(e.Open, nil, nil, nil)
	gstep.Steps = []record.Step{storedrivertest.Step(e1, 3)} // not the next (2)
	never := storedrivertest.NewBuilder("D")
	never.Version = 2 // a thread never written is at version 0
	gnew := never.Batch(nil, nil, nil, nil)

	// Group 2: thread C's key again (a unique violation: the group is sent
	// again batch by batch) beside batches that land.
	dupe := c.Fork()
	c2 := dupe.Run("c2")
	gdupe := dupe.Batch([]string{c1.ID, c2.ID}, []record.Run{c2}, []record.Message{dupe.Msg("c2-in", c2.ID)}, []record.Idempotency{dupe.Key("kc", c2.ID, "c2-in")})
	f := storedrivertest.NewBuilder("F")
	f1 := f.Run("f1")
	gf := f.Batch([]string{f1.ID}, []record.Run{f1}, []record.Message{f.Msg("f1-in", f1.ID)}, nil)
	gstep2 := e.Fork().Batch(e.Open, nil, nil, nil)
	gstep2.Steps = []record.Step{storedrivertest.Step(e1, 2)}

	for _, g := range []struct {
		name  string
		group []driver.Batch
		want  []string
	}{
		{"checks", []driver.Batch{gstep, ga1, gb, gstale, ghist, ga2, gnew}, []string{"conflict", "ok", "ok", "conflict", "invalid", "ok", "conflict"}},
		{"a write fails", []driver.Batch{gf, gdupe, gstep2}, []string{"ok", "conflict", "ok"}},
	} {
		// The order CommitMany applies them in: by thread, stable.
		order := make([]int, len(g.group))
		for i := range order {
			order[i] = i
		}
		for i := 1; i < len(order); i++ {
			for j := i; j > 0 && g.group[order[j]].ThreadID < g.group[order[j-1]].ThreadID; j-- {
				order[j], order[j-1] = order[j-1], order[j]
			}
		}
		_, errs := many.CommitMany(ctx, g.group)
		for _, i := range order {
			_, err := one.Commit(ctx, g.group[i])
			if kind(err) != g.want[i] || kind(errs[i]) != g.want[i] {
				t.Errorf("%s: batch %d (thread %s): Commit: %v; in the group: %v; want %s", g.name, i, g.group[i].ThreadID, err, errs[i], g.want[i])
			}
		}
	}
	for _, id := range []string{"A", "B", "C", "D", "E", "F"} {
		s1, err1 := one.LoadThread(ctx, id)
		s2, err2 := many.LoadThread(ctx, id)
		h1, _ := one.ReadHistory(ctx, id, 0, 100)
		h2, _ := many.ReadHistory(ctx, id, 0, 100)
		if kind(err1) != kind(err2) || s1.Thread.Version != s2.Thread.Version || len(s1.Runs) != len(s2.Runs) ||
			s1.Thread.LastCommitID != s2.Thread.LastCommitID || len(h1) != len(h2) || len(s1.Thread.OpenRunIDs) != len(s2.Thread.OpenRunIDs) {
			t.Errorf("thread %s: by Commit version %d, %d runs, %d messages, open %v (%v); by CommitMany version %d, %d runs, %d messages, open %v (%v)",
				id, s1.Thread.Version, len(s1.Runs), len(h1), s1.Thread.OpenRunIDs, err1, s2.Thread.Version, len(s2.Runs), len(h2), s2.Thread.OpenRunIDs, err2)
		}
	}
	for _, d := range []*pgdriver.Driver{one, many} {
		st, err := d.ReadSteps(ctx, e1.ID, 0, 10)
		if err != nil || len(st) != 2 {
			t.Errorf("steps of e1: %d, %v; want 2", len(st), err)
		}
		k, err := d.GetIdempotency(ctx, "A", "ka2")
		if err != nil || k.RunID != a2.ID {
			t.Errorf("key ka2: %+v, %v", k, err)
		}
	}
}

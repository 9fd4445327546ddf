package pgdriver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
)

// TestNoticesLeftOut: once a lease was acquired through a driver, its
// watch receives only the notices for that lease and those for every host
// sent through another driver (with their records, as before); a driver
// that acquired no lease receives every notice, its own included; a lease
// acquired while a watch is in place ends the watch, and the next one
// receives the new lease's notices.
func TestNoticesLeftOut(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	d1 := open(t, url, pgdriver.DefaultSchema)
	d2 := open(t, url, pgdriver.DefaultSchema)
	d3 := open(t, url, pgdriver.DefaultSchema) // an operator's tool: no lease
	a, err := d1.AcquireLease(ctx, "host-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d2.AcquireLease(ctx, "host-2", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ch1, err := d1.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ch2, err := d2.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ch3, err := d3.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(d *pgdriver.Driver, n driver.Notice) {
		t.Helper()
		if err := d.Notify(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	rec := driver.Notice{ThreadID: "th-all", Settled: []string{"r1"},
		Thread:   record.Thread{ID: "th-all", Version: 3},
		Runs:     []record.Run{{ID: "r1", ThreadID: "th-all", Seq: 1, State: record.StateCompleted}},
		Messages: []record.Message{{ID: "m1", ThreadID: "th-all", RunID: "r1", Role: record.RoleAssistant, Content: "the answer"}}}
	sent := []driver.Notice{
		rec, // d1 to every host, with records
		{ThreadID: "th-a", Owner: a.Epoch, RunID: "r-a", ReplyTo: b.Epoch},          // d2 to d1's lease
		{ThreadID: "th-none", Owner: a.Epoch + b.Epoch + 1000},                      // d2 to no live lease
		{ThreadID: "th-own", Owner: 0, Wake: a.Epoch, RunID: "r", ReplyTo: b.Epoch}, // d2's announcement
		{ThreadID: "th-mine", Owner: 0},                                             // d3 to every host
		{ThreadID: "th-end"},                                                        // d3: the last
	}
	send(d1, sent[0])
	send(d2, sent[1])
	send(d2, sent[2])
	send(d2, sent[3])
	send(d3, sent[4])
	send(d3, sent[5])
	// Notices are delivered in the order their statements committed.
	got := func(ch <-chan driver.Notice) []string {
		t.Helper()
		var ids []string
		timeout := time.After(30 * time.Second)
		for {
			select {
			case n := <-ch:
				ids = append(ids, n.ThreadID)
				if n.ThreadID == "th-all" && (n.Thread.ID != rec.Thread.ID || len(n.Runs) != len(rec.Runs) || len(n.Messages) != len(rec.Messages)) {
					t.Errorf("the records did not come with the notice: %+v", n)
				}
				if n.ThreadID == "th-end" {
					return ids
				}
			case <-timeout:
				t.Fatalf("the last notice did not come; got %v", ids)
			}
		}
	}
	for _, c := range []struct {
		name string
		ch   <-chan driver.Notice
		want string
	}{
		{"d1 (lease a)", ch1, "[th-a th-own th-mine th-end]"},
		{"d2 (lease b)", ch2, "[th-all th-mine th-end]"},
		{"d3 (no lease)", ch3, "[th-all th-a th-none th-own th-mine th-end]"},
	} {
		if g := got(c.ch); fmt.Sprint(g) != c.want {
			t.Errorf("%s received %v, want %s", c.name, g, c.want)
		}
	}

	// A lease acquired while d3 watches: the watch ends; the next one
	// listens for the lease.
	c, err := d3.AcquireLease(ctx, "host-3", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waitClosed(t, ch3)
	ch3, err = d3.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send(d2, driver.Notice{ThreadID: "th-c", Owner: c.Epoch})
	send(d2, driver.Notice{ThreadID: "th-end"})
	if g := got(ch3); fmt.Sprint(g) != "[th-c th-end]" {
		t.Errorf("d3 (lease c) received %v, want [th-c th-end]", g)
	}
}

// TestNoticeChannelNames: a lease's notice channel fits PostgreSQL's 63
// bytes for the longest schema and epoch, and differs between schemas.
func TestNoticeChannelNames(t *testing.T) {
	long1, long2 := strings.Repeat("s", 47)+"1", strings.Repeat("s", 47)+"2"
	a, b := pgdriver.EpochChannelPrefix(long1), pgdriver.EpochChannelPrefix(long2)
	if a == b {
		t.Fatalf("schemas %q and %q share the channel prefix %q", long1, long2, a)
	}
	if n := len(a) + len("9223372036854775807"); n > 63 {
		t.Fatalf("a channel of %d bytes", n)
	}
	if got := pgdriver.EpochChannelPrefix("agenthost"); got != "agenthost_n" {
		t.Fatalf("the default schema's prefix: %q", got)
	}
}

package host_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
)

// A host that joins a store whose threads all belong to another live host
// gets its share of them (ADR 0143): each owner gives up, once idle, the
// threads whose home is the new lease, and the new host executes their runs
// from then on, whichever host admits them. Once they have moved they stay
// (no ping-pong). A host that restarts (a new lease) gets its share back
// the same way.
func TestSharedJoiningHostGetsThreads(t *testing.T) {
	for _, name := range sortedKeys(sharedStores) {
		t.Run(name, func(t *testing.T) {
			da, db := sharedStores[name](t)
			const n = 24
			threads := make([]string, n)
			for i := range threads {
				threads[i] = fmt.Sprintf("T%d", i)
			}
			k := 0
			// round submits one input to every thread, in turn to each host,
			// waits for the answers, and returns who answered each thread.
			round := func(hosts ...*sharedHost) map[string]string {
				t.Helper()
				by := map[string]string{}
				for i, th := range threads {
					h := hosts[i%len(hosts)]
					k++
					tk, err := h.rt.Submit(context.Background(), th, fmt.Sprintf("input %d", k), host.SubmitOptions{})
					if err != nil {
						t.Fatal(err)
					}
					res := h.wait(t, tk.RunID)
					if res.State != record.StateCompleted {
						t.Fatalf("run %s on %s: %s", tk.RunID, th, res.State)
					}
					by[th] = answer(res)
				}
				return by
			}
			count := func(by map[string]string, who string) int {
				c := 0
				for _, a := range by {
					if a == "answered by "+who {
						c++
					}
				}
				return c
			}
			// settle runs rounds until two in a row are answered alike and
			// the host named newcomer answers some threads; ping-pong never
			// settles.
			settle := func(newcomer string, hosts ...*sharedHost) map[string]string {
				t.Helper()
				prev := round(hosts...)
				for r := 0; r < 40; r++ {
					by := round(hosts...)
					if maps.Equal(by, prev) && count(by, newcomer) > 0 {
						return by
					}
					prev = by
				}
				t.Fatalf("the answers did not settle with %s answering some threads in 40 rounds: %v", newcomer, prev)
				return nil
			}

			a := newSharedHost(t, "A", da, false, longLease)
			if by := round(a); count(by, "A") != n {
				t.Fatalf("A alone: %v", by)
			}
			b := newSharedHost(t, "B", db, false, longLease)
			by := settle("B", a, b)
			if count(by, "A") == 0 {
				t.Fatalf("every thread moved to B, none stayed with A: %v", by)
			}
			moved := count(by, "B")
			if again := round(b, a); !maps.Equal(again, by) {
				t.Fatalf("threads moved again with the same hosts live: %v, then %v", by, again)
			}
			if b.rt.Stats().HandedBack != 0 || a.rt.Stats().HandedBack < int64(moved) {
				t.Fatalf("threads given up: A %d, B %d; want A at least the %d that moved, B none", a.rt.Stats().HandedBack, b.rt.Stats().HandedBack, moved)
			}

			// B restarts: a new lease, which gets its share again.
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			if _, err := b.rt.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if by := round(a); count(by, "A") != n {
				t.Fatalf("A alone again: %v", by)
			}
			b2 := newSharedHost(t, "B2", db, false, longLease)
			by2 := settle("B2", b2, a)
			if got := slices.Sorted(maps.Keys(by2)); len(got) != n {
				t.Fatalf("answers for %d threads", len(got))
			}
			// Rendezvous hashing gives the new lease its own share, not
			// necessarily the old one's; both hold some threads.
			if count(by2, "A") == 0 || count(by2, "B2") == 0 {
				t.Fatalf("after B's restart: %v", by2)
			}
		})
	}
}

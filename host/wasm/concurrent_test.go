package wasm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agenthost/agenthost/host/runstate"
)

// TestConcurrentDecide hammers the pool: P goroutines × N decisions through a
// bounded pool, every decision checked, with and without failing calls mixed
// in. Run it with -race.
func TestConcurrentDecide(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	const goroutines, perGoroutine = 8, 100
	for _, g := range []struct{ name, path string }{
		{"c", cGuest()},
		{"go", goGuest(t, "refine")},
		{"trapping", hostile("sometimes")},
	} {
		t.Run(g.name, func(t *testing.T) {
			var failures atomic.Int64
			m := load(t, e, g.path, Options{
				MaxInstances: 3,
				Config:       configFor(g.name),
				OnFailure:    func(Failure) { failures.Add(1) },
			})
			var wg sync.WaitGroup
			errs := make(chan error, goroutines*perGoroutine)
			for w := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perGoroutine {
						c := decideCases[(w+i)%len(decideCases)]
						d, err := m.Decide(context.Background(), request(c))
						want := c.refine
						if g.name == "trapping" {
							want = runstate.ActionQueue
						}
						if err != nil && (g.name != "trapping" || !isFallback(err, d)) || d.Action != want {
							errs <- fmt.Errorf("%q: got %+v %v, want %s", c.content, d, err, want)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			st := m.Stats()
			if st.Calls != goroutines*perGoroutine {
				t.Errorf("stats %+v", st)
			}
			if g.name == "trapping" {
				// decideCases has one empty content: those calls trap.
				if st.Failures == 0 || st.Failures != uint64(failures.Load()) || st.Discarded != st.Failures {
					t.Errorf("stats %+v, %d failures reported", st, failures.Load())
				}
			} else if st.Failures != 0 {
				t.Errorf("stats %+v", st)
			}
			if st.Instances-st.Discarded > 3 {
				t.Errorf("pool exceeded its bound: %+v", st)
			}
		})
	}
}

func configFor(name string) []byte {
	if name == "trapping" {
		return nil
	}
	return []byte(`{}`)
}

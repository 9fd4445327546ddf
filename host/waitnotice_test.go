package host_test

import (
	"context"
	"testing"

	"github.com/agenthost/agenthost/host"
)

// A wait at a host that neither admitted nor executes the run is woken by
// a notice from the run's host when it settles, not by its poll of the
// store: the waiting host asks once, the executing host answers.
func TestSharedWaitWokenByNotice(t *testing.T) {
	for _, name := range sortedKeys(sharedStores) {
		t.Run(name, func(t *testing.T) {
			da, db := sharedStores[name](t)
			a := newSharedHost(t, "A", da, true, longLease)
			first, err := a.rt.Submit(context.Background(), "T", "one", host.SubmitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := waitFor(a.rt, first.RunID, host.EventStepStarted); err != nil {
				t.Fatal(err)
			}
			c := newSharedHost(t, "C", db, false, longLease)
			type waited struct {
				res string
				err error
			}
			done := make(chan waited, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				res, err := c.rt.Wait(ctx, first.RunID)
				done <- waited{answer(res), err}
			}()
			eventually(t, "C asks A to tell it", func() bool { return c.rt.Stats().WaitNotices == 1 })
			eventually(t, "A hears C", func() bool { return a.rt.Stats().NoticesReceived >= 1 })
			close(a.gate)
			w := <-done
			if w.err != nil || w.res != "answered by A" {
				t.Fatalf("C's wait: %q, %v", w.res, w.err)
			}
			eventually(t, "A tells C the run settled", func() bool { return c.rt.Stats().NoticesReceived >= 1 })
			if st := c.rt.Stats(); st.WaitNotices != 1 {
				t.Fatalf("C asked %d times, want once", st.WaitNotices)
			}
		})
	}
}

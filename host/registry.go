package host

import (
	"sync"

	"github.com/agenthost/agenthost/abi/record"
)

// registry holds the inputs admitted with inject, per thread, deduplicated
// by input id. Each is offered to the run that was active when the policy
// decided to inject it: the policy judged the input against that run's work,
// so no later run takes it. It is process-local: every offer is also a
// durable queued run, so losing it loses nothing.
type registry struct {
	mu     sync.Mutex
	offers map[string]map[string]offer // thread → input id → offer
}

type offer struct {
	runID string // the queued run holding the input
	to    string // the active run it is offered to
	msg   record.Message
}

func newRegistry() *registry { return &registry{offers: map[string]map[string]offer{}} }

// offer registers an input admitted with inject into run runID, offered to
// the active run to.
func (r *registry) offer(thread, runID, to string, msg record.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.offers[thread]
	if m == nil {
		m = map[string]offer{}
		r.offers[thread] = m
	}
	m[msg.ID] = offer{runID: runID, to: to, msg: msg}
}

// has reports whether the thread has any offer: the executor's cheap check
// before it looks at the queue.
func (r *registry) has(thread string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.offers[thread]) > 0
}

// lookup returns the offered message for each input id, and whether every id
// was offered to run to.
func (r *registry) lookup(thread, to string, ids []string) ([]record.Message, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.offers[thread]
	out := make([]record.Message, 0, len(ids))
	for _, id := range ids {
		o, ok := m[id]
		if !ok || o.to != to {
			return nil, false
		}
		out = append(out, o.msg)
	}
	return out, true
}

// forget drops the offers of the given runs (started, absorbed, canceled).
func (r *registry) forget(thread string, runIDs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.offers[thread]
	for id, o := range m {
		for _, run := range runIDs {
			if o.runID == run {
				delete(m, id)
			}
		}
	}
	if len(m) == 0 {
		delete(r.offers, thread)
	}
}

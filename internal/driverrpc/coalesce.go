package driverrpc

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/storepb"
)

// Commits from concurrent callers share round trips: a Client keeps at most
// maxInFlight commit RPCs in flight, and the commits that arrive meanwhile
// wait and go together in one CommitMany. The driver commits them
// concurrently, each with its own result, so grouping on the wire changes
// nothing of the contract; it saves a round trip per commit under load. A
// commit that finds a free slot and no one waiting goes at once from its
// caller's goroutine. Step commits (CommitSteps) are grouped the same way,
// apart from commits, into CommitStepsMany.
const (
	maxInFlight   = 2
	maxGroupBytes = 32 << 20
)

type pending[B proto.Message] struct {
	ctx   context.Context
	pb    B
	size  int
	taken bool // under coalescer.mu: sent, or about to be
	gone  bool // under coalescer.mu: its caller gave up before it was sent
	done  chan commitResult
}

type commitResult struct {
	v   int64
	err error
}

// coalescer groups the calls of one kind (commits, or step commits) made
// by concurrent callers.
type coalescer[B proto.Message] struct {
	// one sends a batch alone, under its caller's context.
	one func(ctx context.Context, pb B) (int64, error)
	// many sends a group in one round trip and returns each member's
	// result, in order; or an error that is every member's.
	many func(ctx context.Context, pbs []B) ([]commitResult, error)
	// what names the call ("commit"); unknown begins the error of one
	// whose outcome is unknown.
	what, unknown string

	mu       sync.Mutex
	queue    []*pending[B]
	inflight int
}

// errUnknown is the error of a call whose caller's context ended after it
// was sent.
func (co *coalescer[B]) errUnknown(err error) error {
	return fmt.Errorf("%s: %w", co.unknown, err)
}

// do sends pb alone or with others, and waits for its result. pb must not
// change once do has it: proto.Size caches the sizes of its messages, which
// the direct transport's encoding of a CommitMany uses.
func (co *coalescer[B]) do(ctx context.Context, pb B) (int64, error) {
	p := &pending[B]{ctx: ctx, pb: pb, size: proto.Size(pb), done: make(chan commitResult, 1)}
	if p.size > driver.MaxBatchBytes {
		// Alone: the driver refuses it, or the transport does.
		return co.one(ctx, pb)
	}
	if err := ctx.Err(); err != nil {
		return 0, err // never sent
	}
	co.mu.Lock()
	if len(co.queue) == 0 && co.inflight < maxInFlight {
		// Nothing waits: send it from this goroutine, sparing the hand-over
		// to a sender and back, which costs a wake-up each way.
		co.inflight++
		co.mu.Unlock()
		v, err := co.one(ctx, pb)
		co.mu.Lock()
		if len(co.queue) > 0 {
			go co.drive() // calls queued meanwhile take over this slot
		} else {
			co.inflight--
		}
		co.mu.Unlock()
		if err != nil && ctx.Err() != nil {
			return 0, co.errUnknown(ctx.Err())
		}
		return v, err
	}
	co.queue = append(co.queue, p)
	if co.inflight < maxInFlight {
		co.inflight++
		go co.drive()
	}
	co.mu.Unlock()
	select {
	case r := <-p.done:
		return r.v, r.err
	case <-ctx.Done():
	}
	co.mu.Lock()
	if !p.taken {
		p.gone = true
		co.mu.Unlock()
		return 0, ctx.Err() // never sent
	}
	co.mu.Unlock()
	return 0, co.errUnknown(ctx.Err())
}

// drive sends queued calls until the queue is empty.
func (co *coalescer[B]) drive() {
	for {
		co.mu.Lock()
		var group []*pending[B]
		bytes := 0
		n := 0
		for _, p := range co.queue {
			if p.gone {
				n++
				continue
			}
			if len(group) > 0 && bytes+p.size > maxGroupBytes {
				break
			}
			p.taken = true
			group = append(group, p)
			bytes += p.size
			n++
		}
		co.queue = co.queue[n:]
		if len(co.queue) == 0 {
			co.queue = nil
		}
		if len(group) == 0 {
			co.inflight--
			co.mu.Unlock()
			return
		}
		co.mu.Unlock()
		co.send(group)
	}
}

// send sends a group in one round trip and hands each member its result.
func (co *coalescer[B]) send(group []*pending[B]) {
	if len(group) == 1 {
		v, err := co.one(group[0].ctx, group[0].pb)
		group[0].done <- commitResult{v: v, err: err}
		return
	}
	ctx := context.Background() // no one caller's context may cut the others' calls
	pbs := make([]B, len(group))
	for i, p := range group {
		pbs[i] = p.pb
	}
	rs, err := co.many(ctx, pbs)
	if err == nil && len(rs) != len(group) {
		err = fmt.Errorf("%w: driver answered %d of %d %ss", driver.ErrUnavailable, len(rs), len(group), co.what)
	}
	for i, p := range group {
		if err != nil {
			p.done <- commitResult{err: err}
		} else {
			p.done <- rs[i]
		}
	}
}

func newCommits(c *Client) *coalescer[*storepb.Batch] {
	return &coalescer[*storepb.Batch]{what: "commit", unknown: "commit outcome unknown (read the thread's LastCommitID)",
		one: c.commitOne, many: c.commitMany}
}

// commit sends pb alone or with others, and waits for its result.
func (c *Client) commit(ctx context.Context, pb *storepb.Batch) (int64, error) {
	return c.co.do(ctx, pb)
}

// commitOne commits pb alone, under its caller's context.
func (c *Client) commitOne(ctx context.Context, pb *storepb.Batch) (int64, error) {
	r, err := c.c.Commit(ctx, &storepb.CommitRequest{Batch: pb}, callOpts...)
	if err != nil {
		return 0, c.fail(ctx, err)
	}
	return r.Version, nil
}

// commitMany commits pbs in one CommitMany.
func (c *Client) commitMany(ctx context.Context, pbs []*storepb.Batch) ([]commitResult, error) {
	r, err := c.c.CommitMany(ctx, &storepb.CommitManyRequest{Batches: pbs}, callOpts...)
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	rs := make([]commitResult, len(r.Results))
	for i, res := range r.Results {
		if res.Code != 0 {
			rs[i].err = errorFromFields(res.Code, res.Message, res.Reason)
		} else {
			rs[i].v = res.Version
		}
	}
	return rs, nil
}

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
// caller's goroutine.
const (
	maxInFlight   = 2
	maxGroupBytes = 32 << 20
)

type pendingCommit struct {
	ctx   context.Context
	pb    *storepb.Batch
	size  int
	taken bool // under coalescer.mu: sent, or about to be
	gone  bool // under coalescer.mu: its caller gave up before it was sent
	done  chan commitResult
}

type commitResult struct {
	v   int64
	err error
}

type coalescer struct {
	mu       sync.Mutex
	queue    []*pendingCommit
	inflight int
}

// commit sends pb alone or with others, and waits for its result.
func (c *Client) commit(ctx context.Context, pb *storepb.Batch) (int64, error) {
	p := &pendingCommit{ctx: ctx, pb: pb, size: proto.Size(pb), done: make(chan commitResult, 1)}
	if p.size > driver.MaxBatchBytes {
		// Alone: the driver refuses it, or the transport does.
		r, err := c.c.Commit(ctx, &storepb.CommitRequest{Batch: pb}, callOpts...)
		if err != nil {
			return 0, c.fail(ctx, err)
		}
		return r.Version, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err // never sent
	}
	co := &c.co
	co.mu.Lock()
	if len(co.queue) == 0 && co.inflight < maxInFlight {
		// Nothing waits: send it from this goroutine, sparing the hand-over
		// to a sender and back, which costs a wake-up each way.
		co.inflight++
		co.mu.Unlock()
		v, err := c.sendOne(p)
		co.mu.Lock()
		if len(co.queue) > 0 {
			go c.drive() // commits queued meanwhile take over this slot
		} else {
			co.inflight--
		}
		co.mu.Unlock()
		if err != nil && ctx.Err() != nil {
			return 0, fmt.Errorf("commit outcome unknown (read the thread's LastCommitID): %w", ctx.Err())
		}
		return v, err
	}
	co.queue = append(co.queue, p)
	if co.inflight < maxInFlight {
		co.inflight++
		go c.drive()
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
	return 0, fmt.Errorf("commit outcome unknown (read the thread's LastCommitID): %w", ctx.Err())
}

// drive sends queued commits until the queue is empty.
func (c *Client) drive() {
	co := &c.co
	for {
		co.mu.Lock()
		var group []*pendingCommit
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
		c.send(group)
	}
}

// sendOne commits p alone, under its caller's context.
func (c *Client) sendOne(p *pendingCommit) (int64, error) {
	r, err := c.c.Commit(p.ctx, &storepb.CommitRequest{Batch: p.pb}, callOpts...)
	if err != nil {
		return 0, c.fail(p.ctx, err)
	}
	return r.Version, nil
}

// send commits a group in one round trip and hands each member its result.
func (c *Client) send(group []*pendingCommit) {
	if len(group) == 1 {
		v, err := c.sendOne(group[0])
		group[0].done <- commitResult{v: v, err: err}
		return
	}
	ctx := context.Background() // no one caller's context may cut the others' commits
	req := &storepb.CommitManyRequest{Batches: make([]*storepb.Batch, len(group))}
	for i, p := range group {
		req.Batches[i] = p.pb
	}
	r, err := c.c.CommitMany(ctx, req, callOpts...)
	if err == nil && len(r.Results) != len(group) {
		err = fmt.Errorf("%w: driver answered %d of %d commits", driver.ErrUnavailable, len(r.Results), len(group))
	} else if err != nil {
		err = c.fail(ctx, err)
	}
	for i, p := range group {
		switch {
		case err != nil:
			p.done <- commitResult{err: err}
		case r.Results[i].Code != 0:
			res := r.Results[i]
			p.done <- commitResult{err: errorFromFields(res.Code, res.Message, res.Reason)}
		default:
			p.done <- commitResult{v: r.Results[i].Version}
		}
	}
}

package driverrpc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/abi/storepb"
)

// Client is the host side of the protocol: a driver.Driver that forwards
// every call over gRPC to a driver served by storedriver.Serve. Errors come
// back as the sentinels of package abi/driver (see FromStatus).
type Client struct {
	c storepb.StoreClient
	// conn is the gRPC connection; direct, when not nil, the direct
	// transport c goes through (see UseDirect).
	conn   grpc.ClientConnInterface
	direct *directConn
	closed atomic.Bool
	co     *coalescer[*storepb.Batch]
	steps  *coalescer[*storepb.StepBatch]
	// noStepsMany is set once the driver answers CommitStepsMany with
	// UNIMPLEMENTED (an older SDK): step commits then go one by one.
	noStepsMany atomic.Bool
	protocol    int // the version the handshake chose; 0 without one
}

var _ driver.Driver = (*Client)(nil)

// NewClient returns a client over conn.
func NewClient(conn grpc.ClientConnInterface) *Client {
	c := &Client{c: storepb.NewStoreClient(conn), conn: conn}
	c.co = newCommits(c)
	c.steps = newStepCommits(c)
	return c
}

// callOpts raise the message size limits of every call to MaxMessageSize.
var callOpts = []grpc.CallOption{grpc.MaxCallSendMsgSize(MaxMessageSize), grpc.MaxCallRecvMsgSize(MaxMessageSize)}

func (c *Client) check() error {
	if c.closed.Load() {
		return driver.ErrClosed
	}
	return nil
}

// fail converts the error of a call: the sentinel the driver sent, or
// ErrUnavailable when the driver could not be reached. A call canceled by
// the connection going away, not by its context, is ErrUnavailable too.
func (c *Client) fail(ctx context.Context, err error) error {
	err = FromStatus(err)
	if (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && ctx.Err() == nil {
		return fmt.Errorf("%w: %v", driver.ErrUnavailable, err)
	}
	return err
}

// Open sends the driver its configuration. It is called once, before any
// other call but Info.
func (c *Client) Open(ctx context.Context, config map[string]string) error {
	if err := c.check(); err != nil {
		return err
	}
	if _, err := c.c.Open(ctx, &storepb.OpenRequest{Config: config}, callOpts...); err != nil {
		return c.fail(ctx, err)
	}
	return nil
}

// Info implements driver.Driver.
func (c *Client) Info(ctx context.Context) (driver.Info, error) {
	if err := c.check(); err != nil {
		return driver.Info{}, err
	}
	r, err := c.c.Info(ctx, &storepb.InfoRequest{}, callOpts...)
	if err != nil {
		return driver.Info{}, c.fail(ctx, err)
	}
	return driver.Info{ProtocolVersion: min(int(r.ProtocolVersion), c.Handshake()), Name: r.Name, Version: r.Version, Durable: r.Durable, Leases: r.Leases}, nil
}

// LoadThread implements driver.Driver.
func (c *Client) LoadThread(ctx context.Context, threadID string) (driver.ThreadSnapshot, error) {
	if err := c.check(); err != nil {
		return driver.ThreadSnapshot{}, err
	}
	r, err := c.c.LoadThread(ctx, &storepb.LoadThreadRequest{ThreadId: threadID}, callOpts...)
	if err != nil {
		return driver.ThreadSnapshot{}, c.fail(ctx, err)
	}
	snap := driver.ThreadSnapshot{Thread: ThreadFromProto(r.Thread)}
	if len(r.Runs) > 0 {
		snap.Runs = RunsFromProto(r.Runs)
	}
	return snap, nil
}

// Commit implements driver.Driver. Concurrent commits share round trips
// (see coalesce.go); each still has its own outcome.
func (c *Client) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	return c.commit(ctx, BatchToProto(b))
}

// GetRuns implements driver.Driver.
func (c *Client) GetRuns(ctx context.Context, ids []string) ([]record.Run, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	r, err := c.c.GetRuns(ctx, &storepb.GetRunsRequest{Ids: ids}, callOpts...)
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	return RunsFromProto(r.Runs), nil
}

// GetIdempotency implements driver.Driver.
func (c *Client) GetIdempotency(ctx context.Context, threadID, key string) (record.Idempotency, error) {
	if err := c.check(); err != nil {
		return record.Idempotency{}, err
	}
	r, err := c.c.GetIdempotency(ctx, &storepb.GetIdempotencyRequest{ThreadId: threadID, Key: key}, callOpts...)
	if err != nil {
		return record.Idempotency{}, c.fail(ctx, err)
	}
	return IdempotencyFromProto(r.Record), nil
}

// ReadHistory implements driver.Driver.
func (c *Client) ReadHistory(ctx context.Context, threadID string, afterSeq int64, limit int) ([]record.Message, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	r, err := c.c.ReadHistory(ctx, &storepb.ReadHistoryRequest{ThreadId: threadID, AfterSeq: afterSeq, Limit: int64(limit)}, callOpts...)
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	return MessagesFromProto(r.Messages), nil
}

// ListRuns implements driver.Driver.
func (c *Client) ListRuns(ctx context.Context, state record.RunState, after string, limit int) ([]record.Run, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	r, err := c.c.ListRuns(ctx, &storepb.ListRunsRequest{State: string(state), After: after, Limit: int64(limit)}, callOpts...)
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	return RunsFromProto(r.Runs), nil
}

// Close implements driver.Driver: it closes the driver in the subprocess,
// and the direct transport's connections. Calls after Close return
// ErrClosed; closing twice is not an error.
func (c *Client) Close(ctx context.Context) error {
	if c.closed.Swap(true) {
		return nil
	}
	_, err := c.c.Close(ctx, &storepb.CloseRequest{}, callOpts...)
	c.Disconnect()
	if err != nil {
		return c.fail(ctx, err)
	}
	return nil
}

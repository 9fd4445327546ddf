package driverrpc

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/storepb"
)

// The server side of driver.Leaser: a driver that is not a Leaser answers
// these calls with UNIMPLEMENTED.

func (s *Server) leaser() (driver.Leaser, error) {
	d, err := s.driver()
	if err != nil {
		return nil, err
	}
	l, ok := d.(driver.Leaser)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this driver has no leases")
	}
	return l, nil
}

func ttlFromProto(ms int64) (time.Duration, error) {
	if ms <= 0 {
		return 0, fmt.Errorf("%w: lease ttl %d ms: must be positive", driver.ErrInvalidArgument, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// AcquireLease implements storepb.StoreServer.
func (s *Server) AcquireLease(ctx context.Context, req *storepb.AcquireLeaseRequest) (*storepb.LeaseResponse, error) {
	return s.leaseWithTTL(req.GetTtlMs(), func(l driver.Leaser, ttl time.Duration) (driver.Lease, error) {
		return l.AcquireLease(ctx, req.GetHolder(), ttl)
	})
}

// RenewLease implements storepb.StoreServer.
func (s *Server) RenewLease(ctx context.Context, req *storepb.RenewLeaseRequest) (*storepb.LeaseResponse, error) {
	return s.leaseWithTTL(req.GetTtlMs(), func(l driver.Leaser, ttl time.Duration) (driver.Lease, error) {
		return l.RenewLease(ctx, req.GetEpoch(), ttl)
	})
}

// leaseWithTTL checks ttlMs and answers with the lease op gives.
func (s *Server) leaseWithTTL(ttlMs int64, op func(driver.Leaser, time.Duration) (driver.Lease, error)) (*storepb.LeaseResponse, error) {
	l, err := s.leaser()
	if err != nil {
		return nil, err
	}
	ttl, err := ttlFromProto(ttlMs)
	if err != nil {
		return nil, ToStatus(err)
	}
	lease, err := op(l, ttl)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &storepb.LeaseResponse{Lease: LeaseToProto(lease)}, nil
}

// ReleaseLease implements storepb.StoreServer.
func (s *Server) ReleaseLease(ctx context.Context, req *storepb.ReleaseLeaseRequest) (*storepb.ReleaseLeaseResponse, error) {
	l, err := s.leaser()
	if err != nil {
		return nil, err
	}
	if err := l.ReleaseLease(ctx, req.GetEpoch()); err != nil {
		return nil, ToStatus(err)
	}
	return &storepb.ReleaseLeaseResponse{}, nil
}

// Leases implements storepb.StoreServer.
func (s *Server) Leases(ctx context.Context, _ *storepb.LeasesRequest) (*storepb.LeasesResponse, error) {
	l, err := s.leaser()
	if err != nil {
		return nil, err
	}
	ls, err := l.Leases(ctx)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &storepb.LeasesResponse{Leases: make([]*storepb.Lease, len(ls))}
	for i, x := range ls {
		out.Leases[i] = LeaseToProto(x)
	}
	return out, nil
}

// Notify implements storepb.StoreServer.
func (s *Server) Notify(ctx context.Context, req *storepb.Notice) (*storepb.NotifyResponse, error) {
	l, err := s.leaser()
	if err != nil {
		return nil, err
	}
	if req.GetThreadId() == "" {
		return nil, ToStatus(fmt.Errorf("%w: a notice without a thread id", driver.ErrInvalidArgument))
	}
	if err := l.Notify(ctx, NoticeFromProto(req)); err != nil {
		return nil, ToStatus(err)
	}
	return &storepb.NotifyResponse{}, nil
}

// Watch implements storepb.StoreServer.
func (s *Server) Watch(_ *storepb.WatchRequest, stream storepb.Store_WatchServer) error {
	l, err := s.leaser()
	if err != nil {
		return err
	}
	ctx := stream.Context()
	ch, err := l.Watch(ctx)
	if err != nil {
		return ToStatus(err)
	}
	// Tell the host the watch is in place, so that it knows every notice
	// sent from now on reaches it: an empty notice is the marker.
	if err := stream.Send(&storepb.Notice{}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case n, ok := <-ch:
			if !ok {
				return ToStatus(fmt.Errorf("%w: the driver ended the watch", driver.ErrUnavailable))
			}
			if err := stream.Send(NoticeToProto(n)); err != nil {
				return err
			}
		}
	}
}

// The client side.

var _ driver.Leaser = (*Client)(nil)

// AcquireLease implements driver.Leaser.
func (c *Client) AcquireLease(ctx context.Context, holder string, ttl time.Duration) (driver.Lease, error) {
	if err := c.check(); err != nil {
		return driver.Lease{}, err
	}
	r, err := c.c.AcquireLease(ctx, &storepb.AcquireLeaseRequest{Holder: holder, TtlMs: ttl.Milliseconds()}, callOpts...)
	if err != nil {
		return driver.Lease{}, c.fail(ctx, err)
	}
	return LeaseFromProto(r.GetLease()), nil
}

// RenewLease implements driver.Leaser.
func (c *Client) RenewLease(ctx context.Context, epoch int64, ttl time.Duration) (driver.Lease, error) {
	if err := c.check(); err != nil {
		return driver.Lease{}, err
	}
	r, err := c.c.RenewLease(ctx, &storepb.RenewLeaseRequest{Epoch: epoch, TtlMs: ttl.Milliseconds()}, callOpts...)
	if err != nil {
		return driver.Lease{}, c.fail(ctx, err)
	}
	return LeaseFromProto(r.GetLease()), nil
}

// ReleaseLease implements driver.Leaser.
func (c *Client) ReleaseLease(ctx context.Context, epoch int64) error {
	if err := c.check(); err != nil {
		return err
	}
	if _, err := c.c.ReleaseLease(ctx, &storepb.ReleaseLeaseRequest{Epoch: epoch}, callOpts...); err != nil {
		return c.fail(ctx, err)
	}
	return nil
}

// Leases implements driver.Leaser.
func (c *Client) Leases(ctx context.Context) ([]driver.Lease, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	r, err := c.c.Leases(ctx, &storepb.LeasesRequest{}, callOpts...)
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	out := make([]driver.Lease, len(r.GetLeases()))
	for i, l := range r.GetLeases() {
		out[i] = LeaseFromProto(l)
	}
	return out, nil
}

// Notify implements driver.Leaser.
func (c *Client) Notify(ctx context.Context, n driver.Notice) error {
	if err := c.check(); err != nil {
		return err
	}
	if _, err := c.c.Notify(ctx, NoticeToProto(n), callOpts...); err != nil {
		return c.fail(ctx, err)
	}
	return nil
}

// Watch implements driver.Leaser. It returns once the driver has the watch
// in place; the channel is closed when the stream ends.
func (c *Client) Watch(ctx context.Context) (<-chan driver.Notice, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	stream, err := c.c.Watch(ctx, &storepb.WatchRequest{}, callOpts...)
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	if _, err := stream.Recv(); err != nil { // the marker
		return nil, c.fail(ctx, err)
	}
	ch := make(chan driver.Notice, 256)
	go func() {
		defer close(ch)
		for {
			n, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case ch <- NoticeFromProto(n):
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

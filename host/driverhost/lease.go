package driverhost

import (
	"context"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/internal/driverrpc"
)

// The driver.Leaser calls, forwarded to the running instance like the
// others. Whether the driver has leases is its Info's to say.

var _ driver.Leaser = (*Driver)(nil)

// AcquireLease implements driver.Leaser.
func (d *Driver) AcquireLease(ctx context.Context, holder string, ttl time.Duration) (driver.Lease, error) {
	return call(ctx, d, "AcquireLease", func(ctx context.Context, c *driverrpc.Client) (driver.Lease, error) {
		return c.AcquireLease(ctx, holder, ttl)
	})
}

// RenewLease implements driver.Leaser.
func (d *Driver) RenewLease(ctx context.Context, epoch int64, ttl time.Duration) (driver.Lease, error) {
	return call(ctx, d, "RenewLease", func(ctx context.Context, c *driverrpc.Client) (driver.Lease, error) {
		return c.RenewLease(ctx, epoch, ttl)
	})
}

// ReleaseLease implements driver.Leaser.
func (d *Driver) ReleaseLease(ctx context.Context, epoch int64) error {
	_, err := call(ctx, d, "ReleaseLease", func(ctx context.Context, c *driverrpc.Client) (struct{}, error) {
		return struct{}{}, c.ReleaseLease(ctx, epoch)
	})
	return err
}

// Leases implements driver.Leaser.
func (d *Driver) Leases(ctx context.Context) ([]driver.Lease, error) {
	return call(ctx, d, "Leases", func(ctx context.Context, c *driverrpc.Client) ([]driver.Lease, error) { return c.Leases(ctx) })
}

// Notify implements driver.Leaser.
func (d *Driver) Notify(ctx context.Context, n driver.Notice) error {
	_, err := call(ctx, d, "Notify", func(ctx context.Context, c *driverrpc.Client) (struct{}, error) { return struct{}{}, c.Notify(ctx, n) })
	return err
}

// Watch implements driver.Leaser. The channel closes when the driver
// process ends, among other reasons: watch again.
func (d *Driver) Watch(ctx context.Context) (<-chan driver.Notice, error) {
	// Not through call: the stream lives as long as ctx, past CallTimeout.
	in, err := d.get(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := in.c.Watch(ctx)
	return ch, d.done(in, err)
}

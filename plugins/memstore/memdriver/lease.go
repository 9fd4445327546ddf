package memdriver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
)

// NewShared returns an empty driver with leases (driver.Leaser) by the
// clock now (time.Now when nil): several runtimes of one process may share
// it, as several hosts share a database. It is how the host's tests check
// the several-hosts rules without a database.
func NewShared(now func() time.Time) *Driver {
	d := New()
	if now == nil {
		now = time.Now
	}
	d.lease = &leases{now: now, live: map[int64]driver.Lease{}, watchers: map[chan driver.Notice]struct{}{}}
	return d
}

// leases is the lease table and the notice fan-out of a shared driver. Its
// lease table is guarded by the driver's lock, so that a commit checks its
// fence atomically with its writes.
type leases struct {
	now       func() time.Time
	lastEpoch int64
	live      map[int64]driver.Lease // by epoch; a lease is dead once now ≥ Expires

	wmu      sync.Mutex
	watchers map[chan driver.Notice]struct{}
}

var _ driver.Leaser = (*Driver)(nil)

func (d *Driver) leaser() (*leases, error) {
	if d.lease == nil {
		return nil, fmt.Errorf("%w: this memstore has no leases (memdriver.NewShared has)", driver.ErrInvalidArgument)
	}
	return d.lease, nil
}

// isLive reports whether epoch's lease is live; the driver's lock is held.
func (l *leases) isLive(epoch int64) bool {
	x, ok := l.live[epoch]
	if ok && !l.now().Before(x.Expires) {
		delete(l.live, epoch) // dead for good
		return false
	}
	return ok
}

// checkFence applies the rules of driver.Leaser to a batch on a thread whose
// stored owner is owner; the driver's lock is held.
func (d *Driver) checkFence(b driver.Batch, owner int64) error {
	if b.Fence == 0 {
		if b.Thread.Owner != owner {
			return fmt.Errorf("%w: an unfenced commit may not change thread %s's owner (%d → %d)", driver.ErrFenced, b.ThreadID, owner, b.Thread.Owner)
		}
		return nil
	}
	l, err := d.leaser()
	if err != nil {
		return err
	}
	if b.Thread.Owner != b.Fence && b.Thread.Owner != 0 {
		return fmt.Errorf("%w: a batch fenced by %d must make it the thread's owner or leave the thread unowned, not owned by %d", driver.ErrInvalidArgument, b.Fence, b.Thread.Owner)
	}
	if !l.isLive(b.Fence) {
		return fmt.Errorf("%w: lease %d is not live", driver.ErrFenced, b.Fence)
	}
	if owner != 0 && owner != b.Fence && l.isLive(owner) {
		return fmt.Errorf("%w: thread %s is owned by live lease %d", driver.ErrFenced, b.ThreadID, owner)
	}
	return nil
}

// AcquireLease implements driver.Leaser.
func (d *Driver) AcquireLease(ctx context.Context, holder string, ttl time.Duration) (driver.Lease, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(ctx); err != nil {
		return driver.Lease{}, err
	}
	l, err := d.leaser()
	if err != nil {
		return driver.Lease{}, err
	}
	if ttl <= 0 {
		return driver.Lease{}, fmt.Errorf("%w: lease ttl %v", driver.ErrInvalidArgument, ttl)
	}
	l.lastEpoch++
	now := l.now()
	x := driver.Lease{Epoch: l.lastEpoch, Holder: holder, Expires: now.Add(ttl), Now: now}
	l.live[x.Epoch] = x
	return x, nil
}

// RenewLease implements driver.Leaser.
func (d *Driver) RenewLease(ctx context.Context, epoch int64, ttl time.Duration) (driver.Lease, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(ctx); err != nil {
		return driver.Lease{}, err
	}
	l, err := d.leaser()
	if err != nil {
		return driver.Lease{}, err
	}
	if ttl <= 0 {
		return driver.Lease{}, fmt.Errorf("%w: lease ttl %v", driver.ErrInvalidArgument, ttl)
	}
	if !l.isLive(epoch) {
		return driver.Lease{}, fmt.Errorf("%w: lease %d is not live", driver.ErrFenced, epoch)
	}
	x := l.live[epoch]
	x.Now = l.now()
	x.Expires = x.Now.Add(ttl)
	l.live[epoch] = x
	return x, nil
}

// ReleaseLease implements driver.Leaser.
func (d *Driver) ReleaseLease(ctx context.Context, epoch int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(ctx); err != nil {
		return err
	}
	l, err := d.leaser()
	if err != nil {
		return err
	}
	delete(l.live, epoch)
	return nil
}

// Leases implements driver.Leaser.
func (d *Driver) Leases(ctx context.Context) ([]driver.Lease, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	l, err := d.leaser()
	if err != nil {
		return nil, err
	}
	var out []driver.Lease
	for e := int64(1); e <= l.lastEpoch; e++ {
		if l.isLive(e) {
			x := l.live[e]
			x.Now = l.now()
			out = append(out, x)
		}
	}
	return out, nil
}

// Notify implements driver.Leaser. A watcher that does not keep up loses
// notices (they are hints).
func (d *Driver) Notify(ctx context.Context, n driver.Notice) error {
	d.mu.RLock()
	err := d.check(ctx)
	d.mu.RUnlock()
	if err != nil {
		return err
	}
	l, err := d.leaser()
	if err != nil {
		return err
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	for ch := range l.watchers {
		select {
		case ch <- n:
		default:
		}
	}
	return nil
}

// Watch implements driver.Leaser.
func (d *Driver) Watch(ctx context.Context) (<-chan driver.Notice, error) {
	d.mu.RLock()
	err := d.check(ctx)
	d.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	l, err := d.leaser()
	if err != nil {
		return nil, err
	}
	ch := make(chan driver.Notice, 1024)
	l.wmu.Lock()
	l.watchers[ch] = struct{}{}
	l.wmu.Unlock()
	go func() {
		<-ctx.Done()
		l.wmu.Lock()
		delete(l.watchers, ch)
		close(ch)
		l.wmu.Unlock()
	}()
	return ch, nil
}

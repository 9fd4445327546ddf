package driver

import (
	"context"
	"errors"
	"time"

	"github.com/agenthost/agenthost/abi/record"
)

// Leaser is implemented by a driver whose data several hosts may use at
// once (Info.Leases reports it across the plugin boundary). It gives each
// host a lease, and makes every commit of a host that executes runs
// conditional on that lease: the fence.
//
// A lease is (Epoch, Holder, Expires). Epochs are unique within the store
// and never reused; a lease that has expired, or was released, stays dead:
// it cannot be renewed, and its holder must acquire a new one (a new epoch).
// Expiry is decided by the store's clock alone, never by a host's.
//
// A thread is owned by at most one epoch (record.Thread.Owner, 0: none). A
// fenced commit (Batch.Fence != 0) is applied only if, checked inside the
// commit's own transaction and by the store's clock:
//
//  1. the lease Fence is live, and
//  2. the thread's stored owner is Fence, none, or an epoch whose lease is
//     not live;
//
// and then the thread's owner becomes Batch.Thread.Owner, which is Fence, or
// 0: the lease gives the thread up, so that another live lease may take it
// (any other owner is ErrInvalidArgument). Otherwise nothing is written
// and Commit returns ErrFenced. An unfenced commit (Fence == 0) must leave
// the owner as stored: a batch whose Thread.Owner differs from it is
// refused with ErrFenced. The version check still applies to both, first:
// a stale version is ErrVersionConflict whatever the fence.
//
// Safety comes from the fence, not from the lease's expiry being observed
// by its holder: a host that paused past its expiry has its commits refused
// when it wakes, however late.
type Leaser interface {
	// AcquireLease creates a lease for holder (a label for operators) with
	// a new epoch, live for ttl from now by the store's clock.
	AcquireLease(ctx context.Context, holder string, ttl time.Duration) (Lease, error)

	// RenewLease extends a live lease to ttl from now. A lease that is not
	// live (expired, released or unknown) is ErrFenced: it never comes back.
	RenewLease(ctx context.Context, epoch int64, ttl time.Duration) (Lease, error)

	// ReleaseLease ends a lease now, so that other hosts may take over its
	// threads at once. Releasing a dead lease is not an error.
	ReleaseLease(ctx context.Context, epoch int64) error

	// Leases returns the live leases, by the store's clock, in epoch order.
	Leases(ctx context.Context) ([]Lease, error)

	// Notify sends a notice to the hosts watching the store. Delivery is a
	// hint: a notice may be lost (for example while a watcher reconnects),
	// so a host also polls.
	Notify(ctx context.Context, n Notice) error

	// Watch delivers notices sent after it was called, until ctx is done or
	// the channel is closed by the driver (a lost connection: watch again,
	// and poll for what was missed). Once leases were acquired through this
	// driver, it may leave out notices whose Owner is another epoch than
	// theirs (not 0), and notices sent through this driver: its watchers
	// are the hosts of those leases, which drop both (a host never acts on
	// a notice it sent).
	Watch(ctx context.Context) (<-chan Notice, error)
}

// Lease is one host's lease.
type Lease struct {
	Epoch  int64
	Holder string
	// Expires is the store's time at which the lease dies unless renewed.
	Expires time.Time
	// Now is the store's time when the lease was read or written, so a host
	// can tell how long it has left without trusting its own clock's offset.
	Now time.Time
}

// Notice is a hint between hosts: it wakes the host that owns a thread, or
// tells a host that runs it waits for have settled. The driver carries it
// as it is; only hosts read it. The one exception is its records (Thread,
// Runs, Messages): a driver whose channel limits a notice's size may
// deliver a notice without them, when they do not fit, but never without
// its other fields. A host that finds no records reads the store instead.
type Notice struct {
	ThreadID string
	// Owner is the epoch the notice is for (0: every host).
	Owner int64
	// Wake, in a notice to every host (Owner 0), is the epoch whose work
	// it announces (the thread's owner, or its home); the other hosts
	// only learn from it. 0 in a notice to one host.
	Wake int64
	// InterruptRunID asks the owner to stop this run, if it is executing it
	// (an input admitted with the interrupt decision on another host).
	InterruptRunID string
	// RunID is the run admitted on another host, whose host ReplyTo (an
	// epoch) has callers waiting for it and asks to be told when it settles.
	RunID   string
	ReplyTo int64
	// Settled lists runs that became terminal.
	Settled []string

	// The records the sender committed before it sent the notice, so that
	// the receiver need not read them back. Hints like the rest: a host
	// checks them against what it knows before it uses them.
	//
	// Thread is the thread's header as the sender's commit left it (the
	// zero Thread: not carried); Runs are then the thread's open runs at
	// that version, and Messages what the commit appended (an admitted
	// input). With Settled, Runs are the settled runs' terminal records
	// (and those of the runs that answered them), Messages their answers.
	Thread   record.Thread
	Runs     []record.Run
	Messages []record.Message
}

// ErrFenced reports a commit refused by the fence: the committing lease is
// not live, or another live lease owns the thread; or a lease that cannot be
// renewed. Nothing was written.
var ErrFenced = errors.New("fenced")

package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
)

// Who owns what (ADR 0122).
//
// A runtime always executes under a lease: the owner of every run it starts
// or recovers is its lease's epoch (Run.Owner, written "lease-N"), and a
// thread is owned by the epoch that last started or recovered a run on it
// (Thread.Owner, where the store records it). The leases come from the
// driver when it has them (driver.Leaser, Info.Leases): several hosts share
// the store, their commits are fenced by their epochs, and leases expire.
// Otherwise the host keeps a lease table of its own (localLeases): it is
// the only host, its lease lives until Close, and every other epoch — the
// runs of an earlier process — is dead. The runtime asks the same questions
// of either; only the fence and the upkeep differ (leaseKeeper.alone).

// leaseOwnerPrefix starts the owner name of a run executed under a lease.
const leaseOwnerPrefix = "lease-"

// leaseOwner is the owner name (record.Run.Owner) of the lease epoch.
func leaseOwner(epoch int64) string { return leaseOwnerPrefix + strconv.FormatInt(epoch, 10) }

// leaseEpoch returns the lease epoch of an owner name, 0 for a name that is
// no lease's (a run of a version that named owners otherwise, whose owner
// is therefore gone).
func leaseEpoch(owner string) int64 {
	s, ok := strings.CutPrefix(owner, leaseOwnerPrefix)
	if !ok {
		return 0
	}
	e, err := strconv.ParseInt(s, 10, 64)
	if err != nil || e <= 0 {
		return 0
	}
	return e
}

// leaseKeeper holds the lease this runtime executes under, and what it
// knows of the others. The runtime asks it who it is (owner), whether an
// owner is live, and which epoch fences a commit; it keeps the lease alive
// (keep) and gives it up at Close (release).
type leaseKeeper struct {
	l driver.Leaser
	// fenced: the leases are the store's, which fences commits by them,
	// expires them, and is shared with other hosts; false for localLeases.
	fenced bool
	ttl    time.Duration
	holder string
	log    *slog.Logger

	epoch atomic.Int64 // the lease this runtime executes under

	renewals atomic.Int64
	lost     atomic.Int64

	mu   sync.Mutex
	live map[int64]bool // the live leases, as of the last refresh
	// epochs are the live leases' epochs, sorted (rendezvous hashing).
	epochs []int64
	// died: when a refresh first found each lease that an earlier one had
	// seen live to be dead (on this host's clock), for the takeover's grace.
	died map[int64]time.Time
	now  func() time.Time
}

// newLeaseKeeper keeps a lease from the driver's leases if it has them,
// else from a lease table of this process whose epochs are drawn from
// newID (so they differ from every earlier process's).
func newLeaseKeeper(d driver.Driver, info driver.Info, cfg Config) *leaseKeeper {
	holder := cfg.HostName
	if holder == "" {
		h, _ := os.Hostname()
		holder = fmt.Sprintf("%s/%d", h, os.Getpid())
	}
	k := &leaseKeeper{ttl: cfg.LeaseTTL, holder: holder, log: cfg.Logger, live: map[int64]bool{}, died: map[int64]time.Time{}, now: cfg.Now}
	if l, ok := d.(driver.Leaser); ok && info.Leases {
		k.l, k.fenced = l, true
	} else {
		k.l = newLocalLeases(cfg.NewID, cfg.Now)
	}
	return k
}

// owner is the owner name of the runs this runtime starts now.
func (k *leaseKeeper) owner() string { return leaseOwner(k.epoch.Load()) }

// isLive reports whether epoch's lease was live at the last refresh; this
// runtime's own lease always is.
func (k *leaseKeeper) isLive(epoch int64) bool {
	if epoch == 0 {
		return false
	}
	if epoch == k.epoch.Load() {
		return true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.live[epoch]
}

// others reports how many live leases other than this runtime's there
// were at the last refresh.
func (k *leaseKeeper) others() int {
	me := k.epoch.Load()
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for e, live := range k.live {
		if live && e != me {
			n++
		}
	}
	return n
}

// ownerLive reports whether the owner of a run still executes it.
func (k *leaseKeeper) ownerLive(owner string) bool { return k.isLive(leaseEpoch(owner)) }

// alone reports whether this host is the only one on its store (its lease
// table is its own): it owns every thread, no lease of it expires, and no
// other host sends it notices or leaves it work.
func (k *leaseKeeper) alone() bool { return !k.fenced }

// fence is the epoch the store fences the commits of a run owned by owner
// with: its lease's when the store keeps the leases, none otherwise (this
// process is then the only one that commits).
func (k *leaseKeeper) fence(owner string) int64 {
	if !k.fenced {
		return 0
	}
	return leaseEpoch(owner)
}

// refresh reads the live leases.
func (k *leaseKeeper) refresh(ctx context.Context) error {
	ls, err := k.l.Leases(ctx)
	if err != nil {
		return err
	}
	live := make(map[int64]bool, len(ls))
	epochs := make([]int64, 0, len(ls))
	for _, x := range ls {
		live[x.Epoch] = true
		epochs = append(epochs, x.Epoch)
	}
	slices.Sort(epochs)
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	for e := range k.live {
		if !live[e] {
			k.died[e] = now
		}
	}
	for e, t := range k.died {
		if now.Sub(t) > time.Hour {
			delete(k.died, e) // long past any grace
		}
	}
	k.live, k.epochs = live, epochs
	return nil
}

// deadFor reports how long ago a refresh first found the lease epoch dead,
// and false while it is live. A lease never seen live has been dead for as
// long as anyone can tell.
func (k *leaseKeeper) deadFor(epoch int64) (time.Duration, bool) {
	if k.isLive(epoch) {
		return 0, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.died[epoch]
	if !ok {
		return math.MaxInt64, true
	}
	return k.now().Sub(t), true
}

// home is the live lease a thread belongs with (ADR 0143): of the live
// epochs as of the last refresh, and this runtime's own, the one whose
// score for the thread is highest (rendezvous hashing). When a lease joins
// or dies, only the threads whose highest score was or becomes its change
// home; the others stay where they are.
func (k *leaseKeeper) home(threadID string) int64 {
	me := k.epoch.Load()
	if !k.fenced {
		return me
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return homeOf(threadID, me, k.epochs)
}

// homeOf is the epoch, of me and others, whose rendezvous score for the
// thread is highest; a tie goes to the larger epoch.
func homeOf(threadID string, me int64, others []int64) int64 {
	h := fnv.New64a()
	h.Write([]byte(threadID))
	t := h.Sum64()
	best, bestScore := me, rendezvous(t, me)
	for _, e := range others {
		if sc := rendezvous(t, e); sc > bestScore || (sc == bestScore && e > best) {
			best, bestScore = e, sc
		}
	}
	return best
}

// rendezvous scores the pair of a thread's hash and a lease epoch: the
// splitmix64 finalizer of their mix, so that scores of one thread over
// consecutive epochs are unrelated.
func rendezvous(thread uint64, epoch int64) uint64 {
	z := thread ^ (uint64(epoch) * 0x9e3779b97f4a7c15)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// acquire takes a new lease, retrying until it succeeds or ctx is done.
func (k *leaseKeeper) acquire(ctx context.Context) (driver.Lease, error) {
	backoff := 100 * time.Millisecond
	for {
		x, err := k.l.AcquireLease(ctx, k.holder, k.ttl)
		if err == nil {
			k.epoch.Store(x.Epoch)
			return x, nil
		}
		if !errors.Is(err, driver.ErrUnavailable) {
			return driver.Lease{}, fmt.Errorf("host: acquiring a lease: %w", err)
		}
		k.log.Warn("acquiring a lease failed; retrying", "err", err, "backoff", backoff)
		if !sleepCtx(ctx, backoff) {
			return driver.Lease{}, fmt.Errorf("host: acquiring a lease: %w", cmpErr(ctx.Err(), err))
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// keep renews the lease every third of its TTL until ctx is done. A lease
// the store says is dead is lost for good: keep calls lost with its owner
// name (the runs executing under it must be abandoned: their commits would
// be refused), takes a new lease, and calls renewed.
func (k *leaseKeeper) keep(ctx context.Context, lost func(owner string), renewed func()) {
	t := time.NewTicker(k.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		epoch := k.epoch.Load()
		_, err := k.l.RenewLease(ctx, epoch, k.ttl)
		switch {
		case err == nil:
			k.renewals.Add(1)
			continue
		case ctx.Err() != nil:
			return
		case !errors.Is(err, driver.ErrFenced):
			k.log.Warn("renewing the lease failed; retrying", "epoch", epoch, "err", err)
			continue
		}
		k.lost.Add(1)
		k.log.Error("the lease was lost (this host paused or could not renew it in time); abandoning its runs and taking a new lease", "epoch", epoch, "err", err)
		lost(leaseOwner(epoch))
		x, err := k.acquire(ctx)
		if err != nil {
			if ctx.Err() == nil {
				k.log.Error("taking a new lease failed; this host executes nothing until it is restarted", "err", err)
			}
			return
		}
		k.log.Info("took a new lease", "epoch", x.Epoch, "expires", x.Expires)
		renewed()
	}
}

// release ends the lease at Close, so that other hosts take over this
// host's threads at once.
func (k *leaseKeeper) release() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.l.ReleaseLease(ctx, k.epoch.Load()); err != nil {
		return fmt.Errorf("host: releasing the lease: %w", err)
	}
	return nil
}

// localLeases is the lease table of a host alone on its store (a driver
// without leases). Its leases live until released: no other host could take
// over their threads. An epoch is derived from a fresh id, so it differs
// from those of earlier processes on the same store, whose runs are then
// recovered. It carries no notices: there is no other host to send them.
type localLeases struct {
	newID func(prefix string) string
	now   func() time.Time

	mu   sync.Mutex
	live map[int64]driver.Lease
}

var _ driver.Leaser = (*localLeases)(nil)

func newLocalLeases(newID func(string) string, now func() time.Time) *localLeases {
	return &localLeases{newID: newID, now: now, live: map[int64]driver.Lease{}}
}

// forever stands for the expiry of a lease that never expires.
var forever = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

func (l *localLeases) AcquireLease(_ context.Context, holder string, _ time.Duration) (driver.Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var epoch int64
	for epoch == 0 || l.live[epoch].Epoch != 0 {
		h := fnv.New64a()
		h.Write([]byte(l.newID("epoch")))
		epoch = int64(h.Sum64() & math.MaxInt64)
	}
	x := driver.Lease{Epoch: epoch, Holder: holder, Expires: forever, Now: l.now()}
	l.live[epoch] = x
	return x, nil
}

func (l *localLeases) RenewLease(_ context.Context, epoch int64, _ time.Duration) (driver.Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	x, ok := l.live[epoch]
	if !ok {
		return driver.Lease{}, fmt.Errorf("%w: lease %d is not live", driver.ErrFenced, epoch)
	}
	x.Now = l.now()
	return x, nil
}

func (l *localLeases) ReleaseLease(_ context.Context, epoch int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.live, epoch)
	return nil
}

func (l *localLeases) Leases(context.Context) ([]driver.Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]driver.Lease, 0, len(l.live))
	for _, x := range l.live {
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b driver.Lease) int { return cmp.Compare(a.Epoch, b.Epoch) })
	return out, nil
}

func (l *localLeases) Notify(context.Context, driver.Notice) error { return nil }

func (l *localLeases) Watch(ctx context.Context) (<-chan driver.Notice, error) {
	ch := make(chan driver.Notice)
	context.AfterFunc(ctx, func() { close(ch) })
	return ch, nil
}

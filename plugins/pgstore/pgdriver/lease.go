package pgdriver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

// Leases live in the table leases, by the database's clock
// (clock_timestamp(): the time of the statement's work, not of its
// transaction's start). A lease is live while expires_at is after the
// clock. Release sets expires_at to the clock and marks the lease released,
// so that no renewal in flight brings it back; renew_lease (schema.go)
// locks the lease's row before it reads the clock, so a renewal is ordered
// after any commit that found the lease dead and took over its threads.
// Dead leases are deleted a day after they died (epochs are never reused:
// they come from a sequence).

func ttlMicros(ttl time.Duration) (int64, error) {
	if ttl <= 0 {
		return 0, fmt.Errorf("%w: lease ttl %v must be positive", driver.ErrInvalidArgument, ttl)
	}
	return ttl.Microseconds(), nil
}

// AcquireLease implements driver.Leaser. Retrying it after a failure may
// leave a lease no one holds; it expires.
func (d *Driver) AcquireLease(ctx context.Context, holder string, ttl time.Duration) (driver.Lease, error) {
	us, err := ttlMicros(ttl)
	if err != nil {
		return driver.Lease{}, err
	}
	if !storable(holder) {
		return driver.Lease{}, fmt.Errorf("%w: holder %q: UTF-8 without NUL bytes", driver.ErrInvalidArgument, holder)
	}
	var l driver.Lease
	err = d.read(ctx, func(ctx context.Context) error {
		return d.pool.QueryRow(ctx, d.sql.acquire, holder, us).Scan(&l.Epoch, &l.Holder, &l.Expires, &l.Now)
	})
	if err != nil {
		return driver.Lease{}, err
	}
	d.hold(l.Epoch)
	if l.Epoch%64 == 0 { // now and then
		_, _ = d.pool.Exec(ctx, d.sql.gcLeases)
	}
	return l, nil
}

// hold adds epoch to the leases acquired through this driver. The watches
// in place listen on the channels of the leases held before: they end, and
// their hosts watch again (driver.Leaser.Watch), on the new lease's
// channel too.
func (d *Driver) hold(epoch int64) {
	for {
		old := d.held.Load()
		m := map[int64]bool{epoch: true}
		if old != nil {
			for e := range *old {
				m[e] = true
			}
		}
		if d.held.CompareAndSwap(old, &m) {
			break
		}
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	for w := range d.watchers {
		w.stop()
	}
}

// heldEpochs are the epochs of the leases acquired through this driver.
func (d *Driver) heldEpochs() []int64 { return heldEpochs(d.held.Load()) }

func heldEpochs(m *map[int64]bool) []int64 {
	if m == nil {
		return nil
	}
	out := make([]int64, 0, len(*m))
	for e := range *m {
		out = append(out, e)
	}
	slices.Sort(out)
	return out
}

// wants reports whether a watch of this driver delivers a notice addressed
// to owner: one for every host (0), or for a lease acquired through this
// driver, or any while no lease was (a watcher that holds none, such as an
// operator's tool, sees every notice).
func (d *Driver) wants(owner int64) bool {
	m := d.held.Load()
	return owner == 0 || m == nil || (*m)[owner]
}

// RenewLease implements driver.Leaser.
func (d *Driver) RenewLease(ctx context.Context, epoch int64, ttl time.Duration) (driver.Lease, error) {
	us, err := ttlMicros(ttl)
	if err != nil {
		return driver.Lease{}, err
	}
	l := driver.Lease{Epoch: epoch}
	err = d.read(ctx, func(ctx context.Context) error {
		return d.pool.QueryRow(ctx, d.sql.renew, epoch, us).Scan(&l.Holder, &l.Expires, &l.Now)
	})
	if err != nil {
		return driver.Lease{}, err
	}
	return l, nil
}

// ReleaseLease implements driver.Leaser.
func (d *Driver) ReleaseLease(ctx context.Context, epoch int64) error {
	return d.read(ctx, func(ctx context.Context) error {
		_, err := d.pool.Exec(ctx, d.sql.release, epoch)
		return err
	})
}

// Leases implements driver.Leaser.
func (d *Driver) Leases(ctx context.Context) ([]driver.Lease, error) {
	var out []driver.Lease
	err := d.read(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := d.pool.Query(ctx, d.sql.leases)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var l driver.Lease
			if err := rows.Scan(&l.Epoch, &l.Holder, &l.Expires, &l.Now); err != nil {
				return err
			}
			out = append(out, l)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// notice is a Notice as the payload of a NOTIFY.
type notice struct {
	Thread    string   `json:"thread"`
	Owner     int64    `json:"owner,omitempty"`
	Wake      int64    `json:"wake,omitempty"`
	Interrupt string   `json:"interrupt_run,omitempty"`
	Run       string   `json:"run,omitempty"`
	ReplyTo   int64    `json:"reply_to,omitempty"`
	Settled   []string `json:"settled,omitempty"`
	// The notice's records, when they fit (see payloads).
	Header   *record.Thread   `json:"header,omitempty"`
	Runs     []record.Run     `json:"runs,omitempty"`
	Messages []record.Message `json:"messages,omitempty"`
}

func (n notice) toDriver() driver.Notice {
	out := driver.Notice{ThreadID: n.Thread, Owner: n.Owner, Wake: n.Wake, InterruptRunID: n.Interrupt, RunID: n.Run, ReplyTo: n.ReplyTo, Settled: n.Settled,
		Runs: n.Runs, Messages: n.Messages}
	if n.Header != nil {
		out.Thread = *n.Header
	}
	return out
}

// maxNoticeBytes is PostgreSQL's limit on a NOTIFY payload (8000 bytes),
// less a margin.
const maxNoticeBytes = 7900

// payloads encodes n as NOTIFY payloads: one, or, when its Settled list
// makes it too long, several, each with a part of the list. Its records
// (driver.Notice) go only in a notice that fits in one payload with them:
// otherwise they are left out, and the receiver reads them from the store.
func payloads(n driver.Notice) ([]string, error) {
	base := notice{Thread: n.ThreadID, Owner: n.Owner, Wake: n.Wake, Interrupt: n.InterruptRunID, Run: n.RunID, ReplyTo: n.ReplyTo}
	enc := func(x notice) (string, error) {
		b, err := json.Marshal(x)
		if err != nil {
			return "", fmt.Errorf("%w: %v", driver.ErrInvalidArgument, err)
		}
		if !storable(string(b)) {
			return "", fmt.Errorf("%w: a notice holding a NUL byte", driver.ErrInvalidArgument)
		}
		return string(b), nil
	}
	full := base
	full.Settled = n.Settled
	if n.Thread.ID != "" || len(n.Runs) > 0 || len(n.Messages) > 0 {
		with := full
		if n.Thread.ID != "" {
			with.Header = &n.Thread
		}
		with.Runs, with.Messages = n.Runs, n.Messages
		if p, err := enc(with); err == nil && len(p) <= maxNoticeBytes {
			return []string{p}, nil
		}
	}
	p, err := enc(full)
	if err != nil || len(p) <= maxNoticeBytes {
		return []string{p}, err
	}
	var out []string
	part := base
	for i := 0; i < len(n.Settled); {
		part.Settled = append(part.Settled[:0:0], n.Settled[i])
		p, err := enc(part)
		if err != nil {
			return nil, err
		}
		if len(p) > maxNoticeBytes {
			return nil, fmt.Errorf("%w: a notice of %d bytes (the limit is %d)", driver.ErrInvalidArgument, len(p), maxNoticeBytes)
		}
		for i++; i < len(n.Settled); i++ {
			next := append(part.Settled, n.Settled[i])
			x := base
			x.Settled = next
			q, err := enc(x)
			if err != nil {
				return nil, err
			}
			if len(q) > maxNoticeBytes {
				break
			}
			part.Settled, p = next, q
		}
		out = append(out, p)
	}
	if len(out) == 0 { // too large without a Settled list to split
		return nil, fmt.Errorf("%w: a notice of %d bytes (the limit is %d)", driver.ErrInvalidArgument, len(p), maxNoticeBytes)
	}
	return out, nil
}

// Notices travel on channels (LISTEN/NOTIFY). Each goes on the schema's
// channel, where watchers that acquired no lease listen (an operator's
// tool: they see every notice), and on the channels of the leases it is
// for: Owner's, or, for every host (Owner 0), each live lease's but those
// acquired through the sending driver (its host never acts on its own
// notice). A watch of a driver through which leases were acquired listens
// on their channels alone. So a notice wakes only the hosts it is for: a
// driver woken for a notice it would drop spends about as much as for one
// it delivers (docs/benchmark-notes.md), and with one channel for all
// each of n hosts' drivers was woken by every host's notices.

// epochChannel is the notice channel of the lease epoch.
func (d *Driver) epochChannel(epoch int64) string {
	return d.sql.epochChannel + strconv.FormatInt(epoch, 10)
}

// Notify implements driver.Leaser: pg_notify on the channels above, in one
// statement. A notice too long for one NOTIFY goes as several, its Settled
// list split among them.
func (d *Driver) Notify(ctx context.Context, n driver.Notice) error {
	if n.ThreadID == "" {
		return fmt.Errorf("%w: a notice without a thread id", driver.ErrInvalidArgument)
	}
	ps, err := payloads(n)
	if err != nil {
		return err
	}
	own := d.heldEpochs()
	if own == nil {
		own = []int64{}
	}
	return d.read(ctx, func(ctx context.Context) error {
		_, err := d.pool.Exec(ctx, d.sql.notify, d.sql.channel, ps, d.sql.epochChannel, n.Owner, own)
		return err
	})
}

// watcher is one Watch: a connection of its own that LISTENs.
type watcher struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (w *watcher) stop() { w.cancel() }

// Watch implements driver.Leaser. It returns once its connection LISTENs,
// so every notice sent afterwards reaches it. The channel is closed when
// ctx ends, the driver closes, or the connection fails (reconnecting is
// the caller's: watch again, and poll for what was missed), and when a
// lease is acquired through the driver (the watch then listens on its
// channel too). A watcher that does not keep up loses notices: they are
// hints. Once a lease was acquired through this driver, it listens only on
// the channels of the leases acquired through it (see Notify), and leaves
// out notices addressed to other epochs (driver.Leaser.Watch): every host
// has a driver of its own, and the host would drop them.
func (d *Driver) Watch(ctx context.Context) (<-chan driver.Notice, error) {
	pc, err := d.cfg.poolConfig()
	if err != nil {
		return nil, err
	}
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
	var conn *pgx.Conn
	held := d.held.Load() // the leases whose channels it listens on
	err = d.retry(ctx, transient, func(ctx context.Context) error {
		c, err := pgx.ConnectConfig(ctx, pc.ConnConfig)
		if err != nil {
			return err
		}
		listen := []string{d.sql.channel}
		if own := heldEpochs(held); own != nil {
			listen = listen[:0]
			for _, e := range own {
				listen = append(listen, d.epochChannel(e))
			}
		}
		for _, ch := range listen {
			if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
				c.Close(context.Background())
				return err
			}
		}
		conn = c
		return nil
	})
	d.leave()
	if err != nil {
		if ctx.Err() == nil && connectionLost(err) {
			return nil, connectError(pc.ConnConfig, d.cfg.URL, err)
		}
		return nil, mapOpError(ctx, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &watcher{cancel: cancel, done: make(chan struct{})}
	ch := make(chan driver.Notice, 1024)
	d.mu.RLock() // Close takes it exclusively
	if d.closed {
		d.mu.RUnlock()
		cancel()
		conn.Close(context.Background())
		return nil, driver.ErrClosed
	}
	d.wmu.Lock()
	d.watchers[w] = struct{}{}
	if d.held.Load() != held {
		w.stop() // a lease acquired meanwhile (hold): watch again
	}
	d.wmu.Unlock()
	d.mu.RUnlock()
	go func() {
		defer close(w.done)
		defer close(ch)
		defer conn.Close(context.Background())
		defer func() {
			d.wmu.Lock()
			delete(d.watchers, w) // nil map after Close: a no-op
			d.wmu.Unlock()
		}()
		for {
			nt, err := conn.WaitForNotification(wctx)
			if err != nil {
				return // ctx ended, or the connection failed
			}
			var n notice
			if json.Unmarshal([]byte(nt.Payload), &n) != nil || n.Thread == "" {
				continue // not ours
			}
			if !d.wants(n.Owner) {
				continue // for another host: it would only drop it
			}
			select {
			case ch <- n.toDriver():
			default: // a hint, dropped
			}
		}
	}()
	return ch, nil
}

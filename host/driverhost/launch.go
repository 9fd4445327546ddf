package driverhost

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/internal/driverrpc"
)

// Config says which driver binary to launch and how.
type Config struct {
	// Path is the driver binary.
	Path string
	// Args are its arguments.
	Args []string
	// Env is its whole environment: the host's is not passed on
	// (go-plugin SkipHostEnv), only this and go-plugin's own variables.
	Env []string
	// DriverConfig is sent to the driver at open (see the driver's docs).
	DriverConfig map[string]string
	// Logger receives the driver's logs. Default: slog.Default().
	Logger *slog.Logger
	// StartTimeout bounds the start of the process. Default 30s.
	StartTimeout time.Duration
	// RestartBackoff is the least time between two failed starts. Default 1s.
	RestartBackoff time.Duration
	// Checksum, when set, is the SHA-256 the binary must have, at launch and
	// at every restart (go-plugin SecureConfig); a binary that differs is
	// refused. Unset, the binary's checksum is taken at each start.
	Checksum []byte
	// CallTimeout bounds every call to the driver but Watch's stream (and
	// Open and Close, bounded by StartTimeout and their context). A call
	// that it ends, its caller's context still live, finds the driver
	// stalled: the process is killed and relaunched as after a crash.
	// Default DefaultCallTimeout.
	CallTimeout time.Duration
	// HeartbeatInterval is how often the driver is asked for its Info when
	// no call is made, so that a stalled driver is found without traffic.
	// Default 5s; negative: no heartbeat.
	HeartbeatInterval time.Duration

	// Transport is how the host's calls reach the driver: TransportAuto
	// (""), the direct transport when the driver offers it (drivers
	// served by this module's SDK do) and gRPC when it does not; or
	// TransportGRPC, gRPC always. Unset, the TransportEnv variable of the
	// host's environment decides. Watch's stream is on gRPC either way.
	// See docs/adr/0151.
	Transport string

	// protocolVersions overrides the protocol versions offered (tests).
	protocolVersions []int
}

// Driver is a store driver running in a subprocess. It implements
// driver.Driver and restarts the subprocess when it dies. It is safe for
// concurrent use.
type Driver struct {
	cfg Config
	log *slog.Logger

	mu       sync.RWMutex
	cur      *instance // nil after a failed restart
	closed   bool
	lastFail time.Time
	starts   int

	// proc is the latest subprocess started, for Kill, which must not wait
	// for mu (Close holds it while the driver closes).
	proc   atomic.Pointer[os.Process]
	killed atomic.Bool

	// beforePublish, when set (by tests), runs in start just before the
	// new subprocess is published to Kill.
	beforePublish func()

	// protocol is the store protocol version the first process spoke;
	// a restarted process must speak the same (see start).
	protocol int
	// durable is the first instance's Info.Durable: a driver that is not
	// durable is not relaunched (ErrLost).
	durable  bool
	gen      atomic.Uint64 // Generation
	lost     chan struct{} // closed when a driver that is not durable ended
	lostOnce sync.Once
	stalls   atomic.Int64

	beatCtx  context.Context // canceled by Close: ends the heartbeat
	stopBeat context.CancelFunc
	beat     sync.WaitGroup
}

// The values of Config.Transport.
const (
	TransportAuto = ""
	TransportGRPC = "grpc"
)

// TransportEnv is the environment variable that sets Config.Transport
// when the config leaves it unset: "grpc" keeps every call on gRPC.
const TransportEnv = "AGENTHOST_DRIVER_TRANSPORT"

// DefaultCallTimeout is the default of Config.CallTimeout.
const DefaultCallTimeout = 15 * time.Second

// ErrLost: the driver, whose Info says it is not durable, ended (crashed,
// was killed, or stalled and was killed); the data it held ended with it.
// It is not relaunched: a fresh, empty store under a host that still holds
// the old one's runs would accept inputs it can never answer. Calls fail
// with it, wrapped with driver.ErrUnavailable. See Lost.
var ErrLost = errors.New("the store driver is not durable and its process ended: the data it held is gone; it is not relaunched")

// ErrKilled is the error of a Close that did not finish by its context's
// deadline: the driver process was killed (SIGKILL) instead of closing.
var ErrKilled = errors.New("the driver did not close in time and was killed")

// killWait bounds the wait for a killed process to be reaped.
const killWait = 10 * time.Second

// instance is one running subprocess.
type instance struct {
	proc    *os.Process // the subprocess, for Kill
	pc      *plugin.Client
	rpc     plugin.ClientProtocol
	c       *driverrpc.Client
	suspect chan struct{} // closed when a call found the driver unreachable
	// protocol is the store protocol version the process speaks.
	protocol int
	once     sync.Once
	stalled  atomic.Bool // a call passed CallTimeout: the process was killed
}

func (in *instance) markSuspect() { in.once.Do(func() { close(in.suspect) }) }

func (in *instance) isSuspect() bool {
	select {
	case <-in.suspect:
		return true
	default:
		return false
	}
}

var _ driver.Driver = (*Driver)(nil)

// Launch starts the driver binary, opens the driver with cfg.DriverConfig,
// and returns it. A failure to start, a checksum mismatch, a handshake
// refused (e.g. no common protocol version) or a refused config is an
// error, and leaves no process behind.
//
// The host offers every store protocol version from
// driver.OldestProtocolVersion to driver.ProtocolVersion; Protocol says
// which the driver speaks, and Store returns the value the host should use
// as its driver.Driver: one with driver.StepStore and driver.ThreadLister
// exactly when the driver speaks version 2.
func Launch(ctx context.Context, cfg Config) (*Driver, error) {
	if cfg.Path == "" {
		return nil, fmt.Errorf("%w: no driver binary", driver.ErrInvalidArgument)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.RestartBackoff <= 0 {
		cfg.RestartBackoff = time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 5 * time.Second
	}
	if len(cfg.protocolVersions) == 0 {
		cfg.protocolVersions = driverrpc.Versions()
	}
	if cfg.Transport == TransportAuto {
		cfg.Transport = os.Getenv(TransportEnv)
	}
	switch cfg.Transport {
	case TransportAuto, "direct", TransportGRPC:
	default:
		return nil, fmt.Errorf("%w: driver transport %q: want %q, or empty for the direct transport when the driver offers it", driver.ErrInvalidArgument, cfg.Transport, TransportGRPC)
	}
	d := &Driver{cfg: cfg, log: cfg.Logger.With("driver", cfg.Path), lost: make(chan struct{})}
	d.beatCtx, d.stopBeat = context.WithCancel(context.Background())
	in, err := d.start(ctx)
	if err != nil {
		d.stopBeat()
		return nil, err
	}
	d.cur = in
	d.protocol = in.protocol
	if cfg.HeartbeatInterval > 0 {
		d.beat.Add(1)
		go d.heartbeat()
	}
	return d, nil
}

// Protocol returns the store protocol version the driver speaks: the
// lower of the one the handshake chose and the one its Info reports.
func (d *Driver) Protocol() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.protocol
}

// Store returns the driver as the host should use it: d itself for a
// driver speaking store protocol 1, and a *StepDriver, which adds
// driver.StepStore and driver.ThreadLister, for one speaking 2. The host
// finds the step records by type assertion, and on a version 1 driver
// restarts recovered runs from their first step and takes no input by
// injection.
func (d *Driver) Store() driver.Driver {
	if d.Protocol() >= 2 {
		return &StepDriver{d}
	}
	return d
}

// Of returns the *Driver a value Store returned wraps, or nil when dd is
// not one.
func Of(dd driver.Driver) *Driver {
	switch x := dd.(type) {
	case *Driver:
		return x
	case *StepDriver:
		return x.Driver
	}
	return nil
}

// checksum returns the SHA-256 of the binary at path.
func checksum(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// start launches one subprocess and opens the driver in it.
func (d *Driver) start(ctx context.Context) (*instance, error) {
	sum := d.cfg.Checksum
	if len(sum) == 0 {
		var err error
		if sum, err = checksum(d.cfg.Path); err != nil {
			return nil, fmt.Errorf("driver binary: %w", err)
		}
	}
	cmd := exec.Command(d.cfg.Path, d.cfg.Args...)
	cmd.Env = append([]string{}, d.cfg.Env...)
	sets := driverrpc.PluginSetsFor(nil, d.cfg.protocolVersions...)
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  driverrpc.Handshake,
		VersionedPlugins: sets,
		Cmd:              cmd,
		// A fresh hash per SecureConfig: Check writes into it.
		SecureConfig:     &plugin.SecureConfig{Checksum: sum, Hash: sha256.New()},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		SkipHostEnv:      true,
		StartTimeout:     d.cfg.StartTimeout,
		Logger:           hclogToSlog(d.log, "driver"),
		Managed:          false,
	})
	fail := func(err error) (*instance, error) {
		pc.Kill()
		return nil, err
	}
	rpc, err := pc.Client()
	if err != nil {
		return fail(fmt.Errorf("starting driver %s: %w", d.cfg.Path, err))
	}
	if v := pc.NegotiatedVersion(); v < driver.OldestProtocolVersion || v > driver.ProtocolVersion {
		return fail(fmt.Errorf("driver %s speaks store protocol version %d, not one of %d to %d", d.cfg.Path, v, driver.OldestProtocolVersion, driver.ProtocolVersion))
	}
	raw, err := rpc.Dispense(driverrpc.PluginName)
	if err != nil {
		return fail(fmt.Errorf("driver %s: %w", d.cfg.Path, err))
	}
	c, ok := raw.(*driverrpc.Client)
	if !ok {
		return fail(fmt.Errorf("driver %s: unexpected plugin type %T", d.cfg.Path, raw))
	}
	if d.cfg.Transport != TransportGRPC {
		dctx, cancel := context.WithTimeout(ctx, d.cfg.CallTimeout)
		err := c.UseDirect(dctx)
		cancel()
		switch {
		case errors.Is(err, driverrpc.ErrNoDirect):
			d.log.Debug("the store driver offers no direct transport: its calls go over gRPC", "reason", err)
		case err != nil:
			d.log.Warn("the store driver's direct transport cannot be used: its calls go over gRPC", "error", err)
		}
		fail = func(err error) (*instance, error) {
			c.Disconnect()
			pc.Kill()
			c.RemoveDirectSocket()
			return nil, err
		}
	}
	if err := c.Open(ctx, d.cfg.DriverConfig); err != nil {
		return fail(fmt.Errorf("opening driver %s: %w", d.cfg.Path, err))
	}
	ictx, cancel := context.WithTimeout(ctx, d.cfg.CallTimeout)
	info, err := c.Info(ictx)
	cancel()
	if err != nil {
		return fail(fmt.Errorf("driver %s: reading its info: %w", d.cfg.Path, err))
	}
	protocol := info.ProtocolVersion // the client bounds it by the handshake's
	if protocol < driver.OldestProtocolVersion {
		return fail(fmt.Errorf("driver %s reports store protocol version %d, older than %d", d.cfg.Path, protocol, driver.OldestProtocolVersion))
	}
	if d.protocol != 0 && protocol != d.protocol {
		// The host chose its use of the driver at launch (Store).
		return fail(fmt.Errorf("driver %s restarted speaking store protocol version %d, not %d as at launch", d.cfg.Path, protocol, d.protocol))
	}
	if d.starts == 0 {
		d.durable = info.Durable
	}
	d.starts++
	d.gen.Add(1)
	in := &instance{proc: cmd.Process, pc: pc, rpc: rpc, c: c, suspect: make(chan struct{}), protocol: protocol}
	if d.beforePublish != nil {
		d.beforePublish()
	}
	d.proc.Store(cmd.Process)
	// Kill does not take mu: one that ran while this process started saw
	// the previous one in proc and killed that. Either Kill sees the new
	// process in proc or this sees killed set: the new one does not
	// survive a Kill.
	if d.killed.Load() {
		return fail(fmt.Errorf("%w: driver %s was killed while it restarted", driver.ErrUnavailable, d.cfg.Path))
	}
	return in, nil
}

// Starts reports how many times the driver process was started.
func (d *Driver) Starts() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.starts
}

// Pid returns the process id of the running driver process, 0 if none.
func (d *Driver) Pid() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.cur == nil {
		return 0
	}
	if rc := d.cur.pc.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// Transport names the transport of the running process's calls: "direct"
// or "grpc" (see Config.Transport); "" when no process runs.
func (d *Driver) Transport() string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.cur == nil {
		return ""
	}
	return d.cur.c.Transport()
}

// Generation counts the changes of what the driver's calls reach: it
// grows at every start of a process (the first included) and when the
// driver is lost. A cache of what the driver said is to be dropped when
// it changes (package host/store does).
func (d *Driver) Generation() uint64 { return d.gen.Load() }

// Durable reports the first process's Info.Durable: whether the driver is
// relaunched when its process ends.
func (d *Driver) Durable() bool { return d.durable }

// Lost returns a channel closed when the driver, not durable, ended for
// good (ErrLost). A host is to stop: nothing it holds is in the store.
func (d *Driver) Lost() <-chan struct{} { return d.lost }

// Ended reports how many driver processes ended: those replaced by a
// relaunch, and the current one if it has exited (or the driver was lost)
// and was not replaced yet. Compared with the kills a caller ordered, it
// tells a crash.
func (d *Driver) Ended() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	n := d.starts - 1
	switch {
	case d.cur != nil && (d.cur.pc.Exited() || d.cur.stalled.Load()):
		n++
	case d.cur == nil && !d.closed:
		n++ // lost, killed, or a relaunch that failed
	}
	return n
}

// Stalls reports how many times a process stopped answering within
// CallTimeout and was killed.
func (d *Driver) Stalls() int64 { return d.stalls.Load() }

// healthy reports whether in can serve calls. A suspect instance is asked
// for its Info, within CallTimeout (a stalled one is killed).
func (d *Driver) healthy(ctx context.Context, in *instance) bool {
	if in == nil || in.pc.Exited() || in.stalled.Load() {
		return false
	}
	if in.isSuspect() {
		cctx, cancel := context.WithTimeoutCause(ctx, d.cfg.CallTimeout, errStalled)
		defer cancel()
		_, err := in.c.Info(cctx)
		if err != nil && ctx.Err() == nil && context.Cause(cctx) == errStalled {
			d.stalled(in, "Info")
		}
		return err == nil
	}
	return true
}

// errStalled is the cause of a call's context ended by CallTimeout.
var errStalled = errors.New("the driver did not answer within its call timeout")

// stalled reports and kills in, whose call op passed CallTimeout: its
// calls in flight fail, and the next call relaunches it, as after a crash.
func (d *Driver) stalled(in *instance, op string) {
	if in.stalled.Swap(true) {
		return
	}
	in.markSuspect()
	d.stalls.Add(1)
	d.log.Error("the store driver stopped answering: killing it to relaunch it",
		"call", op, "call_timeout", d.cfg.CallTimeout, "pid", in.proc.Pid)
	_ = in.proc.Kill()
}

// loseLocked marks the driver lost (mu held for writing).
func (d *Driver) loseLocked() {
	d.lostOnce.Do(func() {
		d.gen.Add(1)
		d.log.Error("the store driver is not durable and its process ended: " +
			"every run and message it held is gone; it is not relaunched, and the host must stop")
		close(d.lost)
	})
}

// heartbeat asks the driver for its Info every HeartbeatInterval, so
// that a stalled driver is found (and replaced) with no call in flight.
func (d *Driver) heartbeat() {
	defer d.beat.Done()
	t := time.NewTicker(d.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-d.beatCtx.Done():
			return
		case <-d.lost:
			return
		case <-t.C:
		}
		if d.killed.Load() {
			return
		}
		_, _ = d.Info(d.beatCtx)
	}
}

// get returns the running instance, restarting the process if it died.
func (d *Driver) get(ctx context.Context) (*instance, error) {
	d.mu.RLock()
	in, closed := d.cur, d.closed
	d.mu.RUnlock()
	if closed {
		return nil, driver.ErrClosed
	}
	if in != nil && !in.isSuspect() && !in.pc.Exited() {
		return in, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, driver.ErrClosed
	}
	if d.healthy(ctx, d.cur) {
		return d.cur, nil
	}
	if d.cur != nil {
		if d.cur.stalled.Load() || !d.cur.pc.Exited() {
			// A stalled process was killed; a suspect one that does not
			// answer is: go-plugin's own kill asks it over its
			// connection first, and would wait for an answer.
			_ = d.cur.proc.Kill()
		}
		d.cur.c.Disconnect()
		d.cur.pc.Kill() // reap it
		d.cur.c.RemoveDirectSocket()
		d.cur = nil
		if !d.durable && !d.killed.Load() {
			d.loseLocked()
		} else {
			d.log.Warn("store driver process is gone; restarting it")
		}
	}
	if d.killed.Load() {
		return nil, fmt.Errorf("%w: driver %s was killed", driver.ErrUnavailable, d.cfg.Path)
	}
	if !d.durable {
		return nil, fmt.Errorf("%w: driver %s: %w", driver.ErrUnavailable, d.cfg.Path, ErrLost)
	}
	if time.Since(d.lastFail) < d.cfg.RestartBackoff {
		return nil, fmt.Errorf("%w: driver %s is down (last restart failed %v ago)", driver.ErrUnavailable, d.cfg.Path, time.Since(d.lastFail).Round(time.Millisecond))
	}
	in, err := d.start(ctx)
	if err != nil {
		d.lastFail = time.Now()
		d.log.Error("restarting the store driver", "error", err)
		return nil, fmt.Errorf("%w: restarting driver: %v", driver.ErrUnavailable, err)
	}
	d.cur = in
	d.log.Warn("store driver relaunched; the host's caches of it are dropped", "pid", in.proc.Pid, "starts", d.starts)
	return in, nil
}

// done inspects the error of a call made on in.
func (d *Driver) done(in *instance, err error) error {
	if errors.Is(err, driver.ErrUnavailable) || (errors.Is(err, driver.ErrClosed) && !d.isClosed()) {
		in.markSuspect()
		if errors.Is(err, driver.ErrClosed) {
			return fmt.Errorf("%w: %v", driver.ErrUnavailable, err)
		}
	}
	return err
}

func (d *Driver) isClosed() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.closed
}

// Info implements driver.Driver.
func (d *Driver) Info(ctx context.Context) (driver.Info, error) {
	return call(ctx, d, "Info", func(ctx context.Context, c *driverrpc.Client) (driver.Info, error) { return c.Info(ctx) })
}

// LoadThread implements driver.Driver.
func (d *Driver) LoadThread(ctx context.Context, threadID string) (driver.ThreadSnapshot, error) {
	return call(ctx, d, "LoadThread", func(ctx context.Context, c *driverrpc.Client) (driver.ThreadSnapshot, error) {
		return c.LoadThread(ctx, threadID)
	})
}

// Commit implements driver.Driver. A commit that fails with
// driver.ErrUnavailable has an unknown outcome: read the thread's
// LastCommitID to settle it.
func (d *Driver) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	return call(ctx, d, "Commit", func(ctx context.Context, c *driverrpc.Client) (int64, error) { return c.Commit(ctx, b) })
}

// GetRuns implements driver.Driver.
func (d *Driver) GetRuns(ctx context.Context, ids []string) ([]record.Run, error) {
	return call(ctx, d, "GetRuns", func(ctx context.Context, c *driverrpc.Client) ([]record.Run, error) { return c.GetRuns(ctx, ids) })
}

// GetIdempotency implements driver.Driver.
func (d *Driver) GetIdempotency(ctx context.Context, threadID, key string) (record.Idempotency, error) {
	return call(ctx, d, "GetIdempotency", func(ctx context.Context, c *driverrpc.Client) (record.Idempotency, error) {
		return c.GetIdempotency(ctx, threadID, key)
	})
}

// ReadHistory implements driver.Driver.
func (d *Driver) ReadHistory(ctx context.Context, threadID string, afterSeq int64, limit int) ([]record.Message, error) {
	return call(ctx, d, "ReadHistory", func(ctx context.Context, c *driverrpc.Client) ([]record.Message, error) {
		return c.ReadHistory(ctx, threadID, afterSeq, limit)
	})
}

// ListRuns implements driver.Driver.
func (d *Driver) ListRuns(ctx context.Context, state record.RunState, after string, limit int) ([]record.Run, error) {
	return call(ctx, d, "ListRuns", func(ctx context.Context, c *driverrpc.Client) ([]record.Run, error) {
		return c.ListRuns(ctx, state, after, limit)
	})
}

// call runs f on the running instance, restarting the process if it died,
// with a deadline of CallTimeout: a call that passes it while ctx is live
// finds the driver stalled (see stalled), and fails with
// driver.ErrUnavailable.
func call[T any](ctx context.Context, d *Driver, op string, f func(context.Context, *driverrpc.Client) (T, error)) (T, error) {
	in, err := d.get(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	cctx, cancel := context.WithTimeoutCause(ctx, d.cfg.CallTimeout, errStalled)
	defer cancel()
	v, err := f(cctx, in.c)
	if err != nil && ctx.Err() == nil && context.Cause(cctx) == errStalled {
		d.stalled(in, op)
		var zero T
		return zero, fmt.Errorf("%w: driver %s did not answer %s within %v (%v); it is being relaunched",
			driver.ErrUnavailable, d.cfg.Path, op, d.cfg.CallTimeout, err)
	}
	return v, d.done(in, err)
}

// Close implements driver.Driver: it closes the driver in the subprocess
// and ends the subprocess, waiting for it. Closing twice is not an error.
func (d *Driver) Close(ctx context.Context) error {
	d.stopBeat()
	d.beat.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	in := d.cur
	d.cur = nil
	if in == nil {
		return nil
	}
	done := make(chan error, 1)
	go func() {
		var err error
		if !in.pc.Exited() {
			err = in.c.Close(ctx)
		}
		in.c.Disconnect()
		in.pc.Kill()
		in.c.RemoveDirectSocket()
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			if ctx.Err() != nil {
				// The close call gave up at the deadline; Kill ended
				// the process.
				return fmt.Errorf("closing driver %s: %w (%v)", d.cfg.Path, ErrKilled, err)
			}
			return fmt.Errorf("closing driver %s: %w", d.cfg.Path, err)
		}
		return nil
	case <-ctx.Done():
		// go-plugin's own kill asks the process to stop over its
		// connection first, which waits for an answer a stuck driver
		// may never give.
		_ = in.proc.Kill()
		select {
		case <-done:
		case <-time.After(killWait):
		}
		return fmt.Errorf("closing driver %s: %w (%v)", d.cfg.Path, ErrKilled, ctx.Err())
	}
}

// Kill ends the driver process at once with SIGKILL, without closing the
// driver or waiting for anything: for a host that must end now. The driver
// is not restarted afterwards: calls fail with driver.ErrUnavailable. Call
// Close afterwards to release the rest.
func (d *Driver) Kill() {
	d.killed.Store(true)
	if p := d.proc.Load(); p != nil {
		_ = p.Kill()
	}
}

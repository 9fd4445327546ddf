package conformance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strings"
	"sync/atomic"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/storepb"
	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// Target is the driver under test: it starts the driver's instances. The
// suite starts many instances, each on a scratch data directory it owns,
// and relaunches some on the same directory after killing them.
type Target interface {
	// Start starts a driver instance whose data lives in dir (the same dir
	// on a relaunch), with env added to the driver process's environment
	// (the suite arms the driver's fault points this way).
	Start(ctx context.Context, dir string, env []string) (Instance, error)
	// String names the target in reports.
	String() string
}

// Instance is one running driver.
type Instance interface {
	driver.Driver
	// Kill ends the driver process at once (SIGKILL), without closing the
	// driver. ErrCannotKill when the driver runs in this process.
	Kill() error
	// Pid is the driver process's id, 0 in this process.
	Pid() int
}

// Cleaner is implemented by a Target whose instances keep data outside
// their data directory: a schema in a database server, say. The suite calls
// Clean with every data directory it started instances on, once they are
// closed and it is done with them, and removes the directories itself.
// What a failed or skipped Clean leaves must be harmless: data no instance
// on another directory ever sees.
type Cleaner interface {
	Clean(ctx context.Context, dir string) error
}

// WithCleanup returns t, with clean removing the data of the instances on
// a directory (see Cleaner).
func WithCleanup(t Target, clean func(ctx context.Context, dir string) error) Target {
	return &cleaning{Target: t, clean: clean}
}

type cleaning struct {
	Target
	clean func(ctx context.Context, dir string) error
}

func (c *cleaning) Clean(ctx context.Context, dir string) error { return c.clean(ctx, dir) }

// ErrCannotKill: the instance runs in this process and cannot be killed,
// so the durable tier cannot be checked on it.
var ErrCannotKill = errors.New("a driver in this process cannot be killed")

// ConfigFunc returns the configuration a driver instance is opened with,
// for its data directory dir.
type ConfigFunc func(dir string) map[string]string

// DirConfig opens drivers with {"dir": dir}.
func DirConfig(dir string) map[string]string { return map[string]string{"dir": dir} }

// NoConfig opens drivers with no configuration.
func NoConfig(string) map[string]string { return nil }

// Binary tests the driver binary at path, launched as the host launches it
// (package host/driverhost), each instance opened with config(dir).
func Binary(path string, config ConfigFunc) Target {
	return &process{name: path, cfg: driverhost.Config{Path: path}, config: config}
}

// Launched tests the drivers that cfg launches, each opened with
// config(dir) (cfg.DriverConfig is replaced).
func Launched(name string, cfg driverhost.Config, config ConfigFunc) Target {
	return &process{name: name, cfg: cfg, config: config}
}

// Scratch says how the suite makes the scratch instances of a driver.
type Scratch struct {
	// Config is the configuration of an instance on a data directory.
	Config ConfigFunc
	// Clean removes the data of the instances on a directory that lives
	// outside it (see Cleaner); nil when there is none.
	Clean func(ctx context.Context, dir string) error
}

// ScratchConfigurer is an optional interface of a driver's
// storedriver.Factory, for a driver whose scratch instances are configured
// otherwise than DirConfig's {"dir": DIR}: one that takes no configuration,
// or keeps its data in a database server.
type ScratchConfigurer interface {
	// ScratchConfig returns the configuration of a scratch instance on dir
	// of a driver that runs with configuration launch (the user's): never
	// the user's data, and nothing another directory's instance sees.
	ScratchConfig(launch map[string]string, dir string) map[string]string
}

// ScratchCleaner is an optional interface of a driver's storedriver.Factory
// whose scratch instances keep data outside their data directory (a schema
// in a database server, say).
type ScratchCleaner interface {
	// CleanScratch removes what the scratch instances on dir of a driver
	// that runs with configuration launch kept outside dir. The instances
	// are closed.
	CleanScratch(ctx context.Context, launch map[string]string, dir string) error
}

// ScratchOf returns how the suite makes the scratch instances of the
// drivers f opens, for a driver that runs with configuration launch (the
// user's): f's ScratchConfig and CleanScratch when it has them (see
// ScratchConfigurer, ScratchCleaner), DirConfig and nothing to clean
// otherwise.
func ScratchOf(f storedriver.Factory, launch map[string]string) Scratch {
	launch = maps.Clone(launch)
	sc := Scratch{Config: DirConfig}
	if c, ok := f.(ScratchConfigurer); ok {
		sc.Config = func(dir string) map[string]string { return c.ScratchConfig(launch, dir) }
	}
	if c, ok := f.(ScratchCleaner); ok {
		sc.Clean = func(ctx context.Context, dir string) error { return c.CleanScratch(ctx, launch, dir) }
	}
	return sc
}

// Builtins are the drivers built into a binary, which Main tests by name,
// served by the binary re-executed (the agenthost command's).
type Builtins interface {
	// Names lists them.
	Names() []string
	// Target returns the target that tests the built-in driver name, its
	// scratch instances those of the driver running with configuration
	// launch (the user's).
	Target(name string, launch map[string]string) (Target, error)
}

type process struct {
	name   string
	cfg    driverhost.Config
	config ConfigFunc
}

func (p *process) String() string { return p.name }

var discard = slog.New(slog.DiscardHandler)

func (p *process) Start(ctx context.Context, dir string, env []string) (Instance, error) {
	cfg := p.cfg
	cfg.Env = append(append([]string{}, cfg.Env...), env...)
	cfg.DriverConfig = nil
	if p.config != nil {
		cfg.DriverConfig = p.config(dir)
	}
	if cfg.Logger == nil {
		cfg.Logger = discard
	}
	tail := &logTail{}
	cfg.Logger = slog.New(tailHandler{t: tail, next: cfg.Logger.Handler()})
	d, err := driverhost.Launch(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w\nthe end of its log:\n%s", err, tail)
	}
	return &procInstance{Driver: d, tail: tail}, nil
}

type procInstance struct {
	*driverhost.Driver
	tail  *logTail
	kills atomic.Int64 // processes the suite killed
}

func (p *procInstance) Kill() error {
	pid := p.Driver.Pid()
	if pid == 0 {
		return errors.New("no driver process")
	}
	p.kills.Add(1)
	err := syscall.Kill(pid, syscall.SIGKILL)
	if err != nil {
		p.kills.Add(-1)
	}
	return err
}

func (p *procInstance) crashes() int { return max(p.Driver.Ended()-int(p.kills.Load()), 0) }

func (p *procInstance) logTail() string { return p.tail.String() }

func (p *procInstance) Pid() int { return p.Driver.Pid() }

// InProcess tests the drivers f opens, served in this process through the
// server and client storedriver.Serve and the host use, over an in-memory
// gRPC connection (so every request crosses the wire form). Instances
// cannot be killed: the durable tier is skipped, and fails to pass, with
// this target.
func InProcess(name string, f storedriver.Factory, config ConfigFunc) Target {
	return &inProcess{name: name, f: f, config: config}
}

type inProcess struct {
	name   string
	f      storedriver.Factory
	config ConfigFunc
}

func (p *inProcess) String() string { return "in-process:" + p.name }

func (p *inProcess) Start(ctx context.Context, dir string, env []string) (Instance, error) {
	if len(env) > 0 {
		return nil, fmt.Errorf("%w: in-process drivers take no environment (%s)", ErrCannotKill, strings.Join(env, " "))
	}
	lis := bufconn.Listen(1 << 20)
	srv := driverrpc.NewGRPCServer(nil)
	s := driverrpc.NewServer(p.f)
	storepb.RegisterStoreServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return lis.Dial() }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, err
	}
	c := driverrpc.NewClient(conn)
	var cfg map[string]string
	if p.config != nil {
		cfg = maps.Clone(p.config(dir))
	}
	in := &inInstance{Client: c, stop: func() { _ = conn.Close(); srv.Stop() }}
	if err := c.Open(ctx, cfg); err != nil {
		in.stop()
		return nil, fmt.Errorf("opening the driver: %w", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		in.stop()
		return nil, fmt.Errorf("driver info: %w", err)
	}
	in.store = c.ForProtocol(info.ProtocolVersion)
	return in, nil
}

type inInstance struct {
	*driverrpc.Client
	store driver.Driver // the client as the host uses it (see driverhost.Driver.Store)
	stop  func()
}

// Store returns the instance as the host would use it: with
// driver.StepStore and driver.ThreadLister when the driver speaks store
// protocol 2.
func (i *inInstance) Store() driver.Driver { return i.store }

func (i *inInstance) Close(ctx context.Context) error {
	err := i.Client.Close(ctx)
	i.stop()
	return err
}

func (i *inInstance) Kill() error { return ErrCannotKill }
func (i *inInstance) Pid() int    { return 0 }

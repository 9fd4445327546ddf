package conformance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/storepb"
	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// Factory starts the driver under test. The suite starts many instances,
// each on a scratch data directory it owns, and relaunches some on the same
// directory after killing them.
type Factory interface {
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

// Cleaner is implemented by a Factory whose instances keep data outside
// their data directory: a schema in a database server, say. The suite calls
// Clean with every data directory it started instances on, once they are
// closed and it is done with them, and removes the directories itself.
// What a failed or skipped Clean leaves must be harmless: data no instance
// on another directory ever sees.
type Cleaner interface {
	Clean(ctx context.Context, dir string) error
}

// WithCleanup returns f, with clean removing the data of the instances on
// a directory (see Cleaner).
func WithCleanup(f Factory, clean func(ctx context.Context, dir string) error) Factory {
	return &cleaning{Factory: f, clean: clean}
}

type cleaning struct {
	Factory
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
// (package host/plugin), each instance opened with config(dir).
func Binary(path string, config ConfigFunc) Factory {
	return &process{name: path, cfg: driverhost.Config{Path: path}, config: config}
}

// Launched tests the drivers that cfg launches, each opened with
// config(dir) (cfg.DriverConfig is replaced).
func Launched(name string, cfg driverhost.Config, config ConfigFunc) Factory {
	return &process{name: name, cfg: cfg, config: config}
}

// Builtin tests the built-in driver name, served by the running binary
// re-executed (driverhost.Builtin): the binary must call
// driverhost.ServeBuiltin when driverhost.BuiltinEnv is set. Its scratch
// instances are BuiltinScratch(name, nil)'s: pgstore needs BuiltinWith.
func Builtin(name string) (Factory, error) {
	return BuiltinWith(name, nil)
}

// BuiltinWith tests the built-in driver name as Builtin does, its scratch
// instances those of BuiltinScratch(name, launch).
func BuiltinWith(name string, launch map[string]string) (Factory, error) {
	cfg, err := driverhost.Builtin(name, nil)
	if err != nil {
		return nil, err
	}
	sc := BuiltinScratch(name, launch)
	var f Factory = &process{name: "builtin:" + name, cfg: cfg, config: sc.Config}
	if sc.Clean != nil {
		f = WithCleanup(f, sc.Clean)
	}
	return f, nil
}

// BuiltinConfig is the configuration of a scratch instance of the built-in
// driver name on dir, for a driver whose scratch instances need nothing of
// its launch configuration (BuiltinScratch(name, nil).Config).
func BuiltinConfig(name string) ConfigFunc {
	return BuiltinScratch(name, nil).Config
}

// Scratch says how the suite makes the scratch instances of a driver.
type Scratch struct {
	// Config is the configuration of an instance on a data directory.
	Config ConfigFunc
	// Clean removes the data of the instances on a directory that lives
	// outside it (see Cleaner); nil when there is none.
	Clean func(ctx context.Context, dir string) error
}

// BuiltinScratch returns the scratch instances of the built-in driver name
// that runs with configuration launch (the user's): memstore gets no
// configuration, badgerstore its data directory, and pgstore the same
// server and database as launch's url (and its pool settings) in a schema
// of the data directory's own (pgdriver.ScratchSchema), never the user's
// tables, dropped by Clean.
func BuiltinScratch(name string, launch map[string]string) Scratch {
	switch name {
	case "memstore":
		return Scratch{Config: NoConfig}
	case pgdriver.Name:
		launch = maps.Clone(launch)
		return Scratch{
			Config: func(dir string) map[string]string { return pgdriver.ScratchConfig(launch, dir) },
			Clean: func(ctx context.Context, dir string) error {
				if launch["url"] == "" {
					return nil // no instance could start
				}
				return pgdriver.DropScratch(ctx, launch, dir)
			},
		}
	}
	return Scratch{Config: DirConfig}
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
	d, err := driverhost.Launch(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &procInstance{Driver: d}, nil
}

type procInstance struct{ *driverhost.Driver }

func (p *procInstance) Kill() error {
	pid := p.Driver.Pid()
	if pid == 0 {
		return errors.New("no driver process")
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

func (p *procInstance) Pid() int { return p.Driver.Pid() }

// InProcess tests the drivers f opens, served in this process through the
// SDK's server and client over an in-memory gRPC connection (so every
// request crosses the wire form). Instances cannot be killed: the durable
// tier is skipped, and fails to pass, with this factory.
func InProcess(name string, f storedriver.Factory, config ConfigFunc) Factory {
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
	return in, nil
}

type inInstance struct {
	*driverrpc.Client
	stop func()
}

func (i *inInstance) Close(ctx context.Context) error {
	err := i.Client.Close(ctx)
	i.stop()
	return err
}

func (i *inInstance) Kill() error { return ErrCannotKill }
func (i *inInstance) Pid() int    { return 0 }

package storedriver

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/internal/driverrpc"
)

// Factory opens a driver. It is what a driver author implements: Serve calls
// Open once, when the host sends the driver its configuration.
type Factory interface {
	// Open returns a driver opened with config (driver-specific keys, e.g.
	// "dir"). A bad config is an error wrapping driver.ErrInvalidArgument.
	Open(ctx context.Context, config map[string]string) (driver.Driver, error)
}

// FactoryFunc adapts a function to Factory.
type FactoryFunc func(ctx context.Context, config map[string]string) (driver.Driver, error)

// Open implements Factory.
func (f FactoryFunc) Open(ctx context.Context, config map[string]string) (driver.Driver, error) {
	return f(ctx, config)
}

// Logger returns the logger a driver process should log with: JSON on the
// process's stderr, which go-plugin hands to the host's logger with levels
// and fields intact. Call it before Serve.
func Logger(name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Output: os.Stderr, JSONFormat: true, Level: hclog.Info})
}

// A ServeOption adjusts how Serve runs the driver process.
type ServeOption func(*serveOptions)

type serveOptions struct {
	maxProcs int
}

// procs is the GOMAXPROCS Serve sets, or 0 to leave the runtime's: the
// environment's GOMAXPROCS, when set, wins over WithMaxProcs.
func (o serveOptions) procs(lookupEnv func(string) (string, bool)) int {
	if _, set := lookupEnv("GOMAXPROCS"); set || o.maxProcs <= 0 {
		return 0
	}
	return o.maxProcs
}

// WithMaxProcs runs the driver process's Go code on at most n threads at
// once (runtime.GOMAXPROCS), unless the GOMAXPROCS environment variable
// the host passed the driver says otherwise. A driver whose calls are short
// and serialised anyway (an in-memory map behind one lock) answers faster
// on one: the goroutines that read a request, run it and write the answer
// hand over on one thread instead of waking another, which on small
// virtual machines costs tens of microseconds a hop. See docs/adr/0121.
func WithMaxProcs(n int) ServeOption {
	return func(o *serveOptions) { o.maxProcs = n }
}

// closeTimeout bounds the closing of the driver when the process ends.
const closeTimeout = 10 * time.Second

// Serve serves the drivers f opens as a go-plugin subprocess, and returns
// when the host ends the plugin. It is the whole main of a driver binary:
//
//	func main() { storedriver.Serve(myFactory{}) }
//
// The process does not outlive its host: it ends, closing its driver, when
// its parent dies (the parent-death signal on Linux, and a watch on the
// parent process everywhere). It does not end on a signal while its host
// lives: SIGTERM and SIGINT sent to the whole process group (timeout(1),
// kill -- -PGID, a terminal's ^C, systemd's default stop) reach the driver
// too, and the host, draining, still needs its store; the host ends the
// driver when it is done with it (see docs/adr/0129).
func Serve(f Factory, opts ...ServeOption) {
	var o serveOptions
	for _, opt := range opts {
		opt(&o)
	}
	// The driver logs to its stderr, a pipe the host reads. Once the host
	// is gone a write there would end the process with SIGPIPE before its
	// stop could close the store and remove the direct socket; ignored,
	// the write fails and the stop runs.
	signal.Ignore(syscall.SIGPIPE)
	logger := Logger("driver")
	if n := o.procs(os.LookupEnv); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	stopProfile := driverrpc.StartProfile(logger)
	srv := driverrpc.NewServer(f)
	// The direct transport (docs/adr/0151): offered next to gRPC, the host
	// uses it for every call but Watch when it can reach it.
	direct, err := srv.ListenDirect()
	if err != nil {
		logger.Warn("no direct transport: the host's calls go over gRPC", "error", err)
	}
	closeDirect := func() {
		if direct != nil {
			_ = direct.Close()
		}
	}
	stop := onceStop(func(why string) {
		logger.Info("ending the driver process", "reason", why)
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- srv.CloseDriver(ctx) }()
		var err error
		select {
		case err = <-errc:
		case <-time.After(closeTimeout + time.Second):
			// A driver whose close ignores its context (a store retrying
			// a write forever) must not keep an orphan process alive.
			err = errors.New("the driver did not close within " + closeTimeout.String())
		}
		stopProfile()
		closeDirect()
		if err != nil {
			logger.Error("closing the driver", "error", err)
			os.Exit(1)
		}
		os.Exit(0)
	})
	ppid := os.Getppid()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for s := range sigs {
			// The parent-death signal is SIGTERM too: after the host
			// died, the process has another parent.
			if os.Getppid() != ppid {
				stop("the host process ended")
			}
			logger.Info("ignoring the signal: the host ends its driver when it no longer needs it", "signal", s.String())
		}
	}()
	watchParent(func() { stop("the host process ended") })

	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  driverrpc.Handshake,
		VersionedPlugins: driverrpc.PluginSets(srv),
		GRPCServer:       driverrpc.NewGRPCServer,
		Logger:           logger,
	})
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := srv.CloseDriver(ctx); err != nil {
		logger.Error("closing the driver", "error", err)
	}
	closeDirect()
	stopProfile()
}

// onceStop returns a stop that runs end once. The parent-death signal and
// the watch of the parent may both call it; end closes the store and exits,
// so a second caller blocks until the process ends instead of exiting while
// the store is still being closed.
func onceStop(end func(why string)) func(why string) {
	var once sync.Once
	return func(why string) { once.Do(func() { end(why) }) }
}

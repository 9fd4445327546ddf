package storedriver

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/storepb"
)

// PluginName is the name under which a driver process serves the store
// protocol in its go-plugin plugin set.
const PluginName = "store"

// MaxMessageSize bounds one gRPC message, request or reply, on both sides.
// A larger request fails with driver.ErrTooLarge.
const MaxMessageSize = 64 << 20

// MaxBatchBytes bounds the encoded size of one committed batch: Server
// refuses a larger one with driver.ErrTooLarge before the driver sees it.
// Replies (pages of history, lists of runs) may be larger, up to
// MaxMessageSize.
const MaxBatchBytes = 8 << 20

// Handshake is the go-plugin handshake of a store driver. Its protocol
// version is the base version; the store protocol version is negotiated
// through VersionedPlugins (see PluginSets).
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "AGENTHOST_STORE_DRIVER",
	MagicCookieValue: "b1c9f6c2-5f1e-4c53-9d0a-store-driver",
}

// GRPCPlugin is the go-plugin glue of the store protocol. On the driver side
// it serves Impl; on the host side it returns a *Client.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is what the driver side serves; nil on the host side.
	Impl *Server
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer implements plugin.GRPCPlugin.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	storepb.RegisterStoreServer(s, p.Impl)
	return nil
}

// GRPCClient implements plugin.GRPCPlugin.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewClient(c), nil
}

// PluginSets returns the versioned plugin sets of a store driver: protocol
// version driver.ProtocolVersion, serving s (nil on the host side).
func PluginSets(s *Server) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		driver.ProtocolVersion: {PluginName: &GRPCPlugin{Impl: s}},
	}
}

// NewGRPCServer is the gRPC server constructor of a driver process: the
// options go-plugin passes, with message sizes raised to MaxMessageSize.
func NewGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize))
	return grpc.NewServer(opts...)
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
// parent process everywhere) or on SIGTERM.
func Serve(f Factory, opts ...ServeOption) {
	var o serveOptions
	for _, opt := range opts {
		opt(&o)
	}
	logger := Logger("driver")
	if n := o.procs(os.LookupEnv); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	startProfile(logger)
	srv := NewServer(f)
	stop := func(why string) {
		logger.Info("ending the driver process", "reason", why)
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		err := srv.CloseDriver(ctx)
		stopProfile()
		if err != nil {
			logger.Error("closing the driver", "error", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() {
		<-sigs
		stop("SIGTERM")
	}()
	watchParent(func() { stop("the host process ended") })

	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: PluginSets(srv),
		GRPCServer:       NewGRPCServer,
		Logger:           logger,
	})
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := srv.CloseDriver(ctx); err != nil {
		logger.Error("closing the driver", "error", err)
	}
	stopProfile()
}

// CPUProfileEnv names a file to write a CPU profile of the driver process
// to, for the life of Serve (diagnostics; the host must pass it in the
// driver's environment).
const CPUProfileEnv = "AGENTHOST_DRIVER_CPUPROFILE"

var stopProfile = func() {}

func startProfile(logger hclog.Logger) {
	path := os.Getenv(CPUProfileEnv)
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		logger.Error("starting the CPU profile", "error", err)
		return
	}
	stopProfile = func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

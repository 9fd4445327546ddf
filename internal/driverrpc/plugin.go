package driverrpc

import (
	"context"
	"os"
	"runtime/pprof"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/agenthost/agenthost/abi/driver"
)

// PluginName is the name under which a driver process serves the store
// protocol in its go-plugin plugin set.
const PluginName = "store"

// MaxMessageSize bounds one gRPC message, request or reply, on both sides.
// A larger request fails with driver.ErrTooLarge. A committed batch is
// bounded lower, by driver.MaxBatchBytes; replies (pages of history, lists
// of runs) may be larger, up to MaxMessageSize.
const MaxMessageSize = 64 << 20

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
	// Version is the store protocol version of the plugin set this plugin
	// is in: go-plugin uses the plugin of the version the handshake chose.
	Version int
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer implements plugin.GRPCPlugin.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	p.Impl.SetProtocol(p.Version)
	s.RegisterService(storeServiceDesc(), p.Impl) // storepb's, CommitMany keeping its bytes
	return nil
}

// GRPCClient implements plugin.GRPCPlugin.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	cl := NewClient(c)
	cl.protocol = p.Version
	return cl, nil
}

// PluginSets returns the versioned plugin sets of a store driver: every
// protocol version from driver.OldestProtocolVersion to
// driver.ProtocolVersion, serving s (nil on the host side). The handshake
// chooses the highest version both sides offer; a driver that does not
// speak the chosen version as a Go value says so in its Info (see
// Server.Info).
func PluginSets(s *Server) map[int]plugin.PluginSet {
	return PluginSetsFor(s, Versions()...)
}

// PluginSetsFor returns the plugin sets of the given protocol versions
// only, serving s (nil on the host side).
func PluginSetsFor(s *Server, versions ...int) map[int]plugin.PluginSet {
	sets := make(map[int]plugin.PluginSet, len(versions))
	for _, v := range versions {
		sets[v] = plugin.PluginSet{PluginName: &GRPCPlugin{Impl: s, Version: v}}
	}
	return sets
}

// Versions lists the store protocol versions this module speaks, oldest
// first.
func Versions() []int {
	var vs []int
	for v := driver.OldestProtocolVersion; v <= driver.ProtocolVersion; v++ {
		vs = append(vs, v)
	}
	return vs
}

// NewGRPCServer is the gRPC server constructor of a driver process: the
// options go-plugin passes, with message sizes raised to MaxMessageSize and
// the codec that keeps a CommitMany request's bytes (see wire.go).
func NewGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize),
		grpc.ForceServerCodecV2(newWireCodec()))
	return grpc.NewServer(opts...)
}

// CPUProfileEnv names a file to write a CPU profile of the driver process
// to, for the life of storedriver.Serve (diagnostics; the host must pass it
// in the driver's environment).
const CPUProfileEnv = "AGENTHOST_DRIVER_CPUPROFILE"

// StartProfile starts the CPU profile CPUProfileEnv asks for, if any, and
// returns the function that stops it (a no-op when there is none).
func StartProfile(logger hclog.Logger) (stop func()) {
	path := os.Getenv(CPUProfileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		logger.Error("starting the CPU profile", "error", err)
		if f != nil {
			_ = f.Close()
		}
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

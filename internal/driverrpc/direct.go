package driverrpc

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/abi/storepb"
)

// The direct transport (ADR 0151). A gRPC call crosses several goroutines
// in each process (the caller, the transport's writer and reader, the
// handler), and each hand-over may wake another thread; on a small virtual
// machine a wake-up costs tens of microseconds. The direct transport
// carries the unary calls of the Store service over a Unix socket with one
// goroutine at each end: the host's caller writes its request and reads
// the reply itself, and the driver's goroutine of the connection reads the
// request, runs the same handler gRPC would run, and writes the reply. A
// connection carries one call at a time; the host keeps a pool of them.
//
// The driver offers it through the Direct RPC, over the mTLS gRPC channel:
// the socket's path, in a directory only the driver's user can enter, and
// a random secret. Each connection begins with the host's hello, the
// framing version and the secret, which the driver compares in constant
// time before answering one byte, 0. Then, all integers big-endian:
//
//	request: u32 n | u8 method | u32 call | i64 timeout ns (0: none) | message (n-13 bytes)
//	reply:   u32 n | u32 call | u8 status | message (n-5 bytes)
//
// method is an id of directMethods; call numbers the calls of the
// connection, and the reply repeats it; status 0 means the message is the
// RPC's reply, 1 that it is a google.rpc.Status, the same status (code,
// message, ErrorInfo) gRPC would have carried. A method id the driver does
// not know is answered UNIMPLEMENTED, as gRPC answers an unknown method.

// directVersion is the framing version this module speaks.
const directVersion = 1

// directMethods maps the wire's method ids to the Store service's methods.
// Append only: a host and a driver built from different versions of this
// module agree on the ids they both know.
var directMethods = [...]string{
	1:  storepb.Store_Open_FullMethodName,
	2:  storepb.Store_Info_FullMethodName,
	3:  storepb.Store_LoadThread_FullMethodName,
	4:  storepb.Store_Commit_FullMethodName,
	5:  storepb.Store_CommitMany_FullMethodName,
	6:  storepb.Store_GetRuns_FullMethodName,
	7:  storepb.Store_GetIdempotency_FullMethodName,
	8:  storepb.Store_ReadHistory_FullMethodName,
	9:  storepb.Store_ListRuns_FullMethodName,
	10: storepb.Store_Close_FullMethodName,
	11: storepb.Store_AcquireLease_FullMethodName,
	12: storepb.Store_RenewLease_FullMethodName,
	13: storepb.Store_ReleaseLease_FullMethodName,
	14: storepb.Store_Leases_FullMethodName,
	15: storepb.Store_Notify_FullMethodName,
	16: storepb.Store_CommitSteps_FullMethodName,
	17: storepb.Store_ReadSteps_FullMethodName,
	18: storepb.Store_ListThreads_FullMethodName,
	19: storepb.Store_CommitStepsMany_FullMethodName,
}

// directCommitMany, directCommitSteps and directCommitStepsMany are the
// ids of the calls whose request's bytes the server keeps (see wire.go).
const (
	directCommitMany      = 5
	directCommitSteps     = 16
	directCommitStepsMany = 19
)

// directIDs is the inverse of directMethods.
var directIDs = func() map[string]uint8 {
	m := make(map[string]uint8, len(directMethods))
	for i, name := range directMethods {
		if name != "" {
			m[name] = uint8(i)
		}
	}
	return m
}()

const (
	// directDirPrefix begins the name of a socket's directory.
	directDirPrefix = "agenthost-driver-"
	secretSize      = 32
	reqHeaderSize   = 4 + 1 + 4 + 8
	replyHeadSize   = 4 + 4 + 1
	statusOK        = 0
	statusError     = 1
	helloTimeout    = 10 * time.Second
	maxServerConns  = 1024
	// maxKeptBuffer bounds a buffer a connection keeps between calls.
	maxKeptBuffer = 1 << 20
)

// The driver side.

// DirectListener is the driver side of the direct transport: a Unix
// socket in a private directory, served by the handlers of a Server.
// storedriver.Serve starts one with Server.ListenDirect.
type DirectListener struct {
	s       *Server
	ln      net.Listener
	dir     string
	path    string
	secret  []byte
	methods map[uint8]grpc.MethodDesc

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool

	served atomic.Int64 // calls answered
}

// ListenDirect starts the direct transport of s: a socket in a fresh
// directory of the system's temporary directory, readable by the process's
// user only, and the secret each connection must present. From then on s
// answers the Direct RPC with them. Close the listener when the process
// ends: it removes the directory.
func (s *Server) ListenDirect() (*DirectListener, error) {
	dir, err := os.MkdirTemp("", directDirPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("direct transport: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("direct transport: %w", err)
	}
	path := filepath.Join(dir, "store.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("direct transport: %w", err)
	}
	secret := make([]byte, secretSize)
	_, _ = rand.Read(secret) // never fails (crypto/rand)
	l := &DirectListener{s: s, ln: ln, dir: dir, path: path, secret: secret,
		methods: make(map[uint8]grpc.MethodDesc), conns: make(map[net.Conn]struct{})}
	for _, m := range storeServiceDesc().Methods {
		if id, ok := directIDs["/"+storepb.Store_ServiceDesc.ServiceName+"/"+m.MethodName]; ok {
			l.methods[id] = m
		}
	}
	s.direct.Store(l)
	go l.accept()
	return l, nil
}

// Path returns the socket's path.
func (l *DirectListener) Path() string { return l.path }

// Close stops the listener, closes its connections (a call in flight is
// cut: the host sees the transport fail, as when the process ends) and
// removes the socket's directory. The server answers Direct with
// UNIMPLEMENTED from then on.
func (l *DirectListener) Close() error {
	l.s.direct.CompareAndSwap(l, nil)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	err := l.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
	if rerr := os.RemoveAll(l.dir); err == nil {
		err = rerr
	}
	return err
}

func (l *DirectListener) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of descriptors, say
			continue
		}
		l.mu.Lock()
		if l.closed || len(l.conns) >= maxServerConns {
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		go l.serve(c)
	}
}

// serve answers the calls of one connection, one after the other, on this
// goroutine.
func (l *DirectListener) serve(c net.Conn) {
	defer func() {
		l.mu.Lock()
		delete(l.conns, c)
		l.mu.Unlock()
		_ = c.Close()
	}()
	var hello [1 + secretSize]byte
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		return
	}
	if hello[0] != directVersion || subtle.ConstantTimeCompare(hello[1:], l.secret) != 1 {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if _, err := c.Write([]byte{0}); err != nil {
		return
	}
	r := bufio.NewReaderSize(c, 32<<10)
	var hdr [reqHeaderSize]byte
	var in []byte
	out := make([]byte, 0, 4096)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[0:])
		if n < reqHeaderSize-4 || n-(reqHeaderSize-4) > MaxMessageSize {
			return // not a frame of this protocol
		}
		id := hdr[4]
		call := binary.BigEndian.Uint32(hdr[5:])
		timeout := int64(binary.BigEndian.Uint64(hdr[9:]))
		size := int(n - (reqHeaderSize - 4))
		var payload []byte
		if id == directCommitMany || id == directCommitSteps || id == directCommitStepsMany {
			// These keep the request's bytes (see wire.go): their
			// own buffer, as gRPC would give them.
			payload = make([]byte, size)
		} else {
			if cap(in) < size {
				in = make([]byte, size)
			}
			payload = in[:size]
		}
		if _, err := io.ReadFull(r, payload); err != nil {
			return
		}
		out = l.call(out[:0], id, call, timeout, payload)
		if _, err := c.Write(out); err != nil {
			return
		}
		if cap(out) > maxKeptBuffer {
			out = make([]byte, 0, 4096)
		}
		if cap(in) > maxKeptBuffer {
			in = nil
		}
	}
}

// call runs the handler of method id on payload and appends the reply's
// frame to out.
func (l *DirectListener) call(out []byte, id uint8, call uint32, timeout int64, payload []byte) []byte {
	l.served.Add(1)
	out = append(out, make([]byte, replyHeadSize)...)
	m, ok := l.methods[id]
	var resp any
	var err error
	if !ok {
		err = status.Errorf(codes.Unimplemented, "unknown method id %d of the direct transport", id)
	} else {
		ctx := context.Background()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(timeout))
			defer cancel()
		}
		resp, err = m.Handler(l.s, ctx, func(v any) error {
			kept, err := unmarshalKeeping(payload, v)
			if !kept {
				err = proto.Unmarshal(payload, v.(proto.Message))
			}
			if err != nil {
				return status.Errorf(codes.Internal, "error unmarshalling request: %v", err)
			}
			return nil
		}, nil)
	}
	st := statusOK
	if err == nil {
		msg, ok := resp.(proto.Message)
		if !ok {
			err = status.Errorf(codes.Internal, "the handler answered a %T", resp)
		} else {
			var merr error
			out, merr = proto.MarshalOptions{}.MarshalAppend(out, msg)
			switch {
			case merr != nil:
				err = status.Errorf(codes.Internal, "error marshalling reply: %v", merr)
			case len(out)-replyHeadSize > MaxMessageSize:
				err = status.Errorf(codes.ResourceExhausted, "trying to send message larger than max (%d vs. %d)", len(out)-replyHeadSize, MaxMessageSize)
			}
		}
	}
	if err != nil {
		st = statusError
		out = out[:replyHeadSize]
		s, ok := status.FromError(err)
		if !ok {
			s = status.FromContextError(err)
		}
		out, _ = proto.MarshalOptions{}.MarshalAppend(out, s.Proto())
	}
	binary.BigEndian.PutUint32(out[0:], uint32(len(out)-4))
	binary.BigEndian.PutUint32(out[4:], call)
	out[8] = byte(st)
	return out
}

// Direct implements storepb.StoreServer: where the direct transport
// listens, when the server has one (ListenDirect), else UNIMPLEMENTED.
func (s *Server) Direct(_ context.Context, req *storepb.DirectRequest) (*storepb.DirectResponse, error) {
	l := s.direct.Load()
	if l == nil {
		return nil, status.Error(codes.Unimplemented, "the driver offers no direct transport")
	}
	if !slices.Contains(req.GetVersions(), directVersion) {
		return nil, status.Errorf(codes.Unimplemented, "the driver's direct transport speaks framing version %d only", directVersion)
	}
	return &storepb.DirectResponse{Network: "unix", Address: l.path, Secret: l.secret, Version: directVersion}, nil
}

// The host side.

// Pool sizes of the host's direct connections.
const (
	// maxDirectConns bounds the connections open at once: a call that
	// finds them all busy goes over gRPC.
	maxDirectConns = 128
	// directIdleAfter is how long a connection may stay unused before it
	// is closed.
	directIdleAfter = 30 * time.Second
	// redialAfter is how long calls go over gRPC after the socket could
	// not be reached.
	redialAfter = 5 * time.Second
)

// directConn is a grpc.ClientConnInterface whose unary calls of the Store
// service go over the direct transport, and the rest (Watch, a call made
// while every connection is busy or the socket cannot be reached) over
// the gRPC connection.
type directConn struct {
	grpc          grpc.ClientConnInterface
	network, addr string
	secret        []byte

	mu        sync.Mutex
	idle      []*dconn // most recently used last
	open      int
	closed    bool
	noDial    time.Time // zero, or until when calls go over gRPC
	lastSweep time.Time
}

// dconn is one connection of the pool.
type dconn struct {
	c    net.Conn
	r    *bufio.Reader
	wbuf []byte
	rbuf []byte
	call uint32
	used time.Time
}

var _ grpc.ClientConnInterface = (*directConn)(nil)

// negotiateDirect asks the driver over conn for its direct transport and
// opens a first connection to it.
func negotiateDirect(ctx context.Context, conn grpc.ClientConnInterface) (*directConn, error) {
	r, err := storepb.NewStoreClient(conn).Direct(ctx, &storepb.DirectRequest{Versions: []int32{directVersion}}, callOpts...)
	if status.Code(err) == codes.Unimplemented {
		return nil, fmt.Errorf("%w: %s", ErrNoDirect, status.Convert(err).Message())
	}
	if err != nil {
		return nil, fmt.Errorf("asking for the direct transport: %w", FromStatus(err))
	}
	switch {
	case r.GetVersion() != directVersion:
		return nil, fmt.Errorf("the driver chose framing version %d, not %d", r.GetVersion(), directVersion)
	case r.GetNetwork() != "unix":
		return nil, fmt.Errorf("the driver offers a direct transport over %q, not unix", r.GetNetwork())
	case len(r.GetSecret()) != secretSize:
		return nil, fmt.Errorf("the driver's secret has %d bytes, not %d", len(r.GetSecret()), secretSize)
	}
	d := &directConn{grpc: conn, network: r.GetNetwork(), addr: r.GetAddress(), secret: r.GetSecret(), lastSweep: time.Now()}
	c, err := d.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("the driver's direct transport at %s: %w", d.addr, err)
	}
	d.open = 1
	d.put(c)
	return d, nil
}

func (d *directConn) dial(ctx context.Context) (*dconn, error) {
	var dialer net.Dialer
	dctx, cancel := context.WithTimeout(ctx, helloTimeout)
	defer cancel()
	c, err := dialer.DialContext(dctx, d.network, d.addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := dctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	hello := append([]byte{directVersion}, d.secret...)
	var ack [1]byte
	if _, err = c.Write(hello); err == nil {
		_, err = io.ReadFull(c, ack[:])
	}
	if err == nil && ack[0] != 0 {
		err = fmt.Errorf("the driver answered the hello with %d", ack[0])
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("direct transport hello: %w", err)
	}
	_ = c.SetDeadline(time.Time{})
	return &dconn{c: c, r: bufio.NewReaderSize(c, 32<<10), wbuf: make([]byte, 0, 4096)}, nil
}

// take returns an idle connection, or a new one; nil when the call is to
// go over gRPC.
func (d *directConn) take(ctx context.Context) *dconn {
	d.mu.Lock()
	if n := len(d.idle); n > 0 {
		c := d.idle[n-1]
		d.idle[n-1] = nil
		d.idle = d.idle[:n-1]
		d.mu.Unlock()
		return c
	}
	if d.closed || d.open >= maxDirectConns || (!d.noDial.IsZero() && time.Now().Before(d.noDial)) {
		d.mu.Unlock()
		return nil
	}
	d.open++
	d.mu.Unlock()
	c, err := d.dial(ctx)
	if err != nil {
		// Nothing was sent: the call goes over gRPC, which tells whether
		// the driver is there at all.
		d.mu.Lock()
		d.open--
		d.noDial = time.Now().Add(redialAfter)
		d.mu.Unlock()
		return nil
	}
	return c
}

// put returns c to the pool, and closes the connections unused for
// directIdleAfter.
func (d *directConn) put(c *dconn) {
	now := time.Now()
	c.used = now
	d.mu.Lock()
	if d.closed {
		d.open--
		d.mu.Unlock()
		_ = c.c.Close()
		return
	}
	d.idle = append(d.idle, c)
	var stale []*dconn
	if now.Sub(d.lastSweep) > directIdleAfter {
		d.lastSweep = now
		k := 0
		for k < len(d.idle)-1 && now.Sub(d.idle[k].used) > directIdleAfter {
			k++
		}
		stale = slices.Clone(d.idle[:k])
		d.idle = slices.Delete(d.idle, 0, k)
		d.open -= k
	}
	d.mu.Unlock()
	for _, s := range stale {
		_ = s.c.Close()
	}
}

// drop closes c, which is not to be used again.
func (d *directConn) drop(c *dconn) {
	_ = c.c.Close()
	d.mu.Lock()
	d.open--
	d.mu.Unlock()
}

// close closes every idle connection, and each busy one as its call ends.
func (d *directConn) close() {
	d.mu.Lock()
	d.closed = true
	idle := d.idle
	d.idle = nil
	d.open -= len(idle)
	d.mu.Unlock()
	for _, c := range idle {
		_ = c.c.Close()
	}
}

// longAgo is a deadline in the past: set on a connection, it ends the
// read or write in progress at once.
var longAgo = time.Unix(1, 0)

// Invoke implements grpc.ClientConnInterface.
func (d *directConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	id, ok := directIDs[method]
	if !ok {
		return d.grpc.Invoke(ctx, method, args, reply, opts...)
	}
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	var timeout int64
	if dl, ok := ctx.Deadline(); ok {
		if timeout = int64(time.Until(dl)); timeout <= 0 {
			return status.FromContextError(context.DeadlineExceeded).Err()
		}
	}
	c := d.take(ctx)
	if c == nil {
		return d.grpc.Invoke(ctx, method, args, reply, opts...)
	}
	req, err := c.request(id, timeout, args)
	if err != nil {
		d.put(c)
		return err
	}
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(longAgo) })
	}
	st, payload, err := c.roundTrip(req)
	if stop != nil && !stop() {
		// The context ended during the call: the connection's deadline
		// is, or is about to be, in the past.
		d.drop(c)
		if err != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
	} else if err != nil {
		d.drop(c)
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		// The driver's process ended or closed the connection: the call
		// may or may not have run, as when gRPC's connection breaks.
		return status.Errorf(codes.Unavailable, "direct transport to the driver: %v", err)
	} else {
		defer d.put(c)
	}
	if st != statusOK {
		var sp spb.Status
		if err := proto.Unmarshal(payload, &sp); err != nil {
			return status.Errorf(codes.Internal, "direct transport: a bad status from the driver: %v", err)
		}
		if sp.Code == int32(codes.OK) {
			return status.Errorf(codes.Internal, "direct transport: an error status with code OK")
		}
		return status.ErrorProto(&sp)
	}
	if err := proto.Unmarshal(payload, reply.(proto.Message)); err != nil {
		return status.Errorf(codes.Internal, "direct transport: error unmarshalling the reply: %v", err)
	}
	return nil
}

// request encodes the frame of a call to method id with message args in
// c's write buffer.
func (c *dconn) request(id uint8, timeout int64, args any) ([]byte, error) {
	msg, ok := args.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "direct transport: a request of type %T", args)
	}
	c.call++
	b := append(c.wbuf[:0], make([]byte, reqHeaderSize)...)
	// A CommitMany's batches were sized when they were queued (coalesce.go)
	// and not changed since: their sizes are not computed again.
	b, err := proto.MarshalOptions{UseCachedSize: id == directCommitMany}.MarshalAppend(b, msg)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "error marshalling request: %v", err)
	}
	if n := len(b) - reqHeaderSize; n > MaxMessageSize {
		return nil, status.Errorf(codes.ResourceExhausted, "trying to send message larger than max (%d vs. %d)", n, MaxMessageSize)
	}
	binary.BigEndian.PutUint32(b[0:], uint32(len(b)-4))
	b[4] = id
	binary.BigEndian.PutUint32(b[5:], c.call)
	binary.BigEndian.PutUint64(b[9:], uint64(timeout))
	if cap(b) <= maxKeptBuffer {
		c.wbuf = b[:0]
	}
	return b, nil
}

// roundTrip writes req and reads its reply: the status byte and the
// message, in a buffer valid until the connection's next call.
func (c *dconn) roundTrip(req []byte) (byte, []byte, error) {
	if _, err := c.c.Write(req); err != nil {
		return 0, nil, err
	}
	var hdr [replyHeadSize]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[0:])
	if n < replyHeadSize-4 || n-(replyHeadSize-4) > MaxMessageSize {
		return 0, nil, fmt.Errorf("a reply frame of %d bytes", n)
	}
	if call := binary.BigEndian.Uint32(hdr[4:]); call != c.call {
		return 0, nil, fmt.Errorf("the reply of call %d, not %d", call, c.call)
	}
	size := int(n - (replyHeadSize - 4))
	if cap(c.rbuf) < size {
		c.rbuf = make([]byte, size)
	}
	payload := c.rbuf[:size]
	if cap(c.rbuf) > maxKeptBuffer {
		c.rbuf = nil
	}
	if _, err := io.ReadFull(c.r, payload); err != nil {
		return 0, nil, err
	}
	return hdr[8], payload, nil
}

// NewStream implements grpc.ClientConnInterface: streams go over gRPC.
func (d *directConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return d.grpc.NewStream(ctx, desc, method, opts...)
}

// ErrNoDirect is the error of UseDirect when the driver offers no direct
// transport: it answered Direct with UNIMPLEMENTED.
var ErrNoDirect = errors.New("the driver offers no direct transport")

// UseDirect asks the driver for its direct transport (the Direct RPC) and,
// when it offers one that answers, sends every later unary call over it;
// Watch stays on gRPC. Call it before any other call of c. An error leaves
// c on gRPC; it wraps ErrNoDirect when the driver does not offer the
// transport (an older SDK, another language).
func (c *Client) UseDirect(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	d, err := negotiateDirect(ctx, c.conn)
	if err != nil {
		return err
	}
	c.direct = d
	c.c = storepb.NewStoreClient(d)
	return nil
}

// Transport names the transport of c's unary calls: "direct" or "grpc".
func (c *Client) Transport() string {
	if c.direct != nil {
		return "direct"
	}
	return "grpc"
}

// Disconnect closes c's direct connections, if any: the host calls it when
// it is done with the driver process, which may have ended. Calls after it
// go over gRPC.
func (c *Client) Disconnect() {
	if c.direct != nil {
		c.direct.close()
	}
}

// RemoveDirectSocket removes the direct transport's socket and its
// directory (when empty) of a driver process that has ended: one killed
// could not remove them itself. It removes nothing but a socket in a
// directory named as ListenDirect names them.
func (c *Client) RemoveDirectSocket() {
	if c.direct == nil {
		return
	}
	path := c.direct.addr
	dir := filepath.Dir(path)
	if !strings.HasPrefix(filepath.Base(dir), directDirPrefix) {
		return
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeSocket {
		return
	}
	_ = os.Remove(path)
	_ = os.Remove(dir) // only when empty
}

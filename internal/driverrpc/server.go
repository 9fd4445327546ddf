package driverrpc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/abi/storepb"
	"github.com/agenthost/agenthost/internal/driverfault"
)

// Opener opens the driver a Server serves: a storedriver.Factory, which
// has the same method.
type Opener interface {
	Open(ctx context.Context, config map[string]string) (driver.Driver, error)
}

// Server is the gRPC server side of the protocol: it serves the driver an
// Opener opens. storedriver.Serve sets one up in a driver process; the
// conformance suite's in-process targets and tests use NewServer directly.
type Server struct {
	storepb.UnimplementedStoreServer

	opener Opener

	mu       sync.RWMutex
	d        driver.Driver
	closed   bool
	protocol int // the version the handshake chose; 0 until set

	direct atomic.Pointer[DirectListener] // see ListenDirect
}

var _ storepb.StoreServer = (*Server)(nil)

// NewServer returns a server for the drivers o opens. Without a handshake
// (SetProtocol) it speaks driver.ProtocolVersion.
func NewServer(o Opener) *Server { return &Server{opener: o} }

// SetProtocol sets the store protocol version the handshake chose: the
// server speaks no later one. go-plugin calls it through GRPCPlugin.
func (s *Server) SetProtocol(v int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.protocol = v
}

// protocolOf returns the store protocol version the server speaks for the
// driver d it serves: the version the driver claims, bounded by the one
// the handshake chose and by what d implements (driver.Speaks).
func (s *Server) protocolOf(d driver.Driver, claimed int) int {
	s.mu.RLock()
	v := s.protocol
	s.mu.RUnlock()
	if v == 0 {
		v = driver.ProtocolVersion
	}
	return min(v, claimed, driver.Speaks(d))
}

func (s *Server) driver() (driver.Driver, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case s.closed:
		return nil, ToStatus(driver.ErrClosed)
	case s.d == nil:
		return nil, ToStatus(fmt.Errorf("%w: the driver was not opened", driver.ErrClosed))
	}
	return s.d, nil
}

// Open implements storepb.StoreServer.
func (s *Server) Open(ctx context.Context, req *storepb.OpenRequest) (*storepb.OpenResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, ToStatus(driver.ErrClosed)
	case s.d != nil:
		return nil, ToStatus(fmt.Errorf("%w: the driver is already open", driver.ErrInvalidArgument))
	}
	d, err := s.opener.Open(ctx, req.GetConfig())
	if err != nil {
		return nil, ToStatus(fmt.Errorf("opening the driver: %w", err))
	}
	s.d = d
	return &storepb.OpenResponse{}, nil
}

// Info implements storepb.StoreServer.
func (s *Server) Info(ctx context.Context, _ *storepb.InfoRequest) (*storepb.InfoResponse, error) {
	d, err := s.driver()
	if err != nil {
		return nil, err
	}
	info, err := d.Info(ctx)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &storepb.InfoResponse{ProtocolVersion: int32(s.protocolOf(d, info.ProtocolVersion)), Name: info.Name, Version: info.Version, Durable: info.Durable, Leases: info.Leases}, nil
}

// LoadThread implements storepb.StoreServer.
func (s *Server) LoadThread(ctx context.Context, req *storepb.LoadThreadRequest) (*storepb.LoadThreadResponse, error) {
	d, err := s.driver()
	if err != nil {
		return nil, err
	}
	snap, err := d.LoadThread(ctx, req.GetThreadId())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &storepb.LoadThreadResponse{Thread: ThreadToProto(snap.Thread), Runs: RunsToProto(snap.Runs)}, nil
}

// Commit implements storepb.StoreServer.
func (s *Server) Commit(ctx context.Context, req *storepb.CommitRequest) (*storepb.CommitResponse, error) {
	d, err := s.driver()
	if err != nil {
		return nil, err
	}
	v, err := s.commitOne(ctx, d, req.GetBatch())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &storepb.CommitResponse{Version: v}, nil
}

// CommitMany implements storepb.StoreServer: each batch gets its own result.
func (s *Server) CommitMany(ctx context.Context, req *storepb.CommitManyRequest) (*storepb.CommitManyResponse, error) {
	return s.commitMany(ctx, req, nil)
}

// commitMany is CommitMany of req, decoded from raw when raw is not nil
// (see wire.go).
func (s *Server) commitMany(ctx context.Context, req *storepb.CommitManyRequest, raw []byte) (*storepb.CommitManyResponse, error) {
	d, err := s.driver()
	if err != nil {
		return nil, err
	}
	pbs := req.GetBatches()
	versions := make([]int64, len(pbs))
	errs := make([]error, len(pbs))
	if mc, ok := d.(driver.ManyCommitter); ok {
		ec, _ := d.(EncodedCommitter)
		var wire []*Encoded
		if ec != nil {
			wire = encodedBatches(req, raw)
		}
		bs := make([]driver.Batch, 0, len(pbs))
		idx := make([]int, 0, len(pbs))
		var enc []*Encoded
		if wire != nil {
			enc = make([]*Encoded, 0, len(pbs))
		}
		for i, pb := range pbs {
			size := -1
			if wire != nil {
				size = wire[i].Size
			}
			if errs[i] = s.checkBatchSize(d, pb, size); errs[i] == nil {
				bs = append(bs, BatchFromProto(pb))
				idx = append(idx, i)
				if wire != nil {
					enc = append(enc, wire[i])
				}
			}
		}
		var vs []int64
		var es []error
		if enc != nil {
			vs, es = ec.CommitManyEncoded(ctx, bs, enc)
		} else {
			vs, es = mc.CommitMany(ctx, bs)
		}
		if len(vs) != len(bs) || len(es) != len(bs) {
			return nil, ToStatus(fmt.Errorf("driver answered %d of %d commits", len(es), len(bs)))
		}
		for k, i := range idx {
			versions[i], errs[i] = vs[k], es[k]
		}
	} else {
		var wg sync.WaitGroup
		for i, pb := range pbs {
			wg.Go(func() { versions[i], errs[i] = s.commitOne(ctx, d, pb) })
		}
		wg.Wait()
	}
	res := make([]*storepb.CommitResult, len(pbs))
	for i := range pbs {
		r := &storepb.CommitResult{Version: versions[i]}
		if errs[i] != nil {
			r.Code, r.Message, r.Reason = errorFields(errs[i])
		}
		res[i] = r
	}
	return &storepb.CommitManyResponse{Results: res}, nil
}

// checkBatch makes the checks the server makes on a batch before the
// driver d sees it.
func (s *Server) checkBatch(d driver.Driver, pb *storepb.Batch) error {
	return s.checkBatchSize(d, pb, -1)
}

// checkBatchSize is checkBatch of a batch of size bytes on the wire, or of
// an unknown size when size < 0.
func (s *Server) checkBatchSize(d driver.Driver, pb *storepb.Batch, size int) error {
	if pb == nil {
		return fmt.Errorf("%w: commit without a batch", driver.ErrInvalidArgument)
	}
	if size < 0 {
		size = proto.Size(pb)
	}
	if n := size; n > driver.MaxBatchBytes {
		return fmt.Errorf("%w: batch of %d bytes exceeds the limit of %d bytes", driver.ErrTooLarge, n, driver.MaxBatchBytes)
	}
	if _, ok := d.(driver.Leaser); pb.GetFence() != 0 && !ok {
		return fmt.Errorf("%w: a fenced batch, but the driver has no leases", driver.ErrInvalidArgument)
	}
	if len(pb.GetSteps()) > 0 && s.protocolOf(d, driver.ProtocolVersion) < 2 {
		return fmt.Errorf("%w: a batch with steps, but the driver speaks store protocol 1 here, without step records", driver.ErrInvalidArgument)
	}
	return nil
}

func (s *Server) commitOne(ctx context.Context, d driver.Driver, pb *storepb.Batch) (int64, error) {
	if err := s.checkBatch(d, pb); err != nil {
		return 0, err
	}
	driverfault.Reach(driverfault.BeforeCommit)
	v, err := d.Commit(ctx, BatchFromProto(pb))
	if err == nil {
		driverfault.Reach(driverfault.AfterSyncBeforeReply)
	}
	return v, err
}

// GetRuns implements storepb.StoreServer.
func (s *Server) GetRuns(ctx context.Context, req *storepb.GetRunsRequest) (*storepb.GetRunsResponse, error) {
	d, err := s.driver()
	if err != nil {
		return nil, err
	}
	runs, err := d.GetRuns(ctx, req.GetIds())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &storepb.GetRunsResponse{Runs: RunsToProto(runs)}, nil
}

// GetIdempotency implements storepb.StoreServer.
func (s *Server) GetIdempotency(ctx context.Context, req *storepb.GetIdempotencyRequest) (*storepb.GetIdempotencyResponse, error) {
	d, err := s.driver()
	if err != nil {
		return nil, err
	}
	k, err := d.GetIdempotency(ctx, req.GetThreadId(), req.GetKey())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &storepb.GetIdempotencyResponse{Record: IdempotencyToProto(k)}, nil
}

// ReadHistory implements storepb.StoreServer.
func (s *Server) ReadHistory(ctx context.Context, req *storepb.ReadHistoryRequest) (*storepb.ReadHistoryResponse, error) {
	d, err := s.driver()
	if err != nil {
		return nil, err
	}
	limit, err := intLimit(req.GetLimit())
	if err != nil {
		return nil, err
	}
	msgs, err := d.ReadHistory(ctx, req.GetThreadId(), req.GetAfterSeq(), limit)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &storepb.ReadHistoryResponse{Messages: MessagesToProto(msgs)}, nil
}

// ListRuns implements storepb.StoreServer.
func (s *Server) ListRuns(ctx context.Context, req *storepb.ListRunsRequest) (*storepb.ListRunsResponse, error) {
	d, err := s.driver()
	if err != nil {
		return nil, err
	}
	limit, err := intLimit(req.GetLimit())
	if err != nil {
		return nil, err
	}
	runs, err := d.ListRuns(ctx, record.RunState(req.GetState()), req.GetAfter(), limit)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &storepb.ListRunsResponse{Runs: RunsToProto(runs)}, nil
}

func intLimit(n int64) (int, error) {
	if n > 1<<31-1 {
		return 0, ToStatus(fmt.Errorf("%w: limit %d is too large", driver.ErrInvalidArgument, n))
	}
	return int(n), nil
}

// Close implements storepb.StoreServer. The server refuses every call after
// it, Open included.
func (s *Server) Close(ctx context.Context, _ *storepb.CloseRequest) (*storepb.CloseResponse, error) {
	if err := s.CloseDriver(ctx); err != nil {
		return nil, ToStatus(err)
	}
	return &storepb.CloseResponse{}, nil
}

// CloseDriver closes the served driver, if one is open. storedriver.Serve
// calls it when the process is asked to end.
func (s *Server) CloseDriver(ctx context.Context) error {
	s.mu.Lock()
	d := s.d
	s.d, s.closed = nil, true
	s.mu.Unlock()
	if d == nil {
		return nil
	}
	return d.Close(ctx)
}

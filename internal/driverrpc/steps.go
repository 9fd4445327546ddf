package driverrpc

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/abi/storepb"
	"github.com/agenthost/agenthost/internal/driverfault"
)

// Protocol version 2: step records and thread listing. The server answers
// them only for a driver that speaks version 2 (driver.Speaks) over a
// handshake that chose it; otherwise with UNIMPLEMENTED, which the client
// turns into driver.ErrInvalidArgument.

// errNoSteps is the status of a version 2 call to a version 1 driver.
func errNoSteps(what string) error {
	return status.Errorf(codes.Unimplemented, "%s: the driver speaks store protocol 1, without step records and thread listing", what)
}

// v2 returns the served driver if it speaks protocol 2 over this
// connection.
func (s *Server) v2(what string) (driver.Driver, error) {
	d, err := s.driver()
	if err != nil {
		return nil, err
	}
	if s.protocolOf(d, driver.ProtocolVersion) < 2 {
		return nil, errNoSteps(what)
	}
	return d, nil
}

// checkStepBatch makes the checks the server makes on a step batch before
// the driver sees it.
func checkStepBatch(d driver.Driver, pb *storepb.StepBatch) error {
	return checkStepBatchSize(d, pb, -1)
}

// checkStepBatchSize is checkStepBatch of a batch of size bytes on the
// wire, or of an unknown size when size < 0.
func checkStepBatchSize(d driver.Driver, pb *storepb.StepBatch, size int) error {
	if pb == nil {
		return fmt.Errorf("%w: CommitSteps without a batch", driver.ErrInvalidArgument)
	}
	if size < 0 {
		size = proto.Size(pb)
	}
	if size > driver.MaxBatchBytes {
		return fmt.Errorf("%w: step batch of %d bytes exceeds the limit of %d bytes", driver.ErrTooLarge, size, driver.MaxBatchBytes)
	}
	if _, ok := d.(driver.Leaser); pb.GetFence() != 0 && !ok {
		return fmt.Errorf("%w: a fenced step batch, but the driver has no leases", driver.ErrInvalidArgument)
	}
	return nil
}

// CommitSteps implements storepb.StoreServer.
func (s *Server) CommitSteps(ctx context.Context, req *storepb.CommitStepsRequest) (*storepb.CommitStepsResponse, error) {
	return s.commitSteps(ctx, req, nil)
}

// commitSteps is CommitSteps of req, decoded from raw when raw is not nil
// (see wire.go). A driver that takes steps in their wire form
// (EncodedStepsCommitter) gets the batch as a CommitStepsMany of one.
func (s *Server) commitSteps(ctx context.Context, req *storepb.CommitStepsRequest, raw []byte) (*storepb.CommitStepsResponse, error) {
	d, err := s.v2("CommitSteps")
	if err != nil {
		return nil, err
	}
	pbs := []*storepb.StepBatch{req.GetBatch()}
	var wire []*EncodedSteps
	if ec, ok := d.(EncodedStepsCommitter); ok && pbs[0] != nil {
		wire = encodedStepBatches(pbs, raw)
		if wire != nil {
			var errs [1]error
			commitStepsManyAt(ctx, d, ec, pbs, wire, errs[:])
			err = errs[0]
		}
	}
	if wire == nil {
		err = commitStepsOne(ctx, d, pbs[0])
	}
	if err != nil {
		return nil, ToStatus(err)
	}
	return &storepb.CommitStepsResponse{}, nil
}

// StepsManyCommitter is a driver.StepStore that commits several step
// batches in one call, each with its own result (errs[i] is bs[i]'s, nil
// when committed), as CommitSteps would commit each. The server hands such
// a driver a CommitStepsMany whole; any other driver gets one CommitSteps
// per batch, concurrently. Optional, like EncodedCommitter: a driver that
// queues its batches to one writer saves a goroutine per batch with it.
type StepsManyCommitter interface {
	driver.StepStore
	CommitStepsMany(ctx context.Context, bs []driver.StepBatch) []error
}

// CommitStepsMany implements storepb.StoreServer: each batch is committed
// as CommitSteps would commit it, all of them together (StepsManyCommitter)
// or concurrently, so that a driver with group commit syncs them together;
// each gets its own result.
func (s *Server) CommitStepsMany(ctx context.Context, req *storepb.CommitStepsManyRequest) (*storepb.CommitStepsManyResponse, error) {
	return s.commitStepsMany(ctx, req, nil)
}

// commitStepsMany is CommitStepsMany of req, decoded from raw when raw is
// not nil (see wire.go).
func (s *Server) commitStepsMany(ctx context.Context, req *storepb.CommitStepsManyRequest, raw []byte) (*storepb.CommitStepsManyResponse, error) {
	d, err := s.v2("CommitStepsMany")
	if err != nil {
		return nil, err
	}
	pbs := req.GetBatches()
	errs := make([]error, len(pbs))
	if mc, ok := d.(StepsManyCommitter); ok {
		var wire []*EncodedSteps
		if _, ok := d.(EncodedStepsCommitter); ok {
			wire = encodedStepBatches(pbs, raw)
		}
		commitStepsManyAt(ctx, d, mc, pbs, wire, errs)
	} else {
		commitStepsEach(ctx, d, pbs, errs)
	}
	res := make([]*storepb.CommitStepsResult, len(pbs))
	for i := range pbs {
		r := &storepb.CommitStepsResult{}
		if errs[i] != nil {
			r.Code, r.Message, r.Reason = errorFields(errs[i])
		}
		res[i] = r
	}
	return &storepb.CommitStepsManyResponse{Results: res}, nil
}

// commitStepsManyAt has mc commit the batches pbs that pass the server's
// checks in one call, setting errs[i] to pbs[i]'s result. wire, when not
// nil, is the wire form of each batch's steps, which mc then gets along
// (EncodedStepsCommitter).
func commitStepsManyAt(ctx context.Context, d driver.Driver, mc StepsManyCommitter, pbs []*storepb.StepBatch, wire []*EncodedSteps, errs []error) {
	bs := make([]driver.StepBatch, 0, len(pbs))
	idx := make([]int, 0, len(pbs))
	var enc []*EncodedSteps
	if wire != nil {
		enc = make([]*EncodedSteps, 0, len(pbs))
	}
	for i, pb := range pbs {
		size := -1
		if wire != nil {
			size = wire[i].Size
		}
		if errs[i] = checkStepBatchSize(d, pb, size); errs[i] == nil {
			bs = append(bs, StepBatchFromProto(pb))
			idx = append(idx, i)
			if wire != nil {
				enc = append(enc, wire[i])
			}
		}
	}
	if len(bs) == 0 {
		return
	}
	for range bs {
		driverfault.Reach(driverfault.BeforeCommit) // once per batch, as CommitSteps
	}
	var es []error
	if enc != nil {
		es = mc.(EncodedStepsCommitter).CommitStepsManyEncoded(ctx, bs, enc)
	} else {
		es = mc.CommitStepsMany(ctx, bs)
	}
	if len(es) != len(bs) {
		err := fmt.Errorf("%w: driver answered %d of %d step commits", driver.ErrUnavailable, len(es), len(bs))
		for _, i := range idx {
			errs[i] = err
		}
		return
	}
	for k, i := range idx {
		if errs[i] = es[k]; errs[i] == nil {
			driverfault.Reach(driverfault.AfterSyncBeforeReply)
		}
	}
}

// maxStepsInFlight bounds the batches of one CommitStepsMany committed at
// once by a driver without StepsManyCommitter. A host groups what its runs
// commit meanwhile, far fewer than this.
const maxStepsInFlight = 256

// commitStepsEach commits the batches pbs one CommitSteps each,
// concurrently, setting errs[i] to pbs[i]'s result.
func commitStepsEach(ctx context.Context, d driver.Driver, pbs []*storepb.StepBatch, errs []error) {
	var wg sync.WaitGroup
	// At most maxStepsInFlight batches of one call at once: a call of many
	// tiny batches must not start a goroutine for each.
	slots := make(chan struct{}, maxStepsInFlight)
	for i, pb := range pbs {
		// Checked here, not on the batch's goroutine: a fresh goroutine
		// grows its stack for them, a cost per batch.
		if errs[i] = checkStepBatch(d, pb); errs[i] != nil {
			continue
		}
		b := StepBatchFromProto(pb)
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			errs[i] = commitStepBatch(ctx, d, b)
		})
	}
	wg.Wait()
}

// commitStepsOne checks a step batch and has the driver d commit it.
func commitStepsOne(ctx context.Context, d driver.Driver, pb *storepb.StepBatch) error {
	if err := checkStepBatch(d, pb); err != nil {
		return err
	}
	return commitStepBatch(ctx, d, StepBatchFromProto(pb))
}

// commitStepBatch has the driver d commit a checked step batch.
func commitStepBatch(ctx context.Context, d driver.Driver, b driver.StepBatch) error {
	driverfault.Reach(driverfault.BeforeCommit)
	if err := d.(driver.StepStore).CommitSteps(ctx, b); err != nil {
		return err
	}
	driverfault.Reach(driverfault.AfterSyncBeforeReply)
	return nil
}

// ReadSteps implements storepb.StoreServer.
func (s *Server) ReadSteps(ctx context.Context, req *storepb.ReadStepsRequest) (*storepb.ReadStepsResponse, error) {
	d, err := s.v2("ReadSteps")
	if err != nil {
		return nil, err
	}
	limit, err := intLimit(req.GetLimit())
	if err != nil {
		return nil, err
	}
	steps, err := d.(driver.StepStore).ReadSteps(ctx, req.GetRunId(), req.GetAfterSeq(), limit)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &storepb.ReadStepsResponse{Steps: StepsToProto(steps)}, nil
}

// ListThreads implements storepb.StoreServer.
func (s *Server) ListThreads(ctx context.Context, req *storepb.ListThreadsRequest) (*storepb.ListThreadsResponse, error) {
	d, err := s.v2("ListThreads")
	if err != nil {
		return nil, err
	}
	limit, err := intLimit(req.GetLimit())
	if err != nil {
		return nil, err
	}
	ts, err := d.(driver.ThreadLister).ListThreads(ctx, req.GetAfter(), limit)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &storepb.ListThreadsResponse{Threads: ThreadsToProto(ts)}, nil
}

// StepClient is a Client of a driver that speaks protocol 2: it adds
// driver.StepStore and driver.ThreadLister. Get one with Client.Steps or
// Client.ForProtocol, only for a driver whose Info says 2: a driver
// speaking 1 refuses every call with driver.ErrInvalidArgument.
type StepClient struct{ *Client }

var (
	_ driver.StepStore    = StepClient{}
	_ driver.ThreadLister = StepClient{}
)

// Steps returns c as a StepClient.
func (c *Client) Steps() StepClient { return StepClient{c} }

// Handshake returns the store protocol version the go-plugin handshake
// chose, or driver.ProtocolVersion for a client made without one.
func (c *Client) Handshake() int {
	if c.protocol == 0 {
		return driver.ProtocolVersion
	}
	return c.protocol
}

// ForProtocol returns c as the host should use it for a driver speaking
// protocol version v: a StepClient from version 2 on, so that the host
// finds driver.StepStore and driver.ThreadLister on it by type assertion
// exactly when the driver has them; c itself before.
func (c *Client) ForProtocol(v int) driver.Driver {
	if v >= 2 {
		return StepClient{c}
	}
	return c
}

// CommitSteps implements driver.StepStore. Concurrent step commits share
// round trips (CommitStepsMany, see coalesce.go); each still has its own
// outcome. A driver served by an SDK without CommitStepsMany gets them one
// by one.
func (c StepClient) CommitSteps(ctx context.Context, b driver.StepBatch) error {
	if err := c.check(); err != nil {
		return err
	}
	pb := StepBatchToProto(b)
	if c.noStepsMany.Load() {
		return c.commitStepsOne(ctx, pb)
	}
	_, err := c.steps.do(ctx, pb)
	return err
}

func newStepCommits(c *Client) *coalescer[*storepb.StepBatch] {
	return &coalescer[*storepb.StepBatch]{what: "step commit", unknown: "step commit outcome unknown (read the run's steps)",
		one: func(ctx context.Context, pb *storepb.StepBatch) (int64, error) {
			return 0, c.commitStepsOne(ctx, pb)
		},
		many: c.commitStepsMany}
}

// commitStepsOne commits one step batch alone, under its caller's context.
func (c *Client) commitStepsOne(ctx context.Context, pb *storepb.StepBatch) error {
	if _, err := c.c.CommitSteps(ctx, &storepb.CommitStepsRequest{Batch: pb}, callOpts...); err != nil {
		return c.fail(ctx, err)
	}
	return nil
}

// commitStepsMany commits pbs in one CommitStepsMany. A driver that does
// not know the call (UNIMPLEMENTED: nothing was committed) gets them one by
// one, concurrently, from then on.
func (c *Client) commitStepsMany(ctx context.Context, pbs []*storepb.StepBatch) ([]commitResult, error) {
	r, err := c.c.CommitStepsMany(ctx, &storepb.CommitStepsManyRequest{Batches: pbs}, callOpts...)
	if status.Code(err) == codes.Unimplemented {
		c.noStepsMany.Store(true)
		rs := make([]commitResult, len(pbs))
		var wg sync.WaitGroup
		for i, pb := range pbs {
			wg.Go(func() { rs[i].err = c.commitStepsOne(ctx, pb) })
		}
		wg.Wait()
		return rs, nil
	}
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	rs := make([]commitResult, len(r.Results))
	for i, res := range r.Results {
		if res.Code != 0 {
			rs[i].err = errorFromFields(res.Code, res.Message, res.Reason)
		}
	}
	return rs, nil
}

// ReadSteps implements driver.StepStore.
func (c StepClient) ReadSteps(ctx context.Context, runID string, afterSeq int64, limit int) ([]record.Step, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	r, err := c.c.ReadSteps(ctx, &storepb.ReadStepsRequest{RunId: runID, AfterSeq: afterSeq, Limit: int64(limit)}, callOpts...)
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	return StepsFromProto(r.Steps), nil
}

// ListThreads implements driver.ThreadLister.
func (c StepClient) ListThreads(ctx context.Context, after string, limit int) ([]record.Thread, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	r, err := c.c.ListThreads(ctx, &storepb.ListThreadsRequest{After: after, Limit: int64(limit)}, callOpts...)
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	return ThreadsFromProto(r.Threads), nil
}

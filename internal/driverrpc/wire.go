package driverrpc

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/storepb"
)

// A driver that stores its records in their wire form (storepb messages,
// as badgerstore does) would decode a committed batch only to encode its
// records again, byte for byte what the host sent. The server keeps the
// bytes of a CommitMany request as they arrive and hands each batch's
// records, still encoded, to a driver that takes them (EncodedCommitter).

// Encoded is the wire form of one batch's records as the host sent them:
// each a marshalled storepb.Thread, Run, Message, Idempotency or Step, in
// the batch's order. Decoded, each is the record of the driver.Batch it
// comes with. The server keeps the bytes of a CommitStepsMany request the
// same way (EncodedSteps, EncodedStepsCommitter).
type Encoded struct {
	Thread      []byte
	Runs        [][]byte
	Messages    [][]byte
	Idempotency [][]byte
	Steps       [][]byte
	// Size is the batch's size on the wire.
	Size int
}

// EncodedCommitter is a driver.ManyCommitter that takes the batches'
// records in their wire form along (see Encoded); enc[i] is nil where the
// server has no wire form of bs[i], and the driver encodes it itself.
type EncodedCommitter interface {
	driver.ManyCommitter
	CommitManyEncoded(ctx context.Context, bs []driver.Batch, enc []*Encoded) ([]int64, []error)
}

// keptRequest is a request with the bytes it was decoded from, for the
// methods whose request's bytes the server keeps (CommitMany, CommitSteps,
// CommitStepsMany; keepingHandler). It is a proto.Message, req's: through
// any codec but wireCodec it decodes as the request alone.
type keptRequest[T proto.Message] struct {
	req T
	raw []byte
}

func (k *keptRequest[T]) ProtoReflect() protoreflect.Message { return k.req.ProtoReflect() }

// keep decodes data into the request and keeps data.
func (k *keptRequest[T]) keep(data []byte) error {
	k.raw = data
	return proto.Unmarshal(data, k.req)
}

// keeper is a keptRequest of any request type.
type keeper interface{ keep(data []byte) error }

// unmarshalKeeping decodes data into v, keeping data in v when v is a
// request whose bytes the server keeps (a keptRequest). data must not be
// reused then. ok is false for any other v, which the caller decodes as
// usual.
func unmarshalKeeping(data []byte, v any) (ok bool, err error) {
	if k, ok := v.(keeper); ok {
		return true, k.keep(data)
	}
	return false, nil
}

// wireCodec is the driver process's gRPC codec: the proto codec, which
// also keeps the bytes of a CommitMany or CommitStepsMany request
// (unmarshalKeeping).
type wireCodec struct{ encoding.CodecV2 }

func newWireCodec() wireCodec { return wireCodec{encoding.GetCodecV2("proto")} }

func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if k, ok := v.(keeper); ok {
		return k.keep(data.Materialize())
	}
	return c.CodecV2.Unmarshal(data, v)
}

// storeServiceDesc is the Store service with its CommitMany,
// CommitStepsMany and CommitSteps handlers decoding through commitManyWire,
// commitStepsManyWire and commitStepsWire; the other methods are the
// generated ones.
func storeServiceDesc() *grpc.ServiceDesc {
	desc := storepb.Store_ServiceDesc
	desc.Methods = append([]grpc.MethodDesc(nil), desc.Methods...)
	for i, m := range desc.Methods {
		switch m.MethodName {
		case "CommitMany":
			desc.Methods[i].Handler = keepingHandler(storepb.Store_CommitMany_FullMethodName, (*Server).commitMany)
		case "CommitStepsMany":
			desc.Methods[i].Handler = keepingHandler(storepb.Store_CommitStepsMany_FullMethodName, (*Server).commitStepsMany)
		case "CommitSteps":
			desc.Methods[i].Handler = keepingHandler(storepb.Store_CommitSteps_FullMethodName, (*Server).commitSteps)
		}
	}
	return &desc
}

// keepingHandler is the gRPC handler of a method whose request's bytes the
// server keeps: it decodes a fresh request with its bytes, and passes them
// on to call unless an interceptor replaced the request, whose bytes they
// then are not.
func keepingHandler[M any, T interface {
	*M
	proto.Message
}, R any](method string, call func(*Server, context.Context, T, []byte) (R, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := &keptRequest[T]{req: T(new(M))}
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(*Server)
		if interceptor == nil {
			return call(s, ctx, in.req, in.raw)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: method}
		return interceptor(ctx, in.req, info, func(ctx context.Context, req any) (any, error) {
			r := req.(T)
			if proto.Message(r) != proto.Message(in.req) {
				return call(s, ctx, r, nil)
			}
			return call(s, ctx, r, in.raw)
		})
	}
}

// encodedBatches splits raw, the bytes req was decoded from, into the wire
// form of each batch's records. It returns nil if they do not match req
// one for one (a field repeated that proto merges, say): the caller then
// goes without.
func encodedBatches(req *storepb.CommitManyRequest, raw []byte) []*Encoded {
	if raw == nil {
		return nil
	}
	var out []*Encoded
	err := eachField(raw, func(num protowire.Number, v []byte) error {
		if num != 1 {
			return nil
		}
		if len(out) >= len(req.Batches) {
			return fmt.Errorf("more batches than decoded")
		}
		e, err := encodedBatch(req.Batches[len(out)], v)
		if err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	if err != nil || len(out) != len(req.Batches) {
		return nil
	}
	return out
}

func encodedBatch(pb *storepb.Batch, raw []byte) (*Encoded, error) {
	e := &Encoded{Size: len(raw)}
	threads := 0
	err := eachField(raw, func(num protowire.Number, v []byte) error {
		switch num {
		case 4:
			threads++
			e.Thread = v
		case 5:
			e.Runs = append(e.Runs, v)
		case 6:
			e.Messages = append(e.Messages, v)
		case 7:
			e.Idempotency = append(e.Idempotency, v)
		case 9:
			e.Steps = append(e.Steps, v)
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case threads > 1, (threads == 1) != (pb.Thread != nil),
		len(e.Runs) != len(pb.Runs), len(e.Messages) != len(pb.Messages),
		len(e.Idempotency) != len(pb.Idempotency), len(e.Steps) != len(pb.Steps):
		return nil, fmt.Errorf("the wire form does not match the decoded batch")
	}
	return e, nil
}

// EncodedSteps is the wire form of one step batch's steps as the host sent
// them: each a marshalled storepb.Step, in the batch's order. Decoded, each
// is the step of the driver.StepBatch it comes with.
type EncodedSteps struct {
	Steps [][]byte
	// Size is the batch's size on the wire.
	Size int
}

// EncodedStepsCommitter is a StepsManyCommitter that takes the batches'
// steps in their wire form along (see EncodedSteps), as EncodedCommitter
// does commits; enc[i] is nil where the server has no wire form of bs[i],
// and the driver encodes it itself. The bytes are the driver's to keep.
type EncodedStepsCommitter interface {
	StepsManyCommitter
	CommitStepsManyEncoded(ctx context.Context, bs []driver.StepBatch, enc []*EncodedSteps) []error
}

// encodedStepBatches splits raw, the bytes of a CommitStepsMany or
// CommitSteps request (its batches are field 1 of either) whose batches
// decoded as batches, into the wire form of each batch's steps, as
// encodedBatches does a CommitMany's.
func encodedStepBatches(batches []*storepb.StepBatch, raw []byte) []*EncodedSteps {
	if raw == nil {
		return nil
	}
	var out []*EncodedSteps
	err := eachField(raw, func(num protowire.Number, v []byte) error {
		if num != 1 {
			return nil
		}
		if len(out) >= len(batches) {
			return fmt.Errorf("more batches than decoded")
		}
		e := &EncodedSteps{Size: len(v)}
		if err := eachField(v, func(num protowire.Number, v []byte) error {
			if num == 6 {
				e.Steps = append(e.Steps, v)
			}
			return nil
		}); err != nil {
			return err
		}
		if len(e.Steps) != len(batches[len(out)].GetSteps()) {
			return fmt.Errorf("the wire form does not match the decoded batch")
		}
		out = append(out, e)
		return nil
	})
	if err != nil || len(out) != len(batches) {
		return nil
	}
	return out
}

// eachField calls fn with the number and contents of each length-delimited
// field of the message b, skipping the others.
func eachField(b []byte, fn func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, v); err != nil {
			return err
		}
	}
	return nil
}

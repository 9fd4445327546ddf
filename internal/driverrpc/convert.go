package driverrpc

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/abi/storepb"
)

// The conversions between the records of package abi/record and their wire
// form in package abi/storepb. Times cross as UTC; a zero time crosses as an
// absent timestamp and comes back zero.

func tsToProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// timestamps hands out the timestamps of one batch from one allocation.
type timestamps []timestamppb.Timestamp

// to is tsToProto, from ts while it lasts (ts may be nil).
func (ts *timestamps) to(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	if ts == nil || len(*ts) == 0 {
		return timestamppb.New(t)
	}
	p := &(*ts)[0]
	*ts = (*ts)[1:]
	p.Seconds, p.Nanos = t.Unix(), int32(t.Nanosecond())
	return p
}

// countTimes returns how many of ts are not zero.
func countTimes(ts ...time.Time) int {
	n := 0
	for _, t := range ts {
		if !t.IsZero() {
			n++
		}
	}
	return n
}

func tsFromProto(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

// ThreadToProto converts a thread header to its wire form.
func ThreadToProto(t record.Thread) *storepb.Thread {
	p := new(storepb.Thread)
	threadToProto(p, t, nil)
	return p
}

func threadToProto(p *storepb.Thread, t record.Thread, ts *timestamps) {
	*p = storepb.Thread{
		Id: t.ID, Version: t.Version, NextRunSeq: t.NextRunSeq, NextMessageSeq: t.NextMessageSeq,
		OpenRunIds: t.OpenRunIDs, LastCommitId: t.LastCommitID, Owner: t.Owner, UpdatedAt: ts.to(t.UpdatedAt),
	}
}

// ThreadFromProto converts a thread header from its wire form.
func ThreadFromProto(p *storepb.Thread) record.Thread {
	if p == nil {
		return record.Thread{}
	}
	return record.Thread{
		ID: p.Id, Version: p.Version, NextRunSeq: p.NextRunSeq, NextMessageSeq: p.NextMessageSeq,
		OpenRunIDs: p.OpenRunIds, LastCommitID: p.LastCommitId, Owner: p.Owner, UpdatedAt: tsFromProto(p.UpdatedAt),
	}
}

// RunToProto converts a run to its wire form.
func RunToProto(r record.Run) *storepb.Run {
	p := new(storepb.Run)
	runToProto(p, r, nil)
	return p
}

func runToProto(p *storepb.Run, r record.Run, ts *timestamps) {
	*p = storepb.Run{
		Id: r.ID, ThreadId: r.ThreadID, Seq: r.Seq, State: string(r.State), TerminalReason: string(r.TerminalReason),
		InputMessageIds: r.InputMessageIDs, AssistantMessageId: r.AssistantMessageID, AnswerSeq: r.AnswerSeq,
		AbsorbedIntoRunId: r.AbsorbedIntoRunID, Attempt: int64(r.Attempt), Owner: r.Owner, Error: r.Error,
		EndSeq: r.EndSeq, CreatedAt: ts.to(r.CreatedAt), StartedAt: ts.to(r.StartedAt), EndedAt: ts.to(r.EndedAt),
		TakenBy: r.TakenBy, TranscriptIds: r.TranscriptIDs, Pending: r.Pending, WaitTakeovers: int64(r.WaitTakeovers),
	}
}

// RunFromProto converts a run from its wire form.
func RunFromProto(p *storepb.Run) record.Run {
	if p == nil {
		return record.Run{}
	}
	return record.Run{
		ID: p.Id, ThreadID: p.ThreadId, Seq: p.Seq, State: record.RunState(p.State), TerminalReason: record.TerminalReason(p.TerminalReason),
		InputMessageIDs: p.InputMessageIds, AssistantMessageID: p.AssistantMessageId, AnswerSeq: p.AnswerSeq,
		AbsorbedIntoRunID: p.AbsorbedIntoRunId, Attempt: int(p.Attempt), Owner: p.Owner, Error: p.Error,
		EndSeq: p.EndSeq, CreatedAt: tsFromProto(p.CreatedAt), StartedAt: tsFromProto(p.StartedAt), EndedAt: tsFromProto(p.EndedAt),
		TakenBy: p.TakenBy, TranscriptIDs: p.TranscriptIds, Pending: p.Pending, WaitTakeovers: int(p.WaitTakeovers),
	}
}

// RunsToProto converts runs to their wire form.
func RunsToProto(rs []record.Run) []*storepb.Run {
	out := make([]*storepb.Run, len(rs))
	for i, r := range rs {
		out[i] = RunToProto(r)
	}
	return out
}

// RunsFromProto converts runs from their wire form.
func RunsFromProto(ps []*storepb.Run) []record.Run {
	out := make([]record.Run, len(ps))
	for i, p := range ps {
		out[i] = RunFromProto(p)
	}
	return out
}

// MessageToProto converts a message to its wire form.
func MessageToProto(m record.Message) *storepb.Message {
	p := new(storepb.Message)
	messageToProto(p, m, nil)
	return p
}

func messageToProto(p *storepb.Message, m record.Message, ts *timestamps) {
	*p = storepb.Message{
		Id: m.ID, ThreadId: m.ThreadID, RunId: m.RunID, Seq: m.Seq, Role: string(m.Role), Content: m.Content,
		ToolCallId: m.ToolCallID, Hint: m.Hint, Metadata: m.Metadata, CreatedAt: ts.to(m.CreatedAt),
	}
	if len(m.ToolCalls) > 0 {
		p.ToolCalls = make([]*storepb.ToolCall, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			p.ToolCalls[i] = &storepb.ToolCall{Id: c.ID, Name: c.Name, Arguments: c.Arguments}
		}
	}
}

// MessageFromProto converts a message from its wire form.
func MessageFromProto(p *storepb.Message) record.Message {
	if p == nil {
		return record.Message{}
	}
	m := record.Message{
		ID: p.Id, ThreadID: p.ThreadId, RunID: p.RunId, Seq: p.Seq, Role: record.Role(p.Role), Content: p.Content,
		ToolCallID: p.ToolCallId, Hint: p.Hint, Metadata: p.Metadata, CreatedAt: tsFromProto(p.CreatedAt),
	}
	if len(p.ToolCalls) > 0 {
		m.ToolCalls = make([]record.ToolCall, len(p.ToolCalls))
		for i, c := range p.ToolCalls {
			m.ToolCalls[i] = record.ToolCall{ID: c.Id, Name: c.Name, Arguments: c.Arguments}
		}
	}
	return m
}

// MessagesToProto converts messages to their wire form.
func MessagesToProto(ms []record.Message) []*storepb.Message {
	out := make([]*storepb.Message, len(ms))
	for i, m := range ms {
		out[i] = MessageToProto(m)
	}
	return out
}

// MessagesFromProto converts messages from their wire form.
func MessagesFromProto(ps []*storepb.Message) []record.Message {
	out := make([]record.Message, len(ps))
	for i, p := range ps {
		out[i] = MessageFromProto(p)
	}
	return out
}

// IdempotencyToProto converts an idempotency record to its wire form.
func IdempotencyToProto(k record.Idempotency) *storepb.Idempotency {
	return &storepb.Idempotency{
		ThreadId: k.ThreadID, Key: k.Key, RunId: k.RunID, InputMessageId: k.InputMessageID,
		ContentHash: k.ContentHash, CreatedAt: tsToProto(k.CreatedAt),
	}
}

// IdempotencyFromProto converts an idempotency record from its wire form.
func IdempotencyFromProto(p *storepb.Idempotency) record.Idempotency {
	if p == nil {
		return record.Idempotency{}
	}
	return record.Idempotency{
		ThreadID: p.ThreadId, Key: p.Key, RunID: p.RunId, InputMessageID: p.InputMessageId,
		ContentHash: p.ContentHash, CreatedAt: tsFromProto(p.CreatedAt),
	}
}

// batchSlab holds a batch's wire form with its thread header: one
// allocation for both.
type batchSlab struct {
	batch  storepb.Batch
	thread storepb.Thread
}

// BatchToProto converts a batch to its wire form. It is on the path of
// every commit, so it takes the batch with its header, its runs, its
// messages and their timestamps from a few allocations instead of one
// each.
func BatchToProto(b driver.Batch) *storepb.Batch {
	n := countTimes(b.Thread.UpdatedAt)
	for _, r := range b.Runs {
		n += countTimes(r.CreatedAt, r.StartedAt, r.EndedAt)
	}
	for _, m := range b.Messages {
		n += countTimes(m.CreatedAt)
	}
	ts := make(timestamps, n)
	slab := new(batchSlab)
	threadToProto(&slab.thread, b.Thread, &ts)
	p := &slab.batch
	*p = storepb.Batch{
		CommitId: b.CommitID, ThreadId: b.ThreadID, ExpectedVersion: b.ExpectedVersion, Fence: b.Fence,
		Thread: &slab.thread, Runs: make([]*storepb.Run, len(b.Runs)), Messages: make([]*storepb.Message, len(b.Messages)),
	}
	runs := make([]storepb.Run, len(b.Runs))
	for i, r := range b.Runs {
		runToProto(&runs[i], r, &ts)
		p.Runs[i] = &runs[i]
	}
	msgs := make([]storepb.Message, len(b.Messages))
	for i, m := range b.Messages {
		messageToProto(&msgs[i], m, &ts)
		p.Messages[i] = &msgs[i]
	}
	if len(b.Idempotency) > 0 {
		p.Idempotency = make([]*storepb.Idempotency, len(b.Idempotency))
		for i, k := range b.Idempotency {
			p.Idempotency[i] = IdempotencyToProto(k)
		}
	}
	if len(b.Steps) > 0 {
		p.Steps = StepsToProto(b.Steps)
	}
	return p
}

// BatchFromProto converts a batch from its wire form.
func BatchFromProto(p *storepb.Batch) driver.Batch {
	if p == nil {
		return driver.Batch{}
	}
	b := driver.Batch{
		CommitID: p.CommitId, ThreadID: p.ThreadId, ExpectedVersion: p.ExpectedVersion, Fence: p.Fence,
		Thread: ThreadFromProto(p.Thread), Runs: RunsFromProto(p.Runs), Messages: MessagesFromProto(p.Messages),
	}
	if len(p.Idempotency) > 0 {
		b.Idempotency = make([]record.Idempotency, len(p.Idempotency))
		for i, k := range p.Idempotency {
			b.Idempotency[i] = IdempotencyFromProto(k)
		}
	}
	if len(p.Steps) > 0 {
		b.Steps = StepsFromProto(p.Steps)
	}
	return b
}

// StepToProto converts a step record to its wire form.
func StepToProto(s record.Step) *storepb.Step {
	p := &storepb.Step{
		Id: s.ID, RunId: s.RunID, ThreadId: s.ThreadID, Seq: s.Seq, Attempt: int64(s.Attempt), Model: int64(s.Model),
		Kind: string(s.Kind), CreatedAt: tsToProto(s.CreatedAt),
	}
	if s.Kind == record.StepModel || s.Kind == record.StepTool || s.Message.ID != "" {
		p.Message = MessageToProto(s.Message)
	}
	if len(s.Taken) > 0 {
		p.Taken = make([]*storepb.Take, len(s.Taken))
		for i, t := range s.Taken {
			p.Taken[i] = &storepb.Take{RunId: t.RunID, InputMessageIds: t.InputMessageIDs}
		}
	}
	if s.Ask != (record.Ask{}) {
		a := s.Ask
		p.Ask = &storepb.Ask{CallId: a.CallID, Tool: a.Tool, Server: a.Server, Arguments: a.Arguments, Prompt: a.Prompt,
			Approvals: int64(a.Approvals), Deadline: tsToProto(a.Deadline)}
	}
	if s.Answer != (record.Answer{}) {
		a := s.Answer
		p.Answer = &storepb.Answer{CallId: a.CallID, Action: string(a.Action), Arguments: a.Arguments, Text: a.Text, Key: a.Key}
	}
	return p
}

// StepFromProto converts a step record from its wire form.
func StepFromProto(p *storepb.Step) record.Step {
	if p == nil {
		return record.Step{}
	}
	s := record.Step{
		ID: p.Id, RunID: p.RunId, ThreadID: p.ThreadId, Seq: p.Seq, Attempt: int(p.Attempt), Model: int(p.Model),
		Kind: record.StepKind(p.Kind), Message: MessageFromProto(p.Message), CreatedAt: tsFromProto(p.CreatedAt),
	}
	if len(p.Taken) > 0 {
		s.Taken = make([]record.Take, len(p.Taken))
		for i, t := range p.Taken {
			s.Taken[i] = record.Take{RunID: t.GetRunId(), InputMessageIDs: t.GetInputMessageIds()}
		}
	}
	if a := p.Ask; a != nil {
		s.Ask = record.Ask{CallID: a.CallId, Tool: a.Tool, Server: a.Server, Arguments: a.Arguments, Prompt: a.Prompt,
			Approvals: int(a.Approvals), Deadline: tsFromProto(a.Deadline)}
	}
	if a := p.Answer; a != nil {
		s.Answer = record.Answer{CallID: a.CallId, Action: record.AnswerAction(a.Action), Arguments: a.Arguments, Text: a.Text, Key: a.Key}
	}
	return s
}

// StepsToProto converts step records to their wire form.
func StepsToProto(ss []record.Step) []*storepb.Step {
	out := make([]*storepb.Step, len(ss))
	for i, s := range ss {
		out[i] = StepToProto(s)
	}
	return out
}

// StepsFromProto converts step records from their wire form.
func StepsFromProto(ps []*storepb.Step) []record.Step {
	out := make([]record.Step, len(ps))
	for i, p := range ps {
		out[i] = StepFromProto(p)
	}
	return out
}

// StepBatchToProto converts a CommitSteps batch to its wire form.
func StepBatchToProto(b driver.StepBatch) *storepb.StepBatch {
	return &storepb.StepBatch{
		ThreadId: b.ThreadID, RunId: b.RunID, Owner: b.Owner, Attempt: int64(b.Attempt), Fence: b.Fence,
		Steps: StepsToProto(b.Steps),
	}
}

// StepBatchFromProto converts a CommitSteps batch from its wire form.
func StepBatchFromProto(p *storepb.StepBatch) driver.StepBatch {
	if p == nil {
		return driver.StepBatch{}
	}
	return driver.StepBatch{
		ThreadID: p.ThreadId, RunID: p.RunId, Owner: p.Owner, Attempt: int(p.Attempt), Fence: p.Fence,
		Steps: StepsFromProto(p.Steps),
	}
}

// ThreadsToProto converts thread headers to their wire form.
func ThreadsToProto(ts []record.Thread) []*storepb.Thread {
	out := make([]*storepb.Thread, len(ts))
	for i, t := range ts {
		out[i] = ThreadToProto(t)
	}
	return out
}

// ThreadsFromProto converts thread headers from their wire form.
func ThreadsFromProto(ps []*storepb.Thread) []record.Thread {
	out := make([]record.Thread, len(ps))
	for i, p := range ps {
		out[i] = ThreadFromProto(p)
	}
	return out
}

// LeaseToProto converts a lease to its wire form.
func LeaseToProto(l driver.Lease) *storepb.Lease {
	return &storepb.Lease{Epoch: l.Epoch, Holder: l.Holder, Expires: tsToProto(l.Expires), Now: tsToProto(l.Now)}
}

// LeaseFromProto converts a lease from its wire form.
func LeaseFromProto(p *storepb.Lease) driver.Lease {
	if p == nil {
		return driver.Lease{}
	}
	return driver.Lease{Epoch: p.Epoch, Holder: p.Holder, Expires: tsFromProto(p.Expires), Now: tsFromProto(p.Now)}
}

// NoticeToProto converts a notice to its wire form.
func NoticeToProto(n driver.Notice) *storepb.Notice {
	p := &storepb.Notice{ThreadId: n.ThreadID, Owner: n.Owner, InterruptRunId: n.InterruptRunID, RunId: n.RunID, ReplyTo: n.ReplyTo, Settled: n.Settled,
		Wake: n.Wake, Runs: RunsToProto(n.Runs), Messages: MessagesToProto(n.Messages)}
	if n.Thread.ID != "" {
		p.Thread = ThreadToProto(n.Thread)
	}
	return p
}

// NoticeFromProto converts a notice from its wire form.
func NoticeFromProto(p *storepb.Notice) driver.Notice {
	n := driver.Notice{ThreadID: p.GetThreadId(), Owner: p.GetOwner(), InterruptRunID: p.GetInterruptRunId(), RunID: p.GetRunId(), ReplyTo: p.GetReplyTo(), Settled: p.GetSettled(),
		Wake: p.GetWake()}
	if p.GetThread() != nil {
		n.Thread = ThreadFromProto(p.GetThread())
	}
	if len(p.GetRuns()) > 0 {
		n.Runs = RunsFromProto(p.GetRuns())
	}
	if len(p.GetMessages()) > 0 {
		n.Messages = MessagesFromProto(p.GetMessages())
	}
	return n
}

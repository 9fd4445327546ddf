package record

import (
	"maps"
	"slices"
	"time"
)

// CloneThread returns a copy of t that shares no memory with it.
func CloneThread(t Thread) Thread {
	t.OpenRunIDs = slices.Clone(t.OpenRunIDs)
	return t
}

// CloneRun returns a copy of r that shares no memory with it.
func CloneRun(r Run) Run {
	r.InputMessageIDs = slices.Clone(r.InputMessageIDs)
	r.TranscriptIDs = slices.Clone(r.TranscriptIDs)
	r.Pending = slices.Clone(r.Pending)
	return r
}

// CloneStep returns a copy of s that shares no memory with it.
func CloneStep(s Step) Step {
	s.Message = CloneMessage(s.Message)
	s.Taken = slices.Clone(s.Taken)
	for i := range s.Taken {
		s.Taken[i].InputMessageIDs = slices.Clone(s.Taken[i].InputMessageIDs)
	}
	return s
}

// CloneMessage returns a copy of m that shares no memory with it.
func CloneMessage(m Message) Message {
	m.ToolCalls = slices.Clone(m.ToolCalls)
	m.Metadata = maps.Clone(m.Metadata)
	return m
}

// The Normalize functions return a record in the form in which two copies
// compare equal (reflect.DeepEqual) when they hold the same data after a
// round trip through a driver: times in UTC (the protocol keeps instants,
// not zones), empty slices and maps nil.

// NormalizeThread normalizes a thread header.
func NormalizeThread(x Thread) Thread {
	x.UpdatedAt = normTime(x.UpdatedAt)
	if len(x.OpenRunIDs) == 0 {
		x.OpenRunIDs = nil
	}
	return x
}

// NormalizeRun normalizes a run.
func NormalizeRun(x Run) Run {
	x.CreatedAt, x.StartedAt, x.EndedAt = normTime(x.CreatedAt), normTime(x.StartedAt), normTime(x.EndedAt)
	if len(x.InputMessageIDs) == 0 {
		x.InputMessageIDs = nil
	}
	if len(x.TranscriptIDs) == 0 {
		x.TranscriptIDs = nil
	}
	if len(x.Pending) == 0 {
		x.Pending = nil
	}
	return x
}

// NormalizeStep normalizes a step record.
func NormalizeStep(x Step) Step {
	x.CreatedAt = normTime(x.CreatedAt)
	x.Ask.Deadline = normTime(x.Ask.Deadline)
	x.Message = NormalizeMessage(x.Message)
	if len(x.Taken) == 0 {
		x.Taken = nil
	}
	for i := range x.Taken {
		if len(x.Taken[i].InputMessageIDs) == 0 {
			x.Taken[i].InputMessageIDs = nil
		}
	}
	return x
}

// NormalizeMessage normalizes a message.
func NormalizeMessage(x Message) Message {
	x.CreatedAt = normTime(x.CreatedAt)
	if len(x.ToolCalls) == 0 {
		x.ToolCalls = nil
	}
	if len(x.Metadata) == 0 {
		x.Metadata = nil
	}
	return x
}

// NormalizeIdempotency normalizes an idempotency record.
func NormalizeIdempotency(x Idempotency) Idempotency {
	x.CreatedAt = normTime(x.CreatedAt)
	return x
}

func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

package storedriver

import (
	"maps"
	"slices"

	"github.com/agenthost/agenthost/abi/record"
)

// CloneThread returns a copy of t that shares no memory with it.
func CloneThread(t record.Thread) record.Thread {
	t.OpenRunIDs = slices.Clone(t.OpenRunIDs)
	return t
}

// CloneRun returns a copy of r that shares no memory with it.
func CloneRun(r record.Run) record.Run {
	r.InputMessageIDs = slices.Clone(r.InputMessageIDs)
	return r
}

// CloneMessage returns a copy of m that shares no memory with it.
func CloneMessage(m record.Message) record.Message {
	m.ToolCalls = slices.Clone(m.ToolCalls)
	m.Metadata = maps.Clone(m.Metadata)
	return m
}

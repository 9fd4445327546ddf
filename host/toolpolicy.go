package host

import (
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/toolpolicy"
)

// The tool policy as the executor sees it (package toolpolicy): whether a
// tool call may run, is refused, or waits for a person's approval. A wasm
// guest's toolPolicy hook (host/wasm, Module.ToolPolicy) and native Go
// policies implement it.
type (
	// ToolPolicy decides tool calls.
	ToolPolicy = toolpolicy.Policy
	// ToolCallInfo is the call a ToolPolicy decides on.
	ToolCallInfo = toolpolicy.Call
	// ToolDecision is a ToolPolicy's answer.
	ToolDecision = toolpolicy.Decision
)

// NewToolCallInfo describes for a ToolPolicy the tool call c that the model
// asked for in call (its run, step and place in the step), on thread
// threadID; server is the MCP server providing the tool, empty for a tool of
// the host's own. Step counts from 1, as prepareStep's does.
func NewToolCallInfo(call model.Call, c record.ToolCall, threadID, server string) ToolCallInfo {
	return ToolCallInfo{
		Tool: c.Name, Server: server, Arguments: c.Arguments,
		CallID: c.ID, IdempotencyKey: call.IdempotencyKey(),
		Step: call.Step + 1, RunID: call.RunID, ThreadID: threadID,
	}
}

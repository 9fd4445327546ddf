package host_test

import (
	"testing"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
)

func TestNewToolCallInfo(t *testing.T) {
	call := model.Call{RunID: "r-1", Step: 2, Index: 1, ID: "call_9"}
	c := record.ToolCall{ID: "call_9", Name: "files_delete", Arguments: `{"path": "/x"}`}
	got := host.NewToolCallInfo(call, c, "t-1", "files")
	want := host.ToolCallInfo{Tool: "files_delete", Server: "files", Arguments: `{"path": "/x"}`, CallID: "call_9",
		IdempotencyKey: "r-1/step2/1", Step: 3, RunID: "r-1", ThreadID: "t-1"}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

package host_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// idModel asks, at each of its first two steps, for a call of tool with
// the ids in ids (c1 by default), then answers.
type idModel struct {
	tool string
	ids  []string
}

func (m idModel) Step(_ context.Context, req model.Request, _ func(string)) (model.Response, error) {
	if req.Step < 2 {
		ids := m.ids
		if ids == nil {
			ids = []string{"c1"}
		}
		var calls []record.ToolCall
		for _, id := range ids {
			calls = append(calls, record.ToolCall{ID: id, Name: m.tool, Arguments: fmt.Sprintf(`{"step":%d}`, req.Step)})
		}
		return model.Response{ToolCalls: calls}, nil
	}
	return model.Response{Content: "done"}, nil
}

// A call id used again in a later model step (ids are unique within a
// step, not within a run) is an ordinary call, without a tool policy too:
// the run completes, and its history holds both calls with their results.
func TestCallIDUsedAgainInALaterStep(t *testing.T) {
	e := newApprovalEnv(t, memdriver.New(), []string{"read"}, func(c *host.Config) {
		c.Model, c.ToolPolicy = idModel{tool: "read"}, nil
	})
	run := e.submit("T", "twice", "")
	out := e.result(run)
	if out.State != record.StateCompleted || answer(out) != "done" {
		t.Fatalf("result %s %q (%s)", out.State, answer(out), out.Error)
	}
	checkTwoCallsC1(t, e)
}

func checkTwoCallsC1(t *testing.T, e *approvalEnv) {
	t.Helper()
	hist, err := e.rt.History(context.Background(), "T")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range hist {
		for _, c := range m.ToolCalls {
			got = append(got, "call:"+c.ID+c.Arguments)
		}
		if m.Role == record.RoleTool {
			got = append(got, "result:"+m.ToolCallID)
		}
	}
	if want := []string{`call:c1{"step":0}`, "result:c1", `call:c1{"step":1}`, "result:c1"}; !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
}

// Two calls with one id in one model step cannot both be answered: the run
// fails at once, and neither call is made.
func TestCallIDTwiceInOneStepFailsTheRun(t *testing.T) {
	e := newApprovalEnv(t, memdriver.New(), []string{"read"}, func(c *host.Config) {
		c.Model = idModel{tool: "read", ids: []string{"c1", "c1"}}
	})
	run := e.submit("T", "twice", "")
	out := e.result(run)
	if out.State != record.StateFailed || !strings.Contains(out.Error, `two tool calls with the id "c1"`) {
		t.Fatalf("result %s (%s)", out.State, out.Error)
	}
	if got := e.tools["read"].calls(); len(got) != 0 {
		t.Fatalf("calls %v", got)
	}
}

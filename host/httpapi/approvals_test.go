package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/httpapi"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/toolpolicy"
	"github.com/agenthost/agenthost/internal/apitest"
)

type okTool struct{}

func (okTool) Spec() model.ToolSpec                         { return model.ToolSpec{Name: "remove"} }
func (okTool) Call(context.Context, string) (string, error) { return "removed", nil }

// TestApprovals: a run the tool policy stops shows state waiting with its
// pending approvals, and the approvals route answers it.
func TestApprovals(t *testing.T) {
	api := apitest.New(t, apitest.Config{
		Script: model.Script{Steps: []model.ScriptStep{
			{Tool: &model.ScriptTool{Name: "remove", Arguments: `{"path":"/tmp/x"}`}},
			{Answer: "done"},
		}},
		Host: host.Config{Tools: []model.Tool{okTool{}},
			ToolPolicy: toolpolicy.Static{Verdict: toolpolicy.Ask, Prompt: "remove it?", Approvals: 1}},
	})
	rt := api.Runtime
	s := &server{Server: api.Server, rt: rt}
	resp, body := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"clean"}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: %d %s", resp.StatusCode, body)
	}
	runID := decode[httpapi.Admission](t, body).RunID
	var run httpapi.Run
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, body = s.do(t, "GET", "/v1/runs/"+runID, "")
		if run = decode[httpapi.Run](t, body); run.State == httpapi.StateWaiting || time.Now().After(deadline) {
			break
		}
	}
	if run.State != "waiting" || len(run.PendingApprovals) != 1 {
		t.Fatalf("run %s", body)
	}
	p := run.PendingApprovals[0]
	if p.Tool != "remove" || p.Prompt != "remove it?" || string(p.Arguments) != `{"path":"/tmp/x"}` || p.Deadline.IsZero() || p.CallID == "" {
		t.Fatalf("pending approval %+v", p)
	}
	path := "/v1/runs/" + runID + "/approvals/" + p.CallID
	for _, c := range []struct{ body, code string }{
		{`{"action":"maybe"}`, "bad_request"},
		{`{"action":"edit"}`, "bad_request"},
		{`{"action":"edit","arguments":[1]}`, "bad_request"},
		{`{"action":"approve","arguments":{"a":1}}`, "bad_request"},
		{`{"action":"respond"}`, "bad_request"},
		{`{"action":"approve","extra":1}`, "bad_request"},
		{`{"action":"approve","key":"a"}`, "bad_request"}, // the header says b
	} {
		resp, body := s.do(t, "POST", path, c.body, "Idempotency-Key", "b")
		wantProblem(t, resp, body, http.StatusBadRequest, c.code)
	}
	resp, body = s.do(t, "POST", "/v1/runs/"+runID+"/approvals/nope", `{"action":"approve"}`)
	wantProblem(t, resp, body, http.StatusNotFound, "not_found")
	resp, body = s.do(t, "POST", "/v1/runs/nope/approvals/"+p.CallID, `{"action":"approve"}`)
	wantProblem(t, resp, body, http.StatusNotFound, "not_found")

	resp, body = s.do(t, "POST", path, `{"action":"edit","arguments":{"path": "/tmp/y"}}`, "Idempotency-Key", "k1")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("edit: %d %s", resp.StatusCode, body)
	}
	rep := decode[httpapi.ApprovalReply](t, body)
	if rep.Duplicate || rep.Answer.Action != "edit" || string(rep.Answer.Arguments) != `{"path":"/tmp/y"}` || rep.Answer.Key != "k1" || rep.Answer.AnsweredAt == nil {
		t.Fatalf("reply %s", body)
	}
	resp, body = s.do(t, "POST", path, `{"action":"edit","arguments":{"path":"/tmp/y"},"key":"k1"}`)
	if resp.StatusCode != http.StatusOK || !decode[httpapi.ApprovalReply](t, body).Duplicate {
		t.Fatalf("repeat: %d %s", resp.StatusCode, body)
	}
	resp, body = s.do(t, "POST", path, `{"action":"reject"}`, "Idempotency-Key", "k2")
	wantProblem(t, resp, body, http.StatusConflict, "answered")
	if pb := decode[httpapi.Problem](t, body); pb.Recorded == nil || pb.Recorded.Action != "edit" {
		t.Fatalf("answered problem %s", body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if res, err := rt.Wait(ctx, runID); err != nil || res.Answer == nil {
		t.Fatalf("result %+v %v", res, err)
	}
	// The steps show the ask and the answer.
	_, body = s.do(t, "GET", "/v1/runs/"+runID+"/steps", "")
	if !strings.Contains(string(body), `"kind":"ask"`) || !strings.Contains(string(body), `"answer":{"call_id"`) {
		t.Fatalf("steps %s", body)
	}
	// A run that waits for nothing any more.
	_, body = s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"again"}`)
	second := decode[httpapi.Admission](t, body).RunID
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, body = s.do(t, "GET", "/v1/runs/"+second, "")
		if run = decode[httpapi.Run](t, body); run.State == httpapi.StateWaiting || time.Now().After(deadline) {
			break
		}
	}
	if _, err := rt.Cancel(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	resp, body = s.do(t, "POST", "/v1/runs/"+second+"/approvals/"+run.PendingCallIDs[0], `{"action":"approve"}`)
	wantProblem(t, resp, body, http.StatusConflict, "not_waiting")
}

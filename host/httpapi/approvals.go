package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
)

// StateWaiting is the state the API shows for a run that waits for answers
// to tool calls: in the store it is active (see host.Waiting).
const StateWaiting = "waiting"

// PendingApproval is a tool call a waiting run waits on.
type PendingApproval struct {
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	Server string `json:"server,omitempty"`
	// Arguments is the call's arguments as the model wrote them: JSON
	// when the model wrote JSON, else a string holding its text.
	Arguments json.RawMessage `json:"arguments"`
	Prompt    string          `json:"prompt"`
	Approvals int             `json:"approvals"`
	Approved  int             `json:"approved"`
	ModelStep int             `json:"model_step"`
	Deadline  time.Time       `json:"deadline"`
}

func toPendingApproval(p host.PendingApproval) PendingApproval {
	return PendingApproval{CallID: p.CallID, Tool: p.Tool, Server: p.Server, Arguments: rawArguments(p.Arguments), Prompt: p.Prompt,
		Approvals: p.Approvals, Approved: p.Approved, ModelStep: p.Step, Deadline: p.Deadline}
}

// rawArguments is s as JSON: itself when it is valid JSON, else a string.
func rawArguments(s string) json.RawMessage {
	if s != "" && json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// ApprovalRequest is the body of POST /v1/runs/{run_id}/approvals/{call_id}.
type ApprovalRequest struct {
	Action    string          `json:"action"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Message   string          `json:"message,omitempty"`
	Key       string          `json:"key,omitempty"`
}

// ApprovalAnswer is an answer as recorded.
type ApprovalAnswer struct {
	CallID     string          `json:"call_id"`
	Action     string          `json:"action"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Message    string          `json:"message,omitempty"`
	Key        string          `json:"key,omitempty"`
	StepSeq    int64           `json:"step_seq,omitempty"`
	AnsweredAt *time.Time      `json:"answered_at,omitempty"`
}

func toApprovalAnswer(st record.Step) ApprovalAnswer {
	a := st.Answer
	out := ApprovalAnswer{CallID: a.CallID, Action: string(a.Action), Message: a.Text, Key: a.Key, StepSeq: st.Seq}
	if a.Arguments != "" {
		out.Arguments = rawArguments(a.Arguments)
	}
	if !st.CreatedAt.IsZero() {
		t := st.CreatedAt
		out.AnsweredAt = &t
	}
	return out
}

// ApprovalReply is the answer to an approval.
type ApprovalReply struct {
	Answer ApprovalAnswer `json:"answer"`
	// Duplicate: this answer was given before (same key, or the answer
	// that decided the call); nothing new was recorded.
	Duplicate bool `json:"duplicate"`
	Run       Run  `json:"run"`
}

func (h *Handler) approve(w http.ResponseWriter, r *http.Request) {
	runID, ok := h.pathID(w, r, "run_id")
	if !ok {
		return
	}
	callID, ok := h.pathID(w, r, "call_id")
	if !ok {
		return
	}
	var req ApprovalRequest
	if !h.decodeBody(w, r, &req, `{"action": "approve"|"edit"|"reject"|"respond", "arguments": {...}, "message": "..."}`) {
		return
	}
	key := r.Header.Get("Idempotency-Key")
	switch {
	case key != "" && req.Key != "" && key != req.Key:
		h.fail(w, r, fmt.Errorf("%w: the Idempotency-Key header and the body's key differ", host.ErrInvalid))
		return
	case key == "":
		key = req.Key
	}
	if len(key) > host.MaxKeyLen {
		h.fail(w, r, fmt.Errorf("%w: idempotency key longer than %d bytes", host.ErrInvalid, host.MaxKeyLen))
		return
	}
	action := record.AnswerAction(req.Action)
	if !action.Valid() {
		h.fail(w, r, fmt.Errorf("%w: action %q: want approve, edit, reject or respond", host.ErrInvalid, req.Action))
		return
	}
	a := host.Approval{Action: action, Message: req.Message, Key: key}
	if len(req.Arguments) > 0 && string(req.Arguments) != "null" {
		if action != record.AnswerEdit {
			h.fail(w, r, fmt.Errorf("%w: arguments go with edit only", host.ErrInvalid))
			return
		}
		a.Arguments = string(req.Arguments)
	} else if action == record.AnswerEdit {
		h.fail(w, r, fmt.Errorf("%w: edit needs arguments: the JSON object the call runs with", host.ErrInvalid))
		return
	}
	res, err := h.rt.Answer(r.Context(), runID, callID, a)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := ApprovalReply{Answer: toApprovalAnswer(res.Step), Duplicate: res.Duplicate, Run: toRun(res.Run)}
	if full, err := h.fullRun(r.Context(), runID); err == nil {
		out.Run = full
	}
	writeJSON(w, http.StatusOK, out)
}

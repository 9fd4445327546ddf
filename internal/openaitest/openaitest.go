// Package openaitest is a fake OpenAI-compatible chat completions server for
// tests and examples. It answers by rule, plainly or streamed:
//
//   - the last user message is "plan PLAN", PLAN a JSON list of model
//     steps, each a list of tool calls {"tool": NAME, "arguments": ARGS}:
//     model step i (the assistant messages that called tools since that
//     user message) calls the tools of PLAN[i], all in one message; past
//     the plan it answers "done: " and every tool result since that user
//     message, in order, joined by " | ";
//   - the last message is a tool result: it answers "tool said: " and the
//     result;
//   - the last user message is "call TOOL ARGS": it calls TOOL (the name as
//     offered, which must be among the request's tools) with the JSON
//     ARGS;
//   - the last user message is "hang": it never answers (until the request
//     is abandoned);
//   - the last user message is "system?": it answers "system: " and the
//     system prompt;
//   - otherwise it answers "echo: " and the message.
//
// A streamed answer comes in pieces of at most three words. Every request
// body is kept for inspection, and a test may hold a request before it is
// answered (SetHold).
package openaitest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
)

// Server is the fake endpoint; its URL plus "/v1" is the base URL.
type Server struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []map[string]any
	hold func(context.Context, Request)
}

// Request is what a hold sees of a request.
type Request struct {
	// N is the request's number, from 1.
	N int
	// LastUser is the content of the last user message.
	LastUser string
	// Step counts the assistant messages that called tools after the last
	// user message: the model step of a plan.
	Step int
}

// SetHold makes every request call hold before it is answered (nil: none).
// A request waits for hold to return; hold should also return when ctx,
// the request's, is done (the client went away).
func (s *Server) SetHold(hold func(ctx context.Context, r Request)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = hold
}

// New starts a fake server; Close stops it.
func New() *Server {
	s := &Server{}
	s.Server = httptest.NewServer(s)
	return s
}

// BaseURL is the API root to configure a model with.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Requests returns the request bodies received, oldest first.
func (s *Server) Requests() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

type message struct {
	Role       string `json:"role"`
	Content    any    `json:"content"`
	ToolCallID string `json:"tool_call_id"`
	ToolCalls  []any  `json:"tool_calls"`
}

// planCall is one tool call of a plan.
type planCall struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

func text(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any: // content parts
		var b strings.Builder
		for _, p := range v {
			if m, ok := p.(map[string]any); ok {
				s, _ := m["text"].(string)
				b.WriteString(s)
			}
		}
		return b.String()
	}
	return ""
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"no such route"}}`, http.StatusNotFound)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, body)
	n := len(s.reqs)
	hold := s.hold
	s.mu.Unlock()
	raw, _ := json.Marshal(body["messages"])
	var msgs []message
	json.Unmarshal(raw, &msgs)
	lastUser, since := "", 0 // since: index after the last user message
	for i, m := range msgs {
		if m.Role == "user" {
			lastUser, since = text(m.Content), i+1
		}
	}
	step := 0
	for _, m := range msgs[since:] {
		if m.Role == "assistant" && len(m.ToolCalls) > 0 {
			step++
		}
	}
	if hold != nil {
		hold(r.Context(), Request{N: n, LastUser: lastUser, Step: step})
		if r.Context().Err() != nil {
			return
		}
	}
	var tools []string
	if ts, ok := body["tools"].([]any); ok {
		for _, t := range ts {
			if m, ok := t.(map[string]any); ok {
				if f, ok := m["function"].(map[string]any); ok {
					name, _ := f["name"].(string)
					tools = append(tools, name)
				}
			}
		}
	}
	var answer string
	var calls [][2]string // name, arguments
	switch {
	case strings.HasPrefix(lastUser, "plan "):
		var plan [][]planCall
		if err := json.Unmarshal([]byte(strings.TrimPrefix(lastUser, "plan ")), &plan); err != nil {
			answer = "bad plan: " + err.Error()
			break
		}
		if step >= len(plan) {
			var results []string
			for _, m := range msgs[since:] {
				if m.Role == "tool" {
					results = append(results, text(m.Content))
				}
			}
			answer = "done: " + strings.Join(results, " | ")
			break
		}
		for _, c := range plan[step] {
			if !slices.Contains(tools, c.Tool) {
				answer, calls = fmt.Sprintf("no tool %s offered (tools: %s)", c.Tool, strings.Join(tools, ",")), nil
				break
			}
			args := string(c.Arguments)
			if args == "" {
				args = "{}"
			}
			calls = append(calls, [2]string{c.Tool, args})
		}
	case len(msgs) > 0 && msgs[len(msgs)-1].Role == "tool":
		answer = "tool said: " + text(msgs[len(msgs)-1].Content)
	default:
		last := lastUser
		switch {
		case last == "hang":
			<-r.Context().Done()
			return
		case last == "system?":
			sys := ""
			for _, m := range msgs {
				if m.Role == "system" {
					sys += text(m.Content)
				}
			}
			answer = "system: " + sys
		case strings.HasPrefix(last, "call "):
			name, args, _ := strings.Cut(strings.TrimPrefix(last, "call "), " ")
			if !slices.Contains(tools, name) {
				answer = fmt.Sprintf("no tool %s offered (tools: %s)", name, strings.Join(tools, ","))
				break
			}
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			calls = [][2]string{{name, args}}
		default:
			answer = "echo: " + last
		}
	}
	model, _ := body["model"].(string)
	id := fmt.Sprintf("chatcmpl-%d", n)
	if stream, _ := body["stream"].(bool); stream {
		writeStream(w, id, model, answer, calls)
		return
	}
	msg := map[string]any{"role": "assistant", "content": answer}
	finish := "stop"
	if len(calls) > 0 {
		msg["content"] = nil
		var tcs []any
		for i, c := range calls {
			tcs = append(tcs, map[string]any{"id": callID(id, i), "type": "function", "function": map[string]any{"name": c[0], "arguments": c[1]}})
		}
		msg["tool_calls"] = tcs
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": id, "object": "chat.completion", "created": 0, "model": model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
	})
}

// callID is the id of the i-th tool call of answer id: "call_" and the
// answer's id for the first, as it always was, then "_i".
func callID(id string, i int) string {
	if i == 0 {
		return "call_" + id
	}
	return fmt.Sprintf("call_%s_%d", id, i)
}

func writeStream(w http.ResponseWriter, id, model, answer string, calls [][2]string) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl, _ := w.(http.Flusher)
	send := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
		})
		fmt.Fprintf(w, "data: %s\n\n", b)
		if fl != nil {
			fl.Flush()
		}
	}
	send(map[string]any{"role": "assistant", "content": ""}, nil)
	if len(calls) > 0 {
		for i, c := range calls {
			send(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": callID(id, i), "type": "function", "function": map[string]any{"name": c[0], "arguments": ""}}}}, nil)
			send(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": c[1]}}}}, nil)
		}
		send(map[string]any{}, "tool_calls")
	} else {
		words := strings.SplitAfter(answer, " ")
		for i := 0; i < len(words); i += 3 {
			send(map[string]any{"content": strings.Join(words[i:min(i+3, len(words))], "")}, nil)
		}
		send(map[string]any{}, "stop")
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

package openaitest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func post(t *testing.T, s *Server, body map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(s.BaseURL()+"/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return string(out)
}

func TestPlan(t *testing.T) {
	s := New()
	defer s.Close()
	var held []Request
	s.SetHold(func(ctx context.Context, r Request) { held = append(held, r) })
	tools := []any{
		map[string]any{"type": "function", "function": map[string]any{"name": "t_echo"}},
		map[string]any{"type": "function", "function": map[string]any{"name": "t_add"}},
	}
	plan := `plan [[{"tool":"t_echo","arguments":{"text":"a"}},{"tool":"t_add","arguments":{"a":1,"b":2}}],[{"tool":"t_echo","arguments":{"text":"b"}}]]`
	msgs := []any{map[string]any{"role": "user", "content": "earlier"}, map[string]any{"role": "assistant", "content": "x"},
		map[string]any{"role": "user", "content": plan}}
	// Step 0: both calls of the plan's first step, in one message.
	out := post(t, s, map[string]any{"model": "m", "messages": msgs, "tools": tools})
	var resp struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil || len(resp.Choices) != 1 {
		t.Fatalf("step 0: %s %v", out, err)
	}
	tc := resp.Choices[0].Message.ToolCalls
	if len(tc) != 2 || tc[0].Function.Name != "t_echo" || tc[0].Function.Arguments != `{"text":"a"}` ||
		tc[1].Function.Name != "t_add" || tc[0].ID == tc[1].ID || resp.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("step 0: %s", out)
	}
	call := map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "1"}, map[string]any{"id": "2"}}}
	msgs = append(msgs, call, map[string]any{"role": "tool", "content": "a"}, map[string]any{"role": "tool", "content": "3"})
	// Step 1, streamed.
	out = post(t, s, map[string]any{"model": "m", "messages": msgs, "tools": tools, "stream": true})
	if !strings.Contains(out, `"name":"t_echo"`) || !strings.Contains(out, `{\"text\":\"b\"}`) || strings.Contains(out, "t_add") {
		t.Fatalf("step 1: %s", out)
	}
	msgs = append(msgs, call, map[string]any{"role": "tool", "content": "b"})
	// Past the plan: every result since the plan's message.
	out = post(t, s, map[string]any{"model": "m", "messages": msgs, "tools": tools})
	if !strings.Contains(out, `"content":"done: a | 3 | b"`) {
		t.Fatalf("answer: %s", out)
	}
	if len(held) != 3 || held[0].Step != 0 || held[1].Step != 1 || held[2].Step != 2 || held[2].LastUser != plan || held[2].N != 3 {
		t.Fatalf("held %+v", held)
	}
	// A tool the request does not offer is said so, not called.
	out = post(t, s, map[string]any{"model": "m", "messages": msgs[:3], "tools": tools[:1]})
	if !strings.Contains(out, "no tool t_add offered") || strings.Contains(out, "tool_calls") {
		t.Fatalf("missing tool: %s", out)
	}
}

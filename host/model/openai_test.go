package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/record"
)

// fakeAPI is an OpenAI-compatible chat completions server. Each request is
// answered by the next handler in replies (the last one again when there are
// more requests); it records what it received.
type fakeAPI struct {
	t       *testing.T
	srv     *httptest.Server
	replies []http.HandlerFunc

	mu   sync.Mutex
	reqs []fakeRequest
}

type fakeRequest struct {
	At     time.Time
	Path   string
	Header http.Header
	Body   map[string]any
	Raw    string
}

func newFakeAPI(t *testing.T, replies ...http.HandlerFunc) *fakeAPI {
	t.Helper()
	f := &fakeAPI{t: t, replies: replies}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		f.t.Errorf("request body is not JSON: %v: %s", err, raw)
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, fakeRequest{At: time.Now(), Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Raw: string(raw)})
	n := len(f.reqs)
	f.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	f.replies[min(n, len(f.replies))-1](w, r)
}

func (f *fakeAPI) requests() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.reqs...)
}

// model returns a model for the server with quick retries.
func (f *fakeAPI) model(t *testing.T, edit ...func(*OpenAIConfig)) *OpenAI {
	t.Helper()
	cfg := OpenAIConfig{BaseURL: f.srv.URL + "/v1", Model: "test-model", APIKey: "sk-test", MaxRetryDelay: time.Millisecond}
	for _, e := range edit {
		e(&cfg)
	}
	m, err := NewOpenAI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// reply answers with a JSON body.
func reply(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// completion is a chat.completion body with one choice.
func completion(message, finish string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"test-model",` +
		`"choices":[{"index":0,"message":` + message + `,"logprobs":null,"finish_reason":"` + finish + `"}],` +
		`"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`
}

// chunk is a chat.completion.chunk body with one choice.
func chunk(delta, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1700000000,"model":"test-model",` +
		`"choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + f + `}]}`
}

// sse answers with an event stream of the given data lines, each flushed on
// its own, then "data: [DONE]" unless done is false.
func sse(done bool, data ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fl := w.(http.Flusher)
		for _, d := range data {
			fmt.Fprintf(w, "data: %s\n\n", d)
			fl.Flush()
		}
		if done {
			io.WriteString(w, "data: [DONE]\n\n")
		}
	}
}

// asJSON decodes s for comparison with decoded request bodies.
func asJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad test JSON %s: %v", s, err)
	}
	return v
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestOpenAIPlainCompletion(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, reply(200, completion(`{"role":"assistant","content":"Paris.","refusal":null}`, "stop")))
	m := f.model(t)
	resp, err := m.Step(context.Background(), Request{
		System:     "Be brief.",
		Messages:   []record.Message{{ID: "m1", Role: record.RoleUser, Content: "Capital of France?"}},
		ToolChoice: "auto",
		Params: Params{
			Model: "other-model", Temperature: ptr(0.2), TopP: ptr(0.9), MaxTokens: 100, Stop: []string{"\n\n", "END"},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Content != "Paris." || len(resp.ToolCalls) != 0 {
		t.Fatalf("response %+v", resp)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if got := r.Header.Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization %q", got)
	}
	want := asJSON(t, `{
		"model": "other-model",
		"messages": [
			{"role": "system", "content": "Be brief."},
			{"role": "user", "content": "Capital of France?"}
		],
		"temperature": 0.2, "top_p": 0.9, "max_tokens": 100, "stop": ["\n\n", "END"]
	}`)
	// No tools: tool_choice is left out (the API rejects it without tools),
	// and nothing asks for a stream.
	if !reflect.DeepEqual(r.Body, want) {
		t.Errorf("request body\n got %s\nwant %s", jsonText(r.Body), jsonText(want))
	}
}

func TestOpenAIToolCallAndExchange(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, reply(200, completion(`{"role":"assistant","content":null,"refusal":null,"tool_calls":[
		{"id":"call_b","type":"function","function":{"name":"search","arguments":"{\"q\":\"rain\"}"}},
		{"id":"call_c","type":"function","function":{"name":"clock","arguments":""}}]}`, "tool_calls")))
	m := f.model(t)
	req := Request{
		Step:   1,
		System: "You have tools.",
		Messages: []record.Message{
			{ID: "m1", Role: record.RoleUser, Content: "Weather in Oslo?"},
			{ID: "m2", Role: record.RoleAssistant, ToolCalls: []record.ToolCall{{ID: "call_a", Name: "search", Arguments: `{"q":"oslo"}`}}},
			{ID: "m3", Role: record.RoleTool, ToolCallID: "call_a", Content: "sunny, 12C"},
			{ID: "m4", Role: record.RoleAssistant, Content: "It is sunny."},
			{ID: "m5", Role: record.RoleUser, Content: "And will it rain? What time is it?"},
		},
		Tools: []ToolSpec{
			{Name: "search", Description: "Search the web.", Parameters: `{"type":"object","properties":{"q":{"type":"string","maxLength":100}},"required":["q"]}`},
			{Name: "clock"},
		},
		ToolChoice: "required",
	}
	resp, err := m.Step(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantCalls := []record.ToolCall{
		{ID: "call_b", Name: "search", Arguments: `{"q":"rain"}`},
		{ID: "call_c", Name: "clock", Arguments: `{}`},
	}
	if resp.Content != "" || !reflect.DeepEqual(resp.ToolCalls, wantCalls) {
		t.Fatalf("response %+v", resp)
	}
	body := f.requests()[0].Body
	want := asJSON(t, `{
		"model": "test-model",
		"messages": [
			{"role": "system", "content": "You have tools."},
			{"role": "user", "content": "Weather in Oslo?"},
			{"role": "assistant", "tool_calls": [
				{"id": "call_a", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"oslo\"}"}}
			]},
			{"role": "tool", "tool_call_id": "call_a", "content": "sunny, 12C"},
			{"role": "assistant", "content": "It is sunny."},
			{"role": "user", "content": "And will it rain? What time is it?"}
		],
		"tools": [
			{"type": "function", "function": {"name": "search", "description": "Search the web.",
				"parameters": {"type": "object", "properties": {"q": {"type": "string", "maxLength": 100}}, "required": ["q"]}}},
			{"type": "function", "function": {"name": "clock", "parameters": {"type": "object", "properties": {}}}}
		],
		"tool_choice": "required"
	}`)
	if !reflect.DeepEqual(body, want) {
		t.Errorf("request body\n got %s\nwant %s", jsonText(body), jsonText(want))
	}

	// A tool name as the choice becomes a named function choice.
	req.ToolChoice = "clock"
	if _, err := m.Step(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	got := f.requests()[1].Body["tool_choice"]
	if w := asJSON(t, `{"type":"function","function":{"name":"clock"}}`); !reflect.DeepEqual(got, w) {
		t.Errorf("tool_choice %s, want %s", jsonText(got), jsonText(w))
	}
}

func TestOpenAIStreamedAnswer(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, sse(true,
		chunk(`{"role":"assistant","content":""}`, ""),
		chunk(`{"content":"The sky "}`, ""),
		chunk(`{"content":"is "}`, ""),
		chunk(`{"content":"blue."}`, ""),
		chunk(`{}`, "stop"),
	))
	m := f.model(t)
	var deltas []string
	resp, err := m.Step(context.Background(), Request{
		Messages: []record.Message{{Role: record.RoleUser, Content: "Sky colour?"}},
	}, func(d string) { deltas = append(deltas, d) })
	if err != nil {
		t.Fatal(err)
	}
	if resp.Content != "The sky is blue." || len(resp.ToolCalls) != 0 {
		t.Fatalf("response %+v", resp)
	}
	if want := []string{"The sky ", "is ", "blue."}; !reflect.DeepEqual(deltas, want) {
		t.Errorf("deltas %q, want %q", deltas, want)
	}
	if s := f.requests()[0].Body["stream"]; s != true {
		t.Errorf("stream = %v in the request", s)
	}
}

func TestOpenAIStreamedToolCalls(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, sse(true,
		chunk(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"search","arguments":""}}]}`, ""),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"oslo weather\"}"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"clock","arguments":"{\"tz\""}}]}`, ""),
		chunk(`{"tool_calls":[{"index":1,"function":{"arguments":":\"CET\"}"}}]}`, ""),
		chunk(`{}`, "tool_calls"),
	))
	m := f.model(t)
	var deltas []string
	resp, err := m.Step(context.Background(), Request{
		Messages:   []record.Message{{Role: record.RoleUser, Content: "Weather and time?"}},
		Tools:      []ToolSpec{{Name: "search"}, {Name: "clock"}},
		ToolChoice: "auto",
	}, func(d string) { deltas = append(deltas, d) })
	if err != nil {
		t.Fatal(err)
	}
	want := []record.ToolCall{
		{ID: "call_1", Name: "search", Arguments: `{"q":"oslo weather"}`},
		{ID: "call_2", Name: "clock", Arguments: `{"tz":"CET"}`},
	}
	if resp.Content != "" || !reflect.DeepEqual(resp.ToolCalls, want) {
		t.Fatalf("response %+v, want calls %+v", resp, want)
	}
	if len(deltas) != 0 {
		t.Errorf("deltas %q for a tool call", deltas)
	}
	body := f.requests()[0].Body
	if body["stream"] != true || body["tool_choice"] != "auto" || len(body["tools"].([]any)) != 2 {
		t.Errorf("request %s", jsonText(body))
	}
}

// Servers differ in how they split tool calls: several calls in one chunk,
// the id and name repeated in every chunk, text before the calls, index -1
// for a single call, no id at all.
func TestOpenAIStreamedToolCallVariants(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		chunks  []string
		content string
		want    []record.ToolCall
	}{
		{
			name: "repeated id and name, text first",
			chunks: []string{
				chunk(`{"role":"assistant","content":"Let me look. "}`, ""),
				chunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"search","arguments":"{\"q\":"}},`+
					`{"index":1,"id":"call_2","type":"function","function":{"name":"clock","arguments":"{}"}}]}`, ""),
				chunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"search","arguments":"1}"}}]}`, ""),
				chunk(`{}`, "tool_calls"),
			},
			content: "Let me look. ",
			want:    []record.ToolCall{{ID: "call_1", Name: "search", Arguments: `{"q":1}`}, {ID: "call_2", Name: "clock", Arguments: `{}`}},
		},
		{
			name: "index -1 without id, name split",
			chunks: []string{
				chunk(`{"role":"assistant","tool_calls":[{"index":-1,"function":{"name":"sea","arguments":""}}]}`, ""),
				chunk(`{"tool_calls":[{"index":-1,"function":{"name":"rch","arguments":"{\"q\":\"x\"}"}}]}`, "tool_calls"),
			},
			want: []record.ToolCall{{ID: "call_2_0", Name: "search", Arguments: `{"q":"x"}`}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newFakeAPI(t, sse(true, tc.chunks...)).model(t)
			var text strings.Builder
			resp, err := m.Step(context.Background(), Request{Step: 2, Messages: []record.Message{{Role: record.RoleUser, Content: "x"}}},
				func(d string) { text.WriteString(d) })
			if err != nil {
				t.Fatal(err)
			}
			if resp.Content != tc.content || text.String() != tc.content || !reflect.DeepEqual(resp.ToolCalls, tc.want) {
				t.Errorf("response %+v (streamed %q), want %q and %+v", resp, text.String(), tc.content, tc.want)
			}
		})
	}
}

func TestOpenAIStreamFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		reply http.HandlerFunc
		want  string
	}{
		{"no finish", sse(false, chunk(`{"role":"assistant","content":"The sky"}`, "")), "stream ended before the answer was finished"},
		{"error event", sse(false, chunk(`{"content":"The"}`, ""), `{"error":{"message":"the model crashed","type":"server_error"}}`), "the model crashed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newFakeAPI(t, tc.reply).model(t)
			_, err := m.Step(context.Background(), Request{Messages: []record.Message{{Role: record.RoleUser, Content: "x"}}}, func(string) {})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestOpenAIRetriesRateLimitAndServerErrors(t *testing.T) {
	t.Parallel()
	ok := reply(200, completion(`{"role":"assistant","content":"done"}`, "stop"))
	for _, status := range []int{429, 500, 502, 503} {
		for _, streamed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/stream=%v", status, streamed), func(t *testing.T) {
				t.Parallel()
				second := ok
				var stream func(string)
				if streamed {
					second = sse(true, chunk(`{"role":"assistant","content":"done"}`, "stop"))
					stream = func(string) {}
				}
				f := newFakeAPI(t, reply(status, `{"error":{"message":"busy","type":"x"}}`), second)
				resp, err := f.model(t).Step(context.Background(), Request{Messages: []record.Message{{Role: record.RoleUser, Content: "x"}}}, stream)
				if err != nil {
					t.Fatal(err)
				}
				if resp.Content != "done" {
					t.Fatalf("response %+v", resp)
				}
				reqs := f.requests()
				if len(reqs) != 2 {
					t.Fatalf("%d requests, want 2", len(reqs))
				}
				if reqs[0].Raw != reqs[1].Raw {
					t.Errorf("retry sent another body:\n%s\n%s", reqs[0].Raw, reqs[1].Raw)
				}
			})
		}
	}
}

// The client waits as long as the server asks (within MaxRetryDelay), and
// retries a connection that drops before the answer.
func TestOpenAIRetryWaitsAndReconnects(t *testing.T) {
	t.Parallel()
	ok := reply(200, completion(`{"role":"assistant","content":"done"}`, "stop"))
	slowDown := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After-Ms", "60")
		reply(429, `{"error":{"message":"Rate limit reached","type":"requests"}}`)(w, r)
	}
	f := newFakeAPI(t, slowDown, ok)
	if _, err := f.model(t, func(c *OpenAIConfig) { c.MaxRetryDelay = time.Second }).Step(context.Background(), Request{}, nil); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	if gap := reqs[1].At.Sub(reqs[0].At); gap < 60*time.Millisecond {
		t.Errorf("retried after %v, the server asked for 60ms", gap)
	}

	hangUp := func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	}
	f = newFakeAPI(t, hangUp, ok)
	resp, err := f.model(t).Step(context.Background(), Request{}, nil)
	if err != nil || resp.Content != "done" || len(f.requests()) != 2 {
		t.Fatalf("response %+v, err %v after %d requests", resp, err, len(f.requests()))
	}
}

func TestOpenAIRetriesExhausted(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, reply(503, `{"error":{"message":"overloaded, try later","type":"server_error","code":"overloaded"}}`))
	_, err := f.model(t, func(c *OpenAIConfig) { c.MaxRetries = 3 }).Step(context.Background(), Request{}, nil)
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("err %v (%T), want an *APIError", err, err)
	}
	if n := len(f.requests()); n != 4 {
		t.Errorf("%d requests, want 4", n)
	}
	if apiErr.StatusCode != 503 || apiErr.Attempts != 4 || apiErr.Code != "overloaded" {
		t.Errorf("error %+v", apiErr)
	}
	for _, s := range []string{"503", "Service Unavailable", "after 4 attempts", "overloaded, try later"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}

	// A negative MaxRetries disables retries.
	f = newFakeAPI(t, reply(500, `{"error":{"message":"boom"}}`))
	if _, err := f.model(t, func(c *OpenAIConfig) { c.MaxRetries = -1 }).Step(context.Background(), Request{}, nil); err == nil {
		t.Fatal("no error")
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests with retries disabled", n)
	}
}

func TestOpenAIClientErrorsNotRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		body   string
		msg    string
	}{
		{400, `{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error","param":"temperature","code":null}}`, "Invalid value for 'temperature'"},
		{401, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`, "Incorrect API key provided"},
		{404, `{"error":"model \"nope\" not found, try pulling it first"}`, `model "nope" not found`},                                  // Ollama
		{400, `{"object":"error","message":"max_tokens is too large","type":"BadRequestError","code":400}`, "max_tokens is too large"}, // vLLM
		{408, `upstream timed out`, "upstream timed out"},
		{409, `{"detail":"conflict"}`, "conflict"},
		// A server asking for a retry of a 4xx is not obeyed.
		{422, `{"error":{"message":"unprocessable"}}`, "unprocessable"},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("x-should-retry", "true")
				reply(tc.status, tc.body)(w, r)
			})
			_, err := f.model(t).Step(context.Background(), Request{}, nil)
			if n := len(f.requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status {
				t.Fatalf("err %v, want an *APIError with status %d", err, tc.status)
			}
			if !strings.Contains(err.Error(), fmt.Sprint(tc.status)) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not name the status and %q", err, tc.msg)
			}
			if strings.Contains(err.Error(), "attempts") {
				t.Errorf("error %q counts attempts", err)
			}
		})
	}
}

func TestOpenAIContextCancellation(t *testing.T) {
	t.Parallel()
	t.Run("waiting for the answer", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{}, 1)
		f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
			arrived <- struct{}{}
			<-r.Context().Done()
		})
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-arrived; cancel() }()
		start := time.Now()
		_, err := f.model(t).Step(ctx, Request{}, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %v", d)
		}
		if n := len(f.requests()); n != 1 {
			t.Errorf("%d requests after cancellation", n)
		}
	})
	t.Run("while streaming", func(t *testing.T) {
		t.Parallel()
		f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: %s\n\n", chunk(`{"role":"assistant","content":"Once"}`, ""))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var deltas []string
		_, err := f.model(t).Step(ctx, Request{}, func(d string) { deltas = append(deltas, d); cancel() })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		if !reflect.DeepEqual(deltas, []string{"Once"}) {
			t.Errorf("deltas %q", deltas)
		}
	})
	t.Run("during backoff", func(t *testing.T) {
		t.Parallel()
		f := newFakeAPI(t, reply(429, `{"error":{"message":"slow down"}}`))
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		m := f.model(t, func(c *OpenAIConfig) { c.MaxRetryDelay = time.Hour; c.MaxRetries = 5 })
		_, err := m.Step(ctx, Request{}, nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v, want context.DeadlineExceeded", err)
		}
	})
}

func TestOpenAITimeoutPerAttempt(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, reply(200, completion(`{"role":"assistant","content":"late"}`, "stop")))
	// The first attempt hangs until its timeout; the second must answer
	// within the same timeout, so it is long enough for a loaded machine.
	resp, err := f.model(t, func(c *OpenAIConfig) { c.Timeout = 2 * time.Second }).Step(context.Background(), Request{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Content != "late" || len(f.requests()) != 2 {
		t.Errorf("response %+v after %d requests", resp, len(f.requests()))
	}
}

// The model reads nothing from the environment: without an APIKey no
// Authorization header is sent, whatever OPENAI_API_KEY says.
func TestOpenAIIgnoresEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	f := newFakeAPI(t, reply(200, completion(`{"role":"assistant","content":"ok"}`, "stop")))
	m := f.model(t, func(c *OpenAIConfig) { c.APIKey = "" })
	if _, err := m.Step(context.Background(), Request{}, nil); err != nil {
		t.Fatal(err)
	}
	if h := f.requests()[0].Header.Get("Authorization"); h != "" {
		t.Errorf("Authorization %q", h)
	}
}

func TestOpenAIConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  OpenAIConfig
		want string
	}{
		{"no model", OpenAIConfig{BaseURL: "http://localhost:11434/v1"}, "no model name"},
		{"blank model", OpenAIConfig{Model: "  "}, "no model name"},
		{"unparsable", OpenAIConfig{Model: "m", BaseURL: "http://[::1"}, "base URL"},
		{"no scheme", OpenAIConfig{Model: "m", BaseURL: "localhost:8080/v1"}, "not an absolute http or https URL"},
		{"relative", OpenAIConfig{Model: "m", BaseURL: "/v1"}, "not an absolute http or https URL"},
		{"other scheme", OpenAIConfig{Model: "m", BaseURL: "ftp://example.com/v1"}, "not an absolute http or https URL"},
		{"query", OpenAIConfig{Model: "m", BaseURL: "http://example.com/v1?x=1"}, "query"},
		{"negative retry delay", OpenAIConfig{Model: "m", MaxRetryDelay: -time.Second}, "negative"},
	} {
		if _, err := NewOpenAI(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	if _, err := NewOpenAI(OpenAIConfig{Model: "gpt-4o-mini"}); err != nil {
		t.Errorf("default base URL: %v", err)
	}
}

func TestOpenAIRequestErrors(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, reply(200, completion(`{"role":"assistant","content":"ok"}`, "stop")))
	m := f.model(t)
	for _, tc := range []struct {
		name string
		req  Request
		want string
	}{
		{"blank model", Request{Params: Params{Model: " "}}, `model parameter model: blank model name`},
		{"non-finite float", Request{Params: Params{TopP: ptr(math.NaN())}}, `model parameter top_p: NaN is not a number`},
		{"infinite float", Request{Params: Params{Temperature: ptr(math.Inf(1))}}, `model parameter temperature: +Inf is not a number`},
		{"negative max tokens", Request{Params: Params{MaxTokens: -1}}, `model parameter max_tokens: -1 is negative`},
		{"empty stop", Request{Params: Params{Stop: []string{"x", ""}}}, `model parameter stop: sequence 1 is empty`},
		{"bad schema", Request{Tools: []ToolSpec{{Name: "t", Parameters: `[1]`}}}, `tool "t": parameters are not a JSON schema object`},
		{"null schema", Request{Tools: []ToolSpec{{Name: "t", Parameters: `null`}}}, `tool "t": parameters are not a JSON schema object`},
		{"unknown tool choice", Request{Tools: []ToolSpec{{Name: "t"}}, ToolChoice: "u"}, `tool choice "u" names no tool`},
		{"required without tools", Request{ToolChoice: "required"}, `tool choice "required" without tools`},
		{"tool result without call", Request{Messages: []record.Message{{ID: "m9", Role: record.RoleTool, Content: "x"}}}, "message 0 (m9): tool result without a tool call id"},
		{"unknown role", Request{Messages: []record.Message{{Role: "system"}}}, `unknown role "system"`},
	} {
		if _, err := m.Step(context.Background(), tc.req, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests for invalid steps", n)
	}
}

func TestOpenAIResponseEdgeCases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		body    string
		want    Response
		wantErr string
	}{
		{"refusal", completion(`{"role":"assistant","content":null,"refusal":"I can't help with that."}`, "stop"), Response{Content: "I can't help with that."}, ""},
		{"call without id", completion(`{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"clock","arguments":"{}"}}]}`, "tool_calls"),
			Response{ToolCalls: []record.ToolCall{{ID: "call_3_0", Name: "clock", Arguments: "{}"}}}, ""},
		{"cut off tool call", completion(`{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"clock","arguments":"{\"tz"}}]}`, "length"),
			Response{}, "cut off at the token limit"},
		{"cut off answer", completion(`{"role":"assistant","content":"Once upon"}`, "length"), Response{Content: "Once upon"}, ""},
		{"filtered", completion(`{"role":"assistant","content":null}`, "content_filter"), Response{}, "content filter"},
		{"no choices", `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[]}`, Response{}, "without choices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newFakeAPI(t, reply(200, tc.body)).model(t)
			resp, err := m.Step(context.Background(), Request{Step: 3}, nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Every completion of this table reports 10 prompt and 2
			// completion tokens.
			tc.want.Usage = Usage{InputTokens: 10, OutputTokens: 2}
			if !reflect.DeepEqual(resp, tc.want) {
				t.Errorf("response %+v, want %+v", resp, tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestOpenAISendsEveryABIParameter: the request carries every model
// parameter the prepareStep ABI has (a new one must be added to setParams,
// whose test above lists them all).
func TestOpenAISendsEveryABIParameter(t *testing.T) {
	typ := reflect.TypeOf(Params{})
	var names []string
	for i := range typ.NumField() {
		names = append(names, typ.Field(i).Name)
	}
	if got := strings.Join(names, ","); got != "Model,Temperature,TopP,MaxTokens,Stop" {
		t.Fatalf("the ABI's model parameters are %s; send each in setParams and extend TestOpenAIPlainCompletion", got)
	}
}

package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agenthost/agenthost/abi/record"
)

// DefaultOpenAIBaseURL is the endpoint an OpenAI model uses when its
// configuration names none.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1"

// DefaultOpenAITimeout bounds each request of a model call when
// OpenAIConfig.Timeout is zero.
const DefaultOpenAITimeout = 120 * time.Second

// OpenAIConfig configures a model served by an OpenAI-compatible chat
// completions endpoint: OpenAI itself, or a local server such as Ollama
// (http://localhost:11434/v1), vLLM (http://localhost:8000/v1) or the
// llama.cpp server (http://localhost:8080/v1).
//
// Nothing is read from the environment: OPENAI_API_KEY, OPENAI_BASE_URL and
// the like are ignored, so a key meant for OpenAI is never sent to another
// endpoint by accident.
type OpenAIConfig struct {
	// BaseURL is the API root, to which "chat/completions" is appended.
	// Empty means DefaultOpenAIBaseURL. It must be an absolute http or https
	// URL.
	BaseURL string
	// Model is the model name sent with each request. Required.
	Model string
	// APIKey is sent as a bearer token. Empty sends no Authorization header,
	// as local servers expect.
	APIKey string
	// MaxRetries is how many times a request is tried again after a 429 or
	// 5xx response, or a failed connection. Zero means 2; a negative value
	// disables retries. Other 4xx responses are never retried.
	MaxRetries int
	// MaxRetryDelay caps the wait between attempts. The wait doubles from
	// 0.5s with each retry, or is what the server asks for in Retry-After;
	// a server asking for longer than MaxRetryDelay is not retried. Zero
	// means the client's defaults: backoff capped at 8s, Retry-After
	// honoured up to 2 minutes.
	MaxRetryDelay time.Duration
	// Timeout bounds each attempt, including reading a streamed answer; an
	// attempt that times out is retried like a failed connection, and the
	// step fails once the retries are used up. Zero means
	// DefaultOpenAITimeout; a negative value sets no limit beyond the
	// context's.
	Timeout time.Duration
	// HTTPClient makes the requests. Nil means http.DefaultClient. With a
	// Timeout, a copy of it is used with its Timeout set.
	HTTPClient *http.Client
}

// OpenAI is a Model backed by an OpenAI-compatible chat completions
// endpoint. It is safe for concurrent use.
type OpenAI struct {
	model string
	chat  openai.ChatCompletionService
}

var _ Model = (*OpenAI)(nil)

// defaultOpenAIRetries is the number of retries when OpenAIConfig.MaxRetries
// is zero.
const defaultOpenAIRetries = 2

// NewOpenAI returns a model calling the chat completions endpoint cfg
// describes. It reports a configuration without a model name, or with a base
// URL that is not an absolute http(s) URL, or with negative durations.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	name := strings.TrimSpace(cfg.Model)
	if name == "" {
		return nil, errors.New("openai model: no model name")
	}
	base := strings.TrimSpace(cfg.BaseURL)
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("openai model: base URL %q: %w", base, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("openai model: base URL %q is not an absolute http or https URL", base)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("openai model: base URL %q has a query or fragment", base)
	}
	if cfg.MaxRetryDelay < 0 {
		return nil, errors.New("openai model: negative retry delay")
	}
	switch {
	case cfg.Timeout == 0:
		cfg.Timeout = DefaultOpenAITimeout
	case cfg.Timeout < 0:
		cfg.Timeout = 0
	}
	retries := cfg.MaxRetries
	switch {
	case retries == 0:
		retries = defaultOpenAIRetries
	case retries < 0:
		retries = 0
	}
	opts := []option.RequestOption{
		option.WithBaseURL(u.String()),
		option.WithMaxRetries(retries),
		option.WithMiddleware(errorPolicy),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.MaxRetryDelay > 0 {
		opts = append(opts, option.WithMaxRetryDelay(cfg.MaxRetryDelay))
	}
	if hc := cfg.HTTPClient; hc != nil || cfg.Timeout > 0 {
		if hc == nil {
			hc = http.DefaultClient
		}
		if cfg.Timeout > 0 {
			// On the HTTP client rather than the client's per-request
			// timeout option, which is not retried.
			c := *hc
			c.Timeout = cfg.Timeout
			hc = &c
		}
		opts = append(opts, option.WithHTTPClient(hc))
	}
	// The service, unlike openai.NewClient, reads nothing from the
	// environment.
	return &OpenAI{
		model: name,
		chat:  openai.NewChatCompletionService(opts...),
	}, nil
}

// errorPolicy sees each response before the client does. It keeps the
// client from retrying 4xx responses other than 429 (on its own it also
// retries 408 and 409, and whatever a server marks with "x-should-retry:
// true"), and rewrites an error body of the form {"error": "text"}, which
// some servers send, to OpenAI's {"error": {"message": "text"}}, which the
// client expects.
func errorPolicy(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if err != nil || res == nil || res.StatusCode < 400 {
		return res, err
	}
	if res.StatusCode < 500 && res.StatusCode != http.StatusTooManyRequests {
		if res.Header == nil {
			res.Header = http.Header{}
		}
		res.Header.Set("x-should-retry", "false")
	}
	if res.Body == nil {
		return res, nil
	}
	// A body that fails to read is kept as far as it was read: the status
	// decides what happens next.
	body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	res.Body.Close()
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	var text string
	if json.Unmarshal(body, &v) == nil && json.Unmarshal(v.Error, &text) == nil {
		body, _ = json.Marshal(map[string]map[string]string{"error": {"message": text}})
		res.Header.Del("Content-Length")
		res.ContentLength = int64(len(body))
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res, nil
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// APIError is a response with an error status from the endpoint, after any
// retries.
type APIError struct {
	StatusCode int
	// Message is the server's explanation: the error message of an OpenAI
	// style error body, or else the start of the body as text.
	Message string
	// Type and Code are the OpenAI error type and code, when given.
	Type, Code string
	// Attempts is how many requests were made.
	Attempts int

	err error
}

// Error implements error. It names the status and the server's message.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "openai model: status %d", e.StatusCode)
	if t := http.StatusText(e.StatusCode); t != "" {
		b.WriteString(" " + t)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " after %d attempts", e.Attempts)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " (code %s)", e.Code)
	}
	return b.String()
}

// Unwrap returns the client's *openai.Error.
func (e *APIError) Unwrap() error { return e.err }

// maxErrorMessage bounds the error text taken from a response body.
const maxErrorMessage = 1000

// apiError turns the client's error for an error status into an APIError
// carrying the server's message.
func apiError(e *openai.Error) *APIError {
	out := &APIError{StatusCode: e.StatusCode, Message: e.Message, Type: e.Type, Code: e.Code, err: e}
	if e.Response != nil && e.Response.Request != nil {
		if n, err := strconv.Atoi(e.Response.Request.Header.Get("X-Stainless-Retry-Count")); err == nil {
			out.Attempts = n + 1
		}
	}
	if out.Message == "" && e.Response != nil && e.Response.Body != nil {
		body, _ := io.ReadAll(io.LimitReader(e.Response.Body, maxErrorBody))
		e.Response.Body = io.NopCloser(bytes.NewReader(body))
		out.Message = bodyMessage(body)
	}
	out.Message = truncate(out.Message)
	return out
}

// bodyMessage finds the message in an error body that is not in OpenAI's
// {"error": {"message": ...}} shape: {"error": "..."}, vLLM's
// {"message": "..."}, {"detail": "..."}, or plain text.
func bodyMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  string          `json:"detail"`
	}
	if json.Unmarshal(body, &v) == nil {
		var s string
		switch {
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case v.Message != "":
			return v.Message
		case v.Detail != "":
			return v.Detail
		}
	}
	return strings.Join(strings.Fields(string(body)), " ")
}

// Step implements Model. With stream set it uses the streaming endpoint and
// passes on each piece of the answer as it arrives.
func (m *OpenAI) Step(ctx context.Context, req Request, stream func(delta string)) (Response, error) {
	params, err := m.params(req)
	if err != nil {
		return Response{}, err
	}
	var msg openai.ChatCompletionMessage
	var finish string
	var usage Usage
	if stream == nil {
		msg, finish, usage, err = m.complete(ctx, params)
	} else {
		msg, finish, usage, err = m.stream(ctx, params, stream)
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			err = fmt.Errorf("%w (%v)", ctxErr, err)
		}
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			return Response{}, apiError(apiErr)
		}
		return Response{}, fmt.Errorf("openai model: %s: %w", m.model, err)
	}
	resp, err := response(req, msg, finish)
	resp.Usage = usage
	return resp, err
}

// complete makes one request to the plain endpoint.
func (m *OpenAI) complete(ctx context.Context, params openai.ChatCompletionNewParams) (openai.ChatCompletionMessage, string, Usage, error) {
	res, err := m.chat.New(ctx, params)
	if err != nil {
		return openai.ChatCompletionMessage{}, "", Usage{}, err
	}
	if len(res.Choices) == 0 {
		return openai.ChatCompletionMessage{}, "", Usage{}, errors.New("response without choices")
	}
	c := res.Choices[0]
	return c.Message, c.FinishReason, Usage{InputTokens: res.Usage.PromptTokens, OutputTokens: res.Usage.CompletionTokens}, nil
}

// stream makes one request to the streaming endpoint, passing content
// deltas to fn. Text is accumulated by the client's accumulator, tool calls
// by a streamedCalls.
func (m *OpenAI) stream(ctx context.Context, params openai.ChatCompletionNewParams, fn func(string)) (openai.ChatCompletionMessage, string, Usage, error) {
	// Ask for the usage chunk at the end (its tokens go to the metrics and
	// traces); servers that do not know the option ignore it.
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := m.chat.NewStreaming(ctx, params)
	defer s.Close()
	var acc openai.ChatCompletionAccumulator
	var calls streamedCalls
	finish := ""
	for s.Next() {
		chunk := s.Current()
		if !acc.AddChunk(chunk) {
			return openai.ChatCompletionMessage{}, "", Usage{}, errors.New("stream: chunk does not continue the answer")
		}
		for _, c := range chunk.Choices {
			if c.Index != 0 {
				continue
			}
			if c.Delta.Content != "" {
				fn(c.Delta.Content)
			}
			for _, d := range c.Delta.ToolCalls {
				calls.add(d)
			}
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	if err := s.Err(); err != nil {
		var se *ssestream.StreamError
		if errors.As(err, &se) {
			return openai.ChatCompletionMessage{}, "", Usage{}, fmt.Errorf("stream: %s", truncate(se.Message))
		}
		return openai.ChatCompletionMessage{}, "", Usage{}, fmt.Errorf("stream: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return openai.ChatCompletionMessage{}, "", Usage{}, err
	}
	if finish == "" || len(acc.Choices) == 0 {
		return openai.ChatCompletionMessage{}, "", Usage{}, errors.New("stream ended before the answer was finished")
	}
	msg := acc.Choices[0].Message
	msg.ToolCalls = calls.toolCalls()
	return msg, finish, Usage{InputTokens: acc.Usage.PromptTokens, OutputTokens: acc.Usage.CompletionTokens}, nil
}

// streamedCalls accumulates tool call deltas by index. The client's
// accumulator appends every name delta, so a server that repeats the
// function name in each chunk (some do) would call "searchsearch"; here a
// name delta equal to the name so far is a repeat, and an id is taken once.
type streamedCalls struct {
	byIndex map[int64]*streamedCall
}

type streamedCall struct {
	id, name string
	args     strings.Builder
}

func (s *streamedCalls) add(d openai.ChatCompletionChunkChoiceDeltaToolCall) {
	i := max(d.Index, 0) // some servers number a single call -1
	if s.byIndex == nil {
		s.byIndex = map[int64]*streamedCall{}
	}
	c := s.byIndex[i]
	if c == nil {
		c = &streamedCall{}
		s.byIndex[i] = c
	}
	if c.id == "" {
		c.id = d.ID
	}
	if n := d.Function.Name; n != "" && n != c.name {
		c.name += n
	}
	c.args.WriteString(d.Function.Arguments)
}

// toolCalls returns the calls in index order.
func (s *streamedCalls) toolCalls() []openai.ChatCompletionMessageToolCallUnion {
	idx := slices.Sorted(maps.Keys(s.byIndex))
	out := make([]openai.ChatCompletionMessageToolCallUnion, 0, len(idx))
	for _, i := range idx {
		c := s.byIndex[i]
		var tc openai.ChatCompletionMessageToolCallUnion
		tc.ID, tc.Type = c.id, "function"
		tc.Function.Name, tc.Function.Arguments = c.name, c.args.String()
		out = append(out, tc)
	}
	return out
}

// truncate shortens s to maxErrorMessage bytes.
func truncate(s string) string {
	if len(s) > maxErrorMessage {
		return strings.ToValidUTF8(s[:maxErrorMessage], "") + "..."
	}
	return s
}

// response turns the model's message into a Response. Tool calls without an
// id are given one (some local servers send none); empty arguments become
// "{}". A refusal with no content becomes the content.
func response(req Request, msg openai.ChatCompletionMessage, finish string) (Response, error) {
	out := Response{Content: msg.Content}
	if out.Content == "" {
		out.Content = msg.Refusal
	}
	for i, tc := range msg.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			return Response{}, fmt.Errorf("openai model: tool call %d is of unsupported type %q", i, tc.Type)
		}
		if tc.Function.Name == "" {
			return Response{}, fmt.Errorf("openai model: tool call %d without a function name", i)
		}
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", req.Step, i)
		}
		args := tc.Function.Arguments
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		out.ToolCalls = append(out.ToolCalls, record.ToolCall{ID: id, Name: tc.Function.Name, Arguments: args})
	}
	switch finish {
	case "length":
		if len(out.ToolCalls) > 0 {
			return Response{}, errors.New("openai model: answer cut off at the token limit while calling tools")
		}
		if out.Content == "" {
			return Response{}, errors.New("openai model: token limit reached before any answer")
		}
	case "content_filter":
		if out.Content == "" && len(out.ToolCalls) == 0 {
			return Response{}, errors.New("openai model: answer withheld by the content filter")
		}
	}
	return out, nil
}

// params builds the request body for req.
func (m *OpenAI) params(req Request) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(m.model)}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	for i, msg := range req.Messages {
		mp, err := messageParam(msg)
		if err != nil {
			return p, fmt.Errorf("openai model: message %d (%s): %w", i, msg.ID, err)
		}
		p.Messages = append(p.Messages, mp)
	}
	for _, t := range req.Tools {
		tp, err := toolParam(t)
		if err != nil {
			return p, fmt.Errorf("openai model: tool %q: %w", t.Name, err)
		}
		p.Tools = append(p.Tools, tp)
	}
	if err := setToolChoice(&p, req); err != nil {
		return p, fmt.Errorf("openai model: %w", err)
	}
	if err := setParams(&p, req.Params); err != nil {
		return p, fmt.Errorf("openai model: %w", err)
	}
	return p, nil
}

func messageParam(msg record.Message) (openai.ChatCompletionMessageParamUnion, error) {
	switch msg.Role {
	case record.RoleUser:
		return openai.UserMessage(msg.Content), nil
	case record.RoleTool:
		if msg.ToolCallID == "" {
			return openai.ChatCompletionMessageParamUnion{}, errors.New("tool result without a tool call id")
		}
		return openai.ToolMessage(msg.Content, msg.ToolCallID), nil
	case record.RoleAssistant:
		var a openai.ChatCompletionAssistantMessageParam
		// An assistant message that only calls tools carries no content, as
		// the API returns it.
		if msg.Content != "" || len(msg.ToolCalls) == 0 {
			a.Content.OfString = openai.String(msg.Content)
		}
		for _, tc := range msg.ToolCalls {
			args := tc.Arguments
			if args == "" {
				args = "{}"
			}
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID:       tc.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: args},
				},
			})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	}
	return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", msg.Role)
}

// emptySchema is the parameter schema of a tool that declares none.
const emptySchema = `{"type":"object","properties":{}}`

func toolParam(t ToolSpec) (openai.ChatCompletionToolUnionParam, error) {
	if t.Name == "" {
		return openai.ChatCompletionToolUnionParam{}, errors.New("no name")
	}
	schema := strings.TrimSpace(t.Parameters)
	if schema == "" {
		schema = emptySchema
	}
	// Keep the values as raw JSON so the schema is sent as written (numbers
	// are not rounded through float64, key order within values is kept).
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(schema), &fields); err != nil {
		return openai.ChatCompletionToolUnionParam{}, fmt.Errorf("parameters are not a JSON schema object: %w", err)
	}
	if fields == nil {
		return openai.ChatCompletionToolUnionParam{}, errors.New("parameters are not a JSON schema object: null")
	}
	params := make(shared.FunctionParameters, len(fields))
	for k, v := range fields {
		params[k] = v
	}
	def := shared.FunctionDefinitionParam{Name: t.Name, Parameters: params}
	if t.Description != "" {
		def.Description = openai.String(t.Description)
	}
	return openai.ChatCompletionFunctionTool(def), nil
}

// setToolChoice sets tool_choice from req.ToolChoice. Without tools, "auto"
// and "none" are left out (the API rejects tool_choice without tools), and
// "required" or a tool name is an error.
func setToolChoice(p *openai.ChatCompletionNewParams, req Request) error {
	choice := req.ToolChoice
	if len(req.Tools) == 0 {
		switch choice {
		case "", "auto", "none":
			return nil
		case "required":
			return errors.New(`tool choice "required" without tools`)
		}
		return fmt.Errorf("tool choice %q names no tool of the request", choice)
	}
	switch choice {
	case "":
	case "auto", "none", "required":
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String(choice)}
	default:
		if !slices.ContainsFunc(req.Tools, func(t ToolSpec) bool { return t.Name == choice }) {
			return fmt.Errorf("tool choice %q names no tool of the request", choice)
		}
		p.ToolChoice = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: choice})
	}
	return nil
}

// setParams sets the step's model parameters on the request: the model
// name replaces the configured one, max_tokens is sent as max_tokens (which
// OpenAI-compatible servers all read), stop as a list. A value the endpoint
// could not take is an error, never dropped.
func setParams(p *openai.ChatCompletionNewParams, params Params) error {
	if name := strings.TrimSpace(params.Model); name != "" {
		p.Model = shared.ChatModel(name)
	} else if params.Model != "" {
		return errors.New("model parameter model: blank model name")
	}
	if err := setFloat(&p.Temperature, "temperature", params.Temperature); err != nil {
		return err
	}
	if err := setFloat(&p.TopP, "top_p", params.TopP); err != nil {
		return err
	}
	switch {
	case params.MaxTokens < 0:
		return fmt.Errorf("model parameter max_tokens: %d is negative", params.MaxTokens)
	case params.MaxTokens > 0:
		p.MaxTokens = openai.Int(int64(params.MaxTokens))
	}
	for i, s := range params.Stop {
		if s == "" {
			return fmt.Errorf("model parameter stop: sequence %d is empty", i)
		}
	}
	if len(params.Stop) > 0 {
		p.Stop = openai.ChatCompletionNewParamsStopUnion{OfStringArray: slices.Clone(params.Stop)}
	}
	return nil
}

func setFloat(dst *param.Opt[float64], name string, v *float64) error {
	if v == nil {
		return nil
	}
	if math.IsNaN(*v) || math.IsInf(*v, 0) {
		return fmt.Errorf("model parameter %s: %v is not a number", name, *v)
	}
	*dst = openai.Float(*v)
	return nil
}

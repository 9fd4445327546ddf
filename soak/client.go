package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"
)

// Client speaks the agenthost HTTP API (docs/http-api.md) on one base URL,
// or on several hosts of one store, as a load balancer would: requests take
// turns, and one that cannot reach a host is sent to the next.
type Client struct {
	Base string
	// More are further base URLs of hosts sharing Base's store.
	More []string
	HTTP *http.Client
	// Token, when set, is sent as the bearer token of every request.
	Token string

	turn atomic.Uint64
}

// NewClient returns a client for base (e.g. "http://127.0.0.1:7070").
func NewClient(base string) *Client {
	// No compression: the answers are small, and a load generator's own
	// CPU is taken from the server it measures on a shared machine.
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second, DisableCompression: true}
	return &Client{Base: base, HTTP: &http.Client{Transport: tr}}
}

// Problem is an error answer of the API.
type Problem struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Code, p.Detail) }

// Admission is the answer to an accepted submission.
type Admission struct {
	RunID          string `json:"run_id"`
	InputMessageID string `json:"input_message_id"`
	ThreadID       string `json:"thread_id"`
}

// RunRecord is a run record.
type RunRecord struct {
	ID                string     `json:"id"`
	ThreadID          string     `json:"thread_id"`
	Seq               int64      `json:"seq"`
	State             string     `json:"state"`
	TerminalReason    string     `json:"terminal_reason"`
	InputMessageIDs   []string   `json:"input_message_ids"`
	AbsorbedIntoRunID string     `json:"absorbed_into_run_id"`
	Attempt           int        `json:"attempt"`
	Error             string     `json:"error"`
	CreatedAt         time.Time  `json:"created_at"`
	StartedAt         *time.Time `json:"started_at"`
	EndedAt           *time.Time `json:"ended_at"`
}

// Result is what answered a run.
type Result struct {
	RunID           string `json:"run_id"`
	AnsweredByRunID string `json:"answered_by_run_id"`
	State           string `json:"state"`
	TerminalReason  string `json:"terminal_reason"`
	Error           string `json:"error"`
	Answer          *struct {
		ID      string `json:"id"`
		Content string `json:"content"`
	} `json:"answer"`
}

// SubmitBody is the body of a submission.
type SubmitBody struct {
	Content string `json:"content"`
	Hint    string `json:"hint,omitempty"`
}

// do sends one request and decodes a 2xx JSON answer into out. It returns
// the status; a non-2xx answer is a *Problem. key, when set, is sent as the
// Idempotency-Key.
func (c *Client) do(ctx context.Context, method, path string, body []byte, key string, out any) (int, error) {
	hosts := 1 + len(c.More)
	first := 0
	if hosts > 1 {
		first = int(c.turn.Add(1) % uint64(hosts))
	}
	var resp *http.Response
	for i := range hosts {
		base := c.Base
		if k := (first + i) % hosts; k > 0 {
			base = c.More[k-1]
		}
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			return 0, err
		}
		if body != nil {
			req.Header["Content-Type"] = jsonType
		}
		if key != "" {
			req.Header["Idempotency-Key"] = []string{key}
		}
		if c.Token != "" {
			req.Header["Authorization"] = []string{"Bearer " + c.Token}
		}
		resp, err = c.HTTP.Do(req)
		if err == nil {
			break
		}
		var op *net.OpError
		if i == hosts-1 || ctx.Err() != nil || !errors.As(err, &op) || op.Op != "dial" {
			return 0, err // only a host that cannot be reached is skipped
		}
	}
	defer resp.Body.Close()
	b, err := readBody(resp)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		p := &Problem{}
		if json.Unmarshal(b, p) != nil || p.Code == "" {
			p = &Problem{Code: "?", Detail: string(b)}
		}
		p.Status = resp.StatusCode
		return resp.StatusCode, p
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decoding %q: %w", method, path, b, err)
		}
	}
	return resp.StatusCode, nil
}

var jsonType = []string{"application/json"}

// maxAnswer bounds the answers read.
const maxAnswer = 16 << 20

// readBody reads an answer's body, at most maxAnswer bytes: in one buffer
// of its length when the length is given (the small answers of the API).
func readBody(resp *http.Response) ([]byte, error) {
	if n := resp.ContentLength; n >= 0 && n <= maxAnswer {
		b := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
}

// Submit posts one input with an idempotency key.
func (c *Client) Submit(ctx context.Context, thread, key string, body SubmitBody) (Admission, error) {
	b, _ := json.Marshal(body)
	var a Admission
	_, err := c.do(ctx, "POST", "/v1/threads/"+thread+"/inputs", b, key, &a)
	return a, err
}

// SubmitWait submits with ?wait=: settled reports that the run settled
// within wait, and res is its result (200); otherwise only the admission
// came back (202).
func (c *Client) SubmitWait(ctx context.Context, thread, key string, body SubmitBody, wait time.Duration) (adm Admission, res Result, settled bool, err error) {
	b, _ := json.Marshal(body)
	var out submitAnswer
	st, err := c.do(ctx, "POST", "/v1/threads/"+thread+"/inputs?wait="+wait.String(), b, key, &out)
	if err != nil {
		return Admission{}, Result{}, false, err
	}
	return out.Admission, out.result(), st == http.StatusOK, nil
}

// submitAnswer is the answer to a submission with ?wait=: the admission,
// and the result when the run settled in time (200).
type submitAnswer struct {
	Admission
	AnsweredByRunID string `json:"answered_by_run_id"`
	State           string `json:"state"`
	TerminalReason  string `json:"terminal_reason"`
	Error           string `json:"error"`
	Answer          *struct {
		ID      string `json:"id"`
		Content string `json:"content"`
	} `json:"answer"`
}

// result is the run's half of the answer.
func (a submitAnswer) result() Result {
	return Result{RunID: a.RunID, AnsweredByRunID: a.AnsweredByRunID, State: a.State, TerminalReason: a.TerminalReason, Error: a.Error, Answer: a.Answer}
}

// Result waits up to wait for a run's result. settled is false when the run
// did not settle in time (202).
func (c *Client) Result(ctx context.Context, runID string, wait time.Duration) (res Result, settled bool, err error) {
	st, err := c.do(ctx, "GET", "/v1/runs/"+runID+"/result?wait="+wait.String(), nil, "", &res)
	if err != nil || st == http.StatusAccepted {
		return Result{}, false, err
	}
	return res, true, nil
}

// ThreadRuns lists a thread's runs in seq order, every page of them.
func (c *Client) ThreadRuns(ctx context.Context, thread string) ([]RunRecord, error) {
	var runs []RunRecord
	after := ""
	for {
		var out struct {
			Runs       []RunRecord `json:"runs"`
			NextCursor string      `json:"next_cursor"`
		}
		path := "/v1/threads/" + thread + "/runs?limit=1000"
		if after != "" {
			path += "&after=" + url.QueryEscape(after)
		}
		if _, err := c.do(ctx, "GET", path, nil, "", &out); err != nil {
			return runs, err
		}
		runs = append(runs, out.Runs...)
		if out.NextCursor == "" || out.NextCursor == after {
			return runs, nil
		}
		after = out.NextCursor
	}
}

// Healthy reports whether /healthz answers ok.
func (c *Client) Healthy(ctx context.Context) bool {
	var out struct {
		Status string `json:"status"`
	}
	_, err := c.do(ctx, "GET", "/healthz", nil, "", &out)
	return err == nil && out.Status == "ok"
}

// retryable reports whether a client should retry a request that failed
// with err: transport errors, timeouts and 503 unavailable.
func retryable(err error) bool {
	if err == nil {
		return false
	}
	if p, ok := err.(*Problem); ok {
		return p.Code == "unavailable"
	}
	return true
}

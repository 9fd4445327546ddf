// Package mcptest is a Model Context Protocol server for tests and examples,
// built on the official Go SDK. Its tools answer (echo, add, and delete,
// which deletes nothing but is named so for tool policies), fail (fail),
// sleep past a caller's time limit (sleep), read the server's environment
// (env), exit the server process (crash, when allowed), and record the
// idempotency key every call came with (keys lists them). A test may hold
// a call before it answers (Options.Hold), to stop its caller at a chosen
// moment.
package mcptest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MetaIdempotencyKey is the _meta key agenthost sends a call's idempotency
// key under.
const MetaIdempotencyKey = "agenthost/idempotency-key"

// Call is one recorded tool call.
type Call struct {
	Tool string
	// Key is the idempotency key of the request's _meta; HeaderKey the
	// Idempotency-Key header of an HTTP request.
	Key, HeaderKey string
	// Arguments is the call's arguments, as JSON.
	Arguments string
}

// Recorder keeps the calls a server received. Its methods are safe for
// concurrent use.
type Recorder struct {
	mu    sync.Mutex
	calls []Call
	// File, when set, gets a line "tool key header-key" per call (so a
	// test sees the calls of a server running in another process).
	File string
}

func (r *Recorder) record(c Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
	if r.File != "" {
		if f, err := os.OpenFile(r.File, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "%s %s %s\n", c.Tool, orDash(c.Key), orDash(c.HeaderKey))
			f.Close()
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Calls returns the calls so far.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// Options configure a server.
type Options struct {
	Recorder *Recorder
	// AllowCrash lets the crash tool exit the process (only for a server
	// that is a process of its own).
	AllowCrash bool
	// Hold, when set, is called by every call of echo, delete, add, fail and env
	// once it is recorded, before it answers: the call waits for Hold to
	// return. Hold should also return when ctx, the call's, is done.
	Hold func(ctx context.Context, c Call)
}

type (
	echoIn struct {
		Text string `json:"text" jsonschema:"the text to answer with"`
	}
	failIn struct {
		Message string `json:"message" jsonschema:"the error to report"`
	}
	sleepIn struct {
		Ms int `json:"ms" jsonschema:"how long to sleep, in milliseconds"`
	}
	envIn struct {
		Name string `json:"name" jsonschema:"an environment variable"`
	}
)

// NewServer returns the test server.
func NewServer(opt Options) *mcp.Server {
	rec := opt.Recorder
	if rec == nil {
		rec = &Recorder{}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "1"}, nil)
	note := func(req *mcp.CallToolRequest) Call {
		c := Call{Tool: req.Params.Name, Arguments: string(req.Params.Arguments)}
		if k, ok := req.Params.Meta[MetaIdempotencyKey].(string); ok {
			c.Key = k
		}
		if req.Extra != nil && req.Extra.Header != nil {
			c.HeaderKey = req.Extra.Header.Get("Idempotency-Key")
		}
		rec.record(c)
		return c
	}
	// noteHold records the call, then holds it when the options say so.
	noteHold := func(ctx context.Context, req *mcp.CallToolRequest) {
		c := note(req)
		if opt.Hold != nil {
			opt.Hold(ctx, c)
		}
	}
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Answers with the text it is given."},
		func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			noteHold(ctx, req)
			return text(in.Text), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "delete", Description: "Pretends to delete what it is given: answers \"deleted \" and the text."},
		func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			noteHold(ctx, req)
			return text("deleted " + in.Text), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Adds two numbers."},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct {
			A float64 `json:"a" jsonschema:"a number"`
			B float64 `json:"b" jsonschema:"another number"`
		}) (*mcp.CallToolResult, any, error) {
			noteHold(ctx, req)
			return text(fmt.Sprint(in.A + in.B)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Always fails, with the message it is given."},
		func(ctx context.Context, req *mcp.CallToolRequest, in failIn) (*mcp.CallToolResult, any, error) {
			noteHold(ctx, req)
			r := text(in.Message)
			r.IsError = true
			return r, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "sleep", Description: "Sleeps, then answers \"slept\"."},
		func(ctx context.Context, req *mcp.CallToolRequest, in sleepIn) (*mcp.CallToolResult, any, error) {
			note(req)
			t := time.NewTimer(time.Duration(in.Ms) * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
				return text("slept"), nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "Reads an environment variable of the server."},
		func(ctx context.Context, req *mcp.CallToolRequest, in envIn) (*mcp.CallToolResult, any, error) {
			noteHold(ctx, req)
			v, ok := os.LookupEnv(in.Name)
			if !ok {
				v = "(unset)"
			}
			return text(v), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "keys", Description: "Lists the idempotency keys of the calls so far."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			var keys []string
			for _, c := range rec.Calls() {
				keys = append(keys, c.Key)
			}
			return text(strings.Join(keys, "\n")), nil, nil
		})
	if opt.AllowCrash {
		mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "Exits the server process."},
			func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				note(req)
				os.Exit(3)
				return nil, nil, nil
			})
	}
	return s
}

// StdioEnv, set in a test binary's environment, makes RunStdioIfAsked serve
// the test server over stdio: a test starts its own binary as the stdio
// server, with no program to build.
const StdioEnv = "AGENTHOST_MCPTEST_STDIO"

// RunStdioIfAsked serves the test server over stdio and exits the process
// when StdioEnv is set (call it first in TestMain); otherwise it returns.
// Calls are recorded to the file MCPTEST_CALLS names, if any.
func RunStdioIfAsked() {
	if os.Getenv(StdioEnv) == "" {
		return
	}
	os.Exit(ServeStdio())
}

// ServeStdio serves the test server over stdin and stdout until the client
// goes away, and returns an exit code.
func ServeStdio() int {
	rec := &Recorder{File: os.Getenv("MCPTEST_CALLS")}
	s := NewServer(Options{Recorder: rec, AllowCrash: true})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		return 1
	}
	return 0
}

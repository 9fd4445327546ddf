package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/host/mcp"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/internal/mcptest"
)

func TestMain(m *testing.M) {
	mcptest.RunStdioIfAsked()
	os.Exit(m.Run())
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// stdioServer is the test server as a subprocess: this test binary.
func stdioServer(t *testing.T, calls string) mcp.ServerConfig {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return mcp.ServerConfig{Name: "t", Command: exe, Env: []string{mcptest.StdioEnv, "MCPTEST_CALLS", "ALLOWED"}}
}

func start(t *testing.T, cfgs []mcp.ServerConfig, vars map[string]string) *mcp.Servers {
	t.Helper()
	s, err := mcp.Start(context.Background(), cfgs, mcp.Options{Logger: quiet, LookupEnv: env(vars)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func toolsByName(s *mcp.Servers) map[string]model.Tool {
	out := map[string]model.Tool{}
	for _, t := range s.Tools() {
		out[t.Spec().Name] = t
	}
	return out
}

func call(t *testing.T, tool model.Tool, c model.Call, args string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(model.WithCall(context.Background(), c), time.Minute)
	defer cancel()
	return tool.Call(ctx, args)
}

func TestStdioServer(t *testing.T) {
	calls := filepath.Join(t.TempDir(), "calls")
	s := start(t, []mcp.ServerConfig{stdioServer(t, calls)}, map[string]string{
		mcptest.StdioEnv: "1", "MCPTEST_CALLS": calls, "ALLOWED": "yes", "SECRET": "no",
	})
	tools := toolsByName(s)
	for _, n := range []string{"t_echo", "t_add", "t_fail", "t_sleep", "t_env", "t_keys", "t_crash"} {
		if tools[n] == nil {
			t.Fatalf("no tool %s among %v", n, tools)
		}
	}
	if spec := tools["t_echo"].Spec(); !strings.Contains(spec.Parameters, `"text"`) || spec.Description == "" {
		t.Errorf("echo's spec %+v", spec)
	}
	if tl, ok := tools["t_echo"].(model.TimeLimited); !ok || tl.Timeout() != mcp.DefaultTimeout {
		t.Errorf("echo's time limit: %v", tl)
	}
	c := model.Call{RunID: "run_1", Step: 2, Index: 1, ID: "call_x"}
	if out, err := call(t, tools["t_echo"], c, `{"text":"hello"}`); err != nil || out != "hello" {
		t.Fatalf("echo: %q, %v", out, err)
	}
	// The environment is the allow-list's: ALLOWED is passed, SECRET not.
	if out, err := call(t, tools["t_env"], c, `{"name":"ALLOWED"}`); err != nil || out != "yes" {
		t.Errorf("env ALLOWED: %q, %v", out, err)
	}
	if out, err := call(t, tools["t_env"], c, `{"name":"SECRET"}`); err != nil || out != "(unset)" {
		t.Errorf("env SECRET: %q, %v", out, err)
	}
	if _, err := call(t, tools["t_fail"], c, `{"message":"disk full"}`); err == nil || err.Error() != "disk full" {
		t.Errorf("fail: %v", err)
	}
	if _, err := call(t, tools["t_echo"], c, `[1]`); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Errorf("bad arguments: %v", err)
	}
	b, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "echo run_1/step2/1 -\n") {
		t.Errorf("recorded calls:\n%s", b)
	}
	// A server that dies is restarted; its tools keep working.
	if _, err := call(t, tools["t_crash"], c, `{}`); err == nil {
		t.Error("crash answered")
	}
	if out, err := call(t, tools["t_echo"], c, `{"text":"again"}`); err != nil || out != "again" {
		t.Fatalf("echo after a crash: %q, %v", out, err)
	}
	if n := s.Restarts(); n < 1 {
		t.Errorf("%d restarts", n)
	}
}

func TestStdioCallCanceled(t *testing.T) {
	s := start(t, []mcp.ServerConfig{stdioServer(t, "")}, map[string]string{mcptest.StdioEnv: "1"})
	tools := toolsByName(s)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := tools["t_sleep"].Call(ctx, `{"ms":600000}`); err == nil {
		t.Fatal("a call past its context's deadline answered")
	}
	// The session survives the abandoned call.
	if out, err := call(t, tools["t_echo"], model.Call{}, `{"text":"ok"}`); err != nil || out != "ok" {
		t.Fatalf("echo after a canceled call: %q, %v", out, err)
	}
}

func TestHTTPServer(t *testing.T) {
	rec := &mcptest.Recorder{}
	srv := mcptest.NewServer(mcptest.Options{Recorder: rec})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	cfg := mcp.ServerConfig{Name: "web", Prefix: "w", URL: ts.URL, Headers: map[string]string{"Authorization": "WEB_AUTH"}, Timeout: 5 * time.Second}
	s := start(t, []mcp.ServerConfig{cfg}, map[string]string{"WEB_AUTH": "Bearer s3cret"})
	tools := toolsByName(s)
	if tl := tools["w_echo"].(model.TimeLimited); tl.Timeout() != 5*time.Second {
		t.Errorf("time limit %s", tl.Timeout())
	}
	if out, err := call(t, tools["w_add"], model.Call{RunID: "run_9", Step: 0, Index: 0}, `{"a":2,"b":3}`); err != nil || out != "5" {
		t.Fatalf("add: %q, %v", out, err)
	}
	got := rec.Calls()
	if len(got) != 1 || got[0].Key != "run_9/step0/0" || got[0].HeaderKey != "run_9/step0/0" {
		t.Errorf("recorded %+v", got)
	}
	// Without the header's variable the server is not started.
	_, err := mcp.Start(context.Background(), []mcp.ServerConfig{cfg}, mcp.Options{Logger: quiet, LookupEnv: env(nil)})
	if err == nil || !strings.Contains(err.Error(), "environment variable WEB_AUTH is not set") {
		t.Errorf("missing header variable: %v", err)
	}
	// With a wrong one, initialize fails, naming the server.
	_, err = mcp.Start(context.Background(), []mcp.ServerConfig{cfg}, mcp.Options{Logger: quiet, LookupEnv: env(map[string]string{"WEB_AUTH": "x"})})
	if err == nil || !strings.Contains(err.Error(), `mcp server "web"`) || !strings.Contains(err.Error(), "initialize") {
		t.Errorf("refused initialize: %v", err)
	}
}

func TestStartErrors(t *testing.T) {
	silent := mcp.ServerConfig{Name: "mute", Command: "/bin/sh", Args: []string{"-c", "sleep 60"}, StartTimeout: 300 * time.Millisecond}
	exits := mcp.ServerConfig{Name: "gone", Command: "/bin/sh", Args: []string{"-c", "exit 1"}}
	exe, _ := os.Executable()
	ok := mcp.ServerConfig{Name: "a", Command: exe, Env: []string{mcptest.StdioEnv}}
	vars := map[string]string{mcptest.StdioEnv: "1"}
	for _, tc := range []struct {
		name     string
		cfgs     []mcp.ServerConfig
		reserved []string
		want     string
	}{
		{"no answer", []mcp.ServerConfig{silent}, nil, `mcp server "mute" (command /bin/sh): no answer to initialize within 300ms`},
		{"exits", []mcp.ServerConfig{exits}, nil, `mcp server "gone" (command /bin/sh): initialize`},
		{"missing command", []mcp.ServerConfig{{Name: "x", Command: "/nonexistent/server"}}, nil, `mcp server "x"`},
		{"bad name", []mcp.ServerConfig{{Name: "my_server", Command: "x"}}, nil, `a name is 1 to 32 letters, digits or "-"`},
		{"bad prefix", []mcp.ServerConfig{{Name: "s", Prefix: "a.b", Command: "x"}}, nil, `prefix "a.b"`},
		{"both", []mcp.ServerConfig{{Name: "s", Command: "x", URL: "http://h/"}}, nil, "both a command and a url"},
		{"neither", []mcp.ServerConfig{{Name: "s"}}, nil, "neither a command nor a url"},
		{"bad url", []mcp.ServerConfig{{Name: "s", URL: "localhost:1"}}, nil, "not an absolute http or https URL"},
		{"twice", []mcp.ServerConfig{ok, ok}, nil, `mcp server "a": configured twice`},
		{"same prefix", []mcp.ServerConfig{ok, {Name: "b", Prefix: "a", Command: exe, Env: []string{mcptest.StdioEnv}}}, nil, `tool "add" of mcp server "a" already has`},
		{"application tool", []mcp.ServerConfig{ok}, []string{"a_echo"}, `would be offered as "a_echo", which a tool of the application already has`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := mcp.Start(context.Background(), tc.cfgs, mcp.Options{Logger: quiet, LookupEnv: env(vars)}, tc.reserved...)
			if err == nil {
				s.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

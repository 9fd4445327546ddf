package host_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/mcp"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/step"
	"github.com/agenthost/agenthost/host/wasm"
	"github.com/agenthost/agenthost/internal/mcptest"
	"github.com/agenthost/agenthost/internal/openaitest"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// agent is a runtime whose model is the fake OpenAI-compatible server and
// whose tools are MCP servers'.
type agent struct {
	t     *testing.T
	rt    *host.Runtime
	fake  *openaitest.Server
	calls string // the stdio server's record of calls
	rec   *mcptest.Recorder
}

type agentOpts struct {
	openai      func(*model.OpenAIConfig)
	stdio       func(*mcp.ServerConfig)
	http        bool
	hooks       []model.PrepareStep
	noStdio     bool
	toolTimeout time.Duration
}

func newAgent(t *testing.T, o agentOpts) *agent {
	t.Helper()
	a := &agent{t: t, fake: openaitest.New(), calls: filepath.Join(t.TempDir(), "calls"), rec: &mcptest.Recorder{}}
	t.Cleanup(a.fake.Close)
	oc := model.OpenAIConfig{BaseURL: a.fake.BaseURL(), Model: "fake-model", Timeout: 10 * time.Minute, MaxRetries: -1}
	if o.openai != nil {
		o.openai(&oc)
	}
	m, err := model.NewOpenAI(oc)
	if err != nil {
		t.Fatal(err)
	}
	var cfgs []mcp.ServerConfig
	if !o.noStdio {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		c := mcp.ServerConfig{Name: "t", Command: exe, Env: []string{mcptest.StdioEnv, "MCPTEST_CALLS"}, Timeout: 10 * time.Minute}
		if o.stdio != nil {
			o.stdio(&c)
		}
		cfgs = append(cfgs, c)
	}
	if o.http {
		srv := mcptest.NewServer(mcptest.Options{Recorder: a.rec})
		ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
		t.Cleanup(ts.Close)
		cfgs = append(cfgs, mcp.ServerConfig{Name: "web", URL: ts.URL})
	}
	env := map[string]string{mcptest.StdioEnv: "1", "MCPTEST_CALLS": a.calls}
	servers, err := mcp.Start(context.Background(), cfgs, mcp.Options{Logger: quietLog, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { servers.Close() })
	a.rt, err = host.New(context.Background(), host.Config{
		Driver: memdriver.New(), Model: m, Tools: servers.Tools(), PrepareStep: o.hooks, Logger: quietLog, ToolTimeout: o.toolTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		a.rt.Close(ctx)
	})
	return a
}

func (a *agent) submit(thread, content string) *host.Ticket {
	a.t.Helper()
	tk, err := a.rt.Submit(context.Background(), thread, content, host.SubmitOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	return tk
}

func (a *agent) wait(tk *host.Ticket) host.Result {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := tk.Wait(ctx)
	if err != nil {
		a.t.Fatalf("waiting for %s: %v", tk.RunID, err)
	}
	return res
}

// follow returns the run's events up to its terminal one.
func (a *agent) follow(runID string, until host.EventType) []host.Event {
	a.t.Helper()
	deadline := time.After(2 * time.Minute)
	var all []host.Event
	var seq int64
	for {
		evs, more := a.rt.Events(runID, seq)
		for _, e := range evs {
			seq = e.Seq
			all = append(all, e)
			if e.Type == until || e.Type == host.EventTerminal {
				return all
			}
		}
		select {
		case <-more:
		case <-deadline:
			a.t.Fatalf("run %s: no %s event; got %v", runID, until, all)
		}
	}
}

func (a *agent) keys() []string {
	b, _ := os.ReadFile(a.calls)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func TestAgentCallsStdioTool(t *testing.T) {
	a := newAgent(t, agentOpts{})
	tk := a.submit("T", `call t_echo {"text":"from the tool"}`)
	res := a.wait(tk)
	if answer(res) != "tool said: from the tool" {
		t.Fatalf("answer %q (%+v)", answer(res), res)
	}
	// The call came with its idempotency key.
	if got, want := a.keys(), []string{"echo " + tk.RunID + "/step0/0 -"}; !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	// The exchange is in the history, in the model's format.
	msgs, err := a.rt.History(context.Background(), "T")
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range msgs {
		roles = append(roles, string(m.Role))
	}
	if !slices.Equal(roles, []string{"user", "assistant", "tool", "assistant"}) || msgs[2].Content != "from the tool" {
		t.Errorf("history %+v", msgs)
	}
	// The second request sent the tool call and its result back.
	reqs := a.fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	sent := jsonText(reqs[1]["messages"])
	if !strings.Contains(sent, `"role":"tool"`) || !strings.Contains(sent, `"tool_call_id":"call_chatcmpl-1"`) {
		t.Errorf("second request's messages %s", sent)
	}
}

func TestAgentCallsHTTPTool(t *testing.T) {
	a := newAgent(t, agentOpts{http: true, noStdio: true})
	tk := a.submit("T", `call web_add {"a":20,"b":22}`)
	if res := a.wait(tk); answer(res) != "tool said: 42" {
		t.Fatalf("answer %q", answer(res))
	}
	key := tk.RunID + "/step0/0"
	if got := a.rec.Calls(); len(got) != 1 || got[0].Key != key || got[0].HeaderKey != key {
		t.Errorf("calls %+v, want key %s in _meta and header", got, key)
	}
}

// TestAgentToolError: a tool's error result is what the model sees.
func TestAgentToolError(t *testing.T) {
	a := newAgent(t, agentOpts{})
	if res := a.wait(a.submit("T", `call t_fail {"message":"disk full"}`)); answer(res) != "tool said: error: disk full" {
		t.Fatalf("answer %q", answer(res))
	}
}

// TestAgentHungTool: a tool past its server's limit is an error the model
// sees; the run completes and the thread moves on.
func TestAgentHungTool(t *testing.T) {
	a := newAgent(t, agentOpts{stdio: func(c *mcp.ServerConfig) { c.Timeout = 300 * time.Millisecond }})
	res := a.wait(a.submit("T", `call t_sleep {"ms":600000}`))
	if answer(res) != "tool said: error: tool t_sleep did not answer within 300ms" {
		t.Fatalf("answer %q", answer(res))
	}
	if res := a.wait(a.submit("T", "next")); answer(res) != "echo: next" {
		t.Fatalf("next answer %q", answer(res))
	}
}

// TestAgentGoToolTimeout: a Go tool that ignores its context is abandoned
// at the runtime's limit.
func TestAgentGoToolTimeout(t *testing.T) {
	fake := openaitest.New()
	defer fake.Close()
	m, err := model.NewOpenAI(model.OpenAIConfig{BaseURL: fake.BaseURL(), Model: "m", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	block := make(chan struct{})
	defer close(block)
	rt, err := host.New(context.Background(), host.Config{Driver: memdriver.New(), Model: m, Logger: quietLog, ToolTimeout: 300 * time.Millisecond,
		Tools: []model.Tool{stuckTool{block}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	tk, err := rt.Submit(context.Background(), "T", "call stuck", host.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := tk.Wait(ctx)
	if err != nil || answer(res) != "tool said: error: tool stuck did not answer within 300ms" {
		t.Fatalf("answer %q, %v", answer(res), err)
	}
}

type stuckTool struct{ block chan struct{} }

func (stuckTool) Spec() model.ToolSpec { return model.ToolSpec{Name: "stuck"} }
func (s stuckTool) Call(context.Context, string) (string, error) {
	<-s.block
	return "late", nil
}

// TestAgentHungModel: a model call past its limit fails the run; the
// thread moves on.
func TestAgentHungModel(t *testing.T) {
	a := newAgent(t, agentOpts{openai: func(c *model.OpenAIConfig) { c.Timeout = 300 * time.Millisecond }})
	res := a.wait(a.submit("T", "hang"))
	if res.State != record.StateFailed || !strings.Contains(res.Error, "model step 0") {
		t.Fatalf("hung model: %+v", res)
	}
	if res := a.wait(a.submit("T", "next")); answer(res) != "echo: next" {
		t.Fatalf("next answer %q", answer(res))
	}
}

// TestAgentDeltas: the model's streamed text goes out as delta events,
// which add up to the answer.
func TestAgentDeltas(t *testing.T) {
	a := newAgent(t, agentOpts{})
	tk := a.submit("T", "one two three four five six seven")
	var text strings.Builder
	n := 0
	for _, e := range a.follow(tk.RunID, host.EventTerminal) {
		if e.Type == host.EventDelta {
			n++
			text.WriteString(e.Data["text"])
		}
	}
	if want := "echo: one two three four five six seven"; text.String() != want || n < 3 {
		t.Fatalf("%d deltas %q, want %q in pieces", n, text.String(), want)
	}
	if res := a.wait(tk); answer(res) != text.String() {
		t.Fatalf("answer %q", answer(res))
	}
}

// TestAgentCancelInModelCall: cancelling the active run aborts its model
// call at once; the run ends canceled, the next run starts.
func TestAgentCancelInModelCall(t *testing.T) {
	a := newAgent(t, agentOpts{})
	hung := a.submit("T", "hang")
	next := a.submit("T", "after")
	a.follow(hung.RunID, host.EventStepStarted)
	for len(a.fake.Requests()) == 0 {
		time.Sleep(5 * time.Millisecond) // the request is in flight
	}
	r, err := a.rt.Cancel(context.Background(), hung.RunID)
	if err != nil || r.State != record.StateInterrupted || r.TerminalReason != record.ReasonCanceled {
		t.Fatalf("cancel: %+v, %v", r, err)
	}
	if res := a.wait(next); answer(res) != "echo: after" {
		t.Fatalf("next answer %q", answer(res))
	}
	if res := a.wait(hung); res.TerminalReason != record.ReasonCanceled || res.Answer != nil {
		t.Fatalf("canceled run's result %+v", res)
	}
	// Canceled again: it is no longer open.
	if _, err := a.rt.Cancel(context.Background(), hung.RunID); err == nil {
		t.Fatal("a canceled run was canceled again")
	}
}

// TestAgentCancelInToolCall: cancelling during a tool call aborts it; the
// transcript keeps no tool call of the canceled run.
func TestAgentCancelInToolCall(t *testing.T) {
	a := newAgent(t, agentOpts{})
	busy := a.submit("T", `call t_sleep {"ms":600000}`)
	next := a.submit("T", "after")
	a.follow(busy.RunID, host.EventToolCall)
	if _, err := a.rt.Cancel(context.Background(), busy.RunID); err != nil {
		t.Fatal(err)
	}
	if res := a.wait(next); answer(res) != "echo: after" {
		t.Fatalf("next answer %q", answer(res))
	}
	msgs, err := a.rt.History(context.Background(), "T")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.RunID == busy.RunID || len(m.ToolCalls) > 0 || m.Role == record.RoleTool {
			t.Fatalf("the canceled run left %+v in the history", m)
		}
	}
	// The next run's prompt held no tool call either.
	reqs := a.fake.Requests()
	if sent := jsonText(reqs[len(reqs)-1]["messages"]); strings.Contains(sent, "tool") || strings.Contains(sent, "sleep") {
		t.Fatalf("next prompt %s", sent)
	}
}

// TestAgentStepSettingsReachTheRequest: what a prepareStep hook sets
// through the guest ABI (model parameters, active tools, tool choice) is
// what the model request carries.
func TestAgentStepSettingsReachTheRequest(t *testing.T) {
	temp, topP := 0.25, 0.5
	hook := host.StepHook(step.HookFunc(func(_ context.Context, r step.Request) (step.Result, error) {
		res := step.Unchanged(r)
		res.ActiveTools = []string{"t_echo"}
		res.ToolChoice = "required"
		res.Model = step.ModelParams{Model: "guest-model", Temperature: &temp, TopP: &topP, MaxTokens: 77, Stop: []string{"END"}}
		if r.Step > 1 {
			res.ToolChoice = "none"
		}
		return res, nil
	}))
	a := newAgent(t, agentOpts{hooks: []model.PrepareStep{hook}})
	if res := a.wait(a.submit("T", `call t_echo {"text":"x"}`)); answer(res) != "tool said: x" {
		t.Fatalf("answer %q", answer(res))
	}
	reqs := a.fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r["model"] != "guest-model" || r["temperature"] != 0.25 || r["top_p"] != 0.5 || r["max_tokens"] != 77.0 ||
		jsonText(r["stop"]) != `["END"]` || r["tool_choice"] != "required" || r["stream"] != true {
		t.Errorf("request %s", jsonText(r))
	}
	if tools := jsonText(r["tools"]); !strings.Contains(tools, `"name":"t_echo"`) || strings.Contains(tools, "t_add") {
		t.Errorf("tools offered %s", tools)
	}
	if reqs[1]["tool_choice"] != "none" {
		t.Errorf("second step's tool choice %v", reqs[1]["tool_choice"])
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestAgentGuestParamsReachTheRequest: a wasm guest's model parameters,
// active tools and tool choice travel through the ABI to the request,
// every parameter the ABI carries.
func TestAgentGuestParamsReachTheRequest(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("AGENTHOST_REQUIRE_ALL") == "1" {
			t.Fatal(err)
		}
		t.Skip("no go command to build the guest")
	}
	out := filepath.Join(t.TempDir(), "paramsguest.wasm")
	cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-o", out, "./testdata/paramsguest")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the guest: %v\n%s", err, b)
	}
	eng, err := wasm.NewEngine(context.Background(), wasm.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	m, err := eng.LoadFile(context.Background(), out, wasm.Options{Config: []byte("t_echo"), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	a := newAgent(t, agentOpts{hooks: []model.PrepareStep{host.StepHook(m)}})
	if res := a.wait(a.submit("T", `call t_echo {"text":"x"}`)); answer(res) != "tool said: x" {
		t.Fatalf("answer %q", answer(res))
	}
	reqs := a.fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r["model"] != "guest-model" || r["temperature"] != 0.25 || r["top_p"] != 0.5 || r["max_tokens"] != 77.0 ||
		jsonText(r["stop"]) != `["END","STOP"]` || r["tool_choice"] != "required" {
		t.Errorf("request %s", jsonText(r))
	}
	if tools := jsonText(r["tools"]); !strings.Contains(tools, `"name":"t_echo"`) || strings.Contains(tools, "t_add") {
		t.Errorf("tools offered %s", tools)
	}
	if reqs[1]["tool_choice"] != "none" || reqs[1]["model"] != "guest-model" {
		t.Errorf("second request %s", jsonText(reqs[1]))
	}
}

package observe_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/observe"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// usageModel reports 7 input and 3 output tokens per step.
type usageModel struct{ model.Model }

func (m usageModel) Step(ctx context.Context, req model.Request, stream func(string)) (model.Response, error) {
	resp, err := m.Model.Step(ctx, req, stream)
	resp.Usage = model.Usage{InputTokens: 7, OutputTokens: 3}
	return resp, err
}

type tool struct {
	name string
	err  error
}

func (t tool) Spec() model.ToolSpec { return model.ToolSpec{Name: t.name} }
func (t tool) Call(context.Context, string) (string, error) {
	return "ok", t.err
}

type limited struct{ tool }

func (limited) Timeout() time.Duration { return time.Minute }

// runWithTools runs one run whose model calls the tools "lookup" then
// "broken" (which fails) and then answers, traced into an in-memory
// exporter; the submission carries a remote trace context.
func runWithTools(t *testing.T) (*tracetest.InMemoryExporter, *observe.Metrics, trace.SpanContext, string) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	tr := observe.NewTracer(tp)
	met := observe.NewMetrics()
	sm, err := model.NewScripted(model.Script{Steps: []model.ScriptStep{
		{Tool: &model.ScriptTool{Name: "lookup", Arguments: `{}`}},
		{Tool: &model.ScriptTool{Name: "broken", Arguments: `{}`}},
		{Answer: "done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tools := observe.Tools([]model.Tool{tool{name: "lookup"}, limited{tool{name: "broken", err: errors.New("boom")}}}, met, tr)
	if tl, ok := tools[1].(model.TimeLimited); !ok || tl.Timeout() != time.Minute {
		t.Fatalf("the instrumented tool lost its time limit")
	}
	rt, err := host.New(context.Background(), host.Config{
		Driver: memdriver.New(), Model: observe.Model(usageModel{sm}, "scripted", met, tr), Tools: tools,
		Observer: tr, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), remote)
	tk, err := rt.Submit(ctx, "T", "hello", host.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if res, err := rt.Wait(wctx, tk.RunID); err != nil || res.Answer == nil {
		t.Fatalf("wait: %+v %v", res, err)
	}
	// Close returns once the worker did: the run's span has ended.
	if rep, err := rt.Close(wctx); err != nil || !rep.Settled {
		t.Fatalf("close: %+v %v", rep, err)
	}
	return exp, met, remote, tk.RunID
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestSpansOfARunWithToolCalls(t *testing.T) {
	exp, _, remote, runID := runWithTools(t)
	spans := exp.GetSpans()
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
	}
	runs := byName["invoke_agent agenthost"]
	if len(runs) != 1 {
		t.Fatalf("%d run spans, want 1; spans: %v", len(runs), names(spans))
	}
	run := runs[0]
	ra := attrs(run)
	if ra[observe.AttrOperation].AsString() != "invoke_agent" || ra[observe.AttrRunID].AsString() != runID ||
		ra[observe.AttrConversationID].AsString() != "T" || ra[observe.AttrReason].AsString() != "completed" {
		t.Errorf("run span attributes %v", run.Attributes)
	}
	if run.Parent.IsValid() {
		t.Errorf("the run span has a parent %v; the submission is a link", run.Parent)
	}
	if len(run.Links) != 1 || run.Links[0].SpanContext.TraceID() != remote.TraceID() || run.Links[0].SpanContext.SpanID() != remote.SpanID() {
		t.Errorf("run span links %+v, want the submission's span", run.Links)
	}
	steps := byName[observe.SpanStep]
	if len(steps) != 3 {
		t.Fatalf("%d step spans, want 3; spans: %v", len(steps), names(spans))
	}
	stepOf := map[int64]tracetest.SpanStub{}
	for _, s := range steps {
		if s.Parent.SpanID() != run.SpanContext.SpanID() {
			t.Errorf("step span's parent is %v, want the run's", s.Parent.SpanID())
		}
		stepOf[attrs(s)[observe.AttrStep].AsInt64()] = s
	}
	chats := byName["chat scripted"]
	if len(chats) != 3 {
		t.Fatalf("%d model call spans, want 3; spans: %v", len(chats), names(spans))
	}
	for _, c := range chats {
		a := attrs(c)
		step := stepOf[a[observe.AttrStep].AsInt64()]
		if c.Parent.SpanID() != step.SpanContext.SpanID() || c.SpanKind != trace.SpanKindClient {
			t.Errorf("model call of step %d: parent %v kind %v, want its step's span", a[observe.AttrStep].AsInt64(), c.Parent.SpanID(), c.SpanKind)
		}
		if a[observe.AttrOperation].AsString() != "chat" || a[observe.AttrRequestModel].AsString() != "scripted" ||
			a[observe.AttrInputTokens].AsInt64() != 7 || a[observe.AttrOutputTokens].AsInt64() != 3 {
			t.Errorf("model call span attributes %v", c.Attributes)
		}
	}
	for i, name := range []string{"lookup", "broken"} {
		ts := byName["execute_tool "+name]
		if len(ts) != 1 {
			t.Fatalf("%d spans of tool %s; spans: %v", len(ts), name, names(spans))
		}
		a := attrs(ts[0])
		if ts[0].Parent.SpanID() != stepOf[int64(i)].SpanContext.SpanID() {
			t.Errorf("tool %s: parent %v, want step %d's span", name, ts[0].Parent.SpanID(), i)
		}
		if a[observe.AttrToolName].AsString() != name || a[observe.AttrToolCallID].AsString() == "" || a[observe.AttrOperation].AsString() != "execute_tool" ||
			a[observe.AttrIdempotencyKey].AsString() != runID+"/step"+string(rune('0'+i))+"/0" {
			t.Errorf("tool %s span attributes %v", name, ts[0].Attributes)
		}
		if failed := ts[0].Status.Code.String() == "Error"; failed != (name == "broken") {
			t.Errorf("tool %s span status %v", name, ts[0].Status)
		}
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func TestMetricsOfModelAndToolCalls(t *testing.T) {
	_, met, _, _ := runWithTools(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(met)
	want := `
# HELP agenthost_model_calls_total Model calls (one per step), by model.
# TYPE agenthost_model_calls_total counter
agenthost_model_calls_total{model="scripted"} 3
# HELP agenthost_model_tokens_total Tokens the model reported using, by model and type (input, output).
# TYPE agenthost_model_tokens_total counter
agenthost_model_tokens_total{model="scripted",type="input"} 21
agenthost_model_tokens_total{model="scripted",type="output"} 9
# HELP agenthost_tool_call_errors_total Tool calls that returned an error (their time limit included), by tool.
# TYPE agenthost_tool_call_errors_total counter
agenthost_tool_call_errors_total{tool="broken"} 1
# HELP agenthost_tool_calls_total Tool calls, by tool.
# TYPE agenthost_tool_calls_total counter
agenthost_tool_calls_total{tool="broken"} 1
agenthost_tool_calls_total{tool="lookup"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "agenthost_model_calls_total", "agenthost_model_tokens_total", "agenthost_tool_calls_total", "agenthost_tool_call_errors_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(met, "agenthost_model_call_seconds", "agenthost_tool_call_seconds"); n != 3 {
		t.Errorf("%d latency series, want 3 (one model, two tools)", n)
	}
}

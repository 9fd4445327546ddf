package httpapi_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/httpapi"
	hmodel "github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/observe"
	"github.com/agenthost/agenthost/internal/apitest"
)

type lookup struct{}

func (lookup) Spec() hmodel.ToolSpec                        { return hmodel.ToolSpec{Name: "lookup"} }
func (lookup) Call(context.Context, string) (string, error) { return "notes", nil }

// syncBuffer is a log destination the server's goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// instrumented serves a runtime whose model calls the lookup tool, then
// answers; its calls are counted and traced as serve does it.
type instrumented struct {
	*httptest.Server
	rt   *host.Runtime
	exp  *tracetest.InMemoryExporter
	logs *syncBuffer
}

func newInstrumented(t *testing.T, opt httpapi.Options) *instrumented {
	t.Helper()
	sm, err := hmodel.NewScripted(hmodel.Script{Steps: []hmodel.ScriptStep{{Tool: &hmodel.ScriptTool{Name: "lookup"}}, {Answer: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	s := &instrumented{exp: tracetest.NewInMemoryExporter(), logs: &syncBuffer{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(s.exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	tr := observe.NewTracer(tp)
	met := observe.NewMetrics()
	opt.TracerProvider, opt.Collectors = tp, []prometheus.Collector{met}
	api := apitest.New(t, apitest.Config{
		Host: host.Config{
			Model: observe.Model(sm, "scripted", met, tr), Tools: observe.Tools([]hmodel.Tool{lookup{}}, met, tr),
			Observer: tr, Logger: slog.New(slog.NewTextHandler(s.logs, nil)),
		},
		API: opt,
	})
	s.Server, s.rt = api.Server, api.Runtime
	return s
}

func (s *instrumented) do(t *testing.T, method, path, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	return (&server{Server: s.Server}).do(t, method, path, body, hdr...)
}

// TestMetricsFamilies scrapes /metrics after a run with a tool call and
// parses it: the runtime's families, the HTTP requests, the model and tool
// calls, the runs by state, the build, Go and process families.
func TestMetricsFamilies(t *testing.T) {
	s := newInstrumented(t, httpapi.Options{})
	_, body := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"hello"}`)
	adm := decode[httpapi.Admission](t, body)
	if resp, body := s.do(t, "GET", "/v1/runs/"+adm.RunID+"/result?wait=60s", ""); resp.StatusCode != 200 {
		t.Fatalf("result: %d %s", resp.StatusCode, body)
	}
	s.do(t, "GET", "/v1/nothing", "")
	resp, body := s.do(t, "GET", "/metrics", "")
	if resp.StatusCode != 200 {
		t.Fatalf("metrics: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	value := func(name string, labels ...string) (float64, bool) {
		f := fams[name]
		if f == nil {
			return 0, false
		}
	next:
		for _, m := range f.Metric {
			have := map[string]string{}
			for _, l := range m.Label {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return m.Counter.GetValue(), true
			case dto.MetricType_GAUGE:
				return m.Gauge.GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
		return 0, false
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64 // -1: any value
	}{
		{"agenthost_admissions_total", []string{"decision", "start"}, 1},
		{"agenthost_runs_terminal_total", []string{"reason", "completed"}, 1},
		{"agenthost_absorptions_total", nil, 0},
		{"agenthost_driver_restarts_total", nil, 0},
		{"agenthost_inject_hook_installed", nil, 0},
		{"agenthost_model_calls_total", []string{"model", "scripted"}, 2},
		{"agenthost_model_call_seconds", []string{"model", "scripted"}, 2},
		{"agenthost_tool_calls_total", []string{"tool", "lookup"}, 1},
		{"agenthost_tool_call_seconds", []string{"tool", "lookup"}, 1},
		{"agenthost_http_requests_total", []string{"route", "POST /v1/threads/{thread_id}/inputs", "code", "202"}, 1},
		{"agenthost_http_requests_total", []string{"route", "unmatched", "code", "404"}, 1},
		{"agenthost_http_request_seconds", []string{"route", "GET /v1/runs/{run_id}/result", "code", "200"}, 1},
		{"agenthost_runs", []string{"state", "active"}, 0},
		{"agenthost_runs", []string{"state", "queued"}, 0},
		{"agenthost_build_info", nil, 1},
		{"go_goroutines", nil, -1},
		{"process_start_time_seconds", nil, -1},
	} {
		v, ok := value(c.name, c.labels...)
		if !ok || (c.want >= 0 && v != c.want) {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, v, ok, c.want)
		}
	}
	bi := fams["agenthost_build_info"].Metric[0]
	labels := map[string]string{}
	for _, l := range bi.Label {
		labels[l.GetName()] = l.GetValue()
	}
	if !strings.HasPrefix(labels["goversion"], "go") || labels["version"] == "" {
		t.Errorf("build info labels %v", labels)
	}
}

// TestMethodNotAllowed: a known route with another method is 405 with
// Allow, an unknown path 404.
func TestMethodNotAllowed(t *testing.T) {
	s := newServer(t, false, httpapi.Options{})
	resp, body := s.do(t, "DELETE", "/v1/runs/r1", "")
	wantProblem(t, resp, body, http.StatusMethodNotAllowed, "method_not_allowed")
	if a := resp.Header.Get("Allow"); a != "GET" {
		t.Errorf("Allow %q, want GET", a)
	}
	resp, body = s.do(t, "GET", "/v1/threads/T/inputs", "")
	wantProblem(t, resp, body, http.StatusMethodNotAllowed, "method_not_allowed")
	if a := resp.Header.Get("Allow"); a != "POST" {
		t.Errorf("Allow %q, want POST", a)
	}
	resp, body = s.do(t, "GET", "/v1/nothing", "")
	wantProblem(t, resp, body, http.StatusNotFound, "not_found")
}

// TestTraceparentLinksTheRun: the submission's traceparent is the parent of
// its request's server span, and the run's span links to that span; a
// failed run is logged with its error.
func TestTraceparentLinksTheRun(t *testing.T) {
	s := newInstrumented(t, httpapi.Options{AccessLog: true})
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	_, body := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"hello"}`, "traceparent", "00-"+traceID+"-"+parentID+"-01")
	adm := decode[httpapi.Admission](t, body)
	if resp, body := s.do(t, "GET", "/v1/runs/"+adm.RunID+"/result?wait=60s", ""); resp.StatusCode != 200 {
		t.Fatalf("result: %d %s", resp.StatusCode, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.rt.Close(ctx) // the run's span ends when its worker returns
	var submit, run *tracetest.SpanStub
	spans := s.exp.GetSpans()
	for i, sp := range spans {
		switch sp.Name {
		case "POST /v1/threads/{thread_id}/inputs":
			submit = &spans[i]
		case "invoke_agent agenthost":
			run = &spans[i]
		}
	}
	if submit == nil || run == nil {
		t.Fatalf("spans %v: want the submission's and the run's", names(spans))
	}
	if submit.Parent.TraceID().String() != traceID || submit.Parent.SpanID().String() != parentID {
		t.Errorf("the submission's span has parent %v, want the traceparent's", submit.Parent)
	}
	if len(run.Links) != 1 || run.Links[0].SpanContext.SpanID() != submit.SpanContext.SpanID() {
		t.Errorf("the run's links %+v, want the submission's span", run.Links)
	}
	var decided bool
	for _, e := range submit.Events {
		if e.Name == observe.EventDecision {
			decided = true
		}
	}
	if !decided {
		t.Errorf("the submission's span has no %s event: %+v", observe.EventDecision, submit.Events)
	}
	if logs := s.logs.String(); !strings.Contains(logs, `msg="http request" method=POST route="POST /v1/threads/{thread_id}/inputs" path=/v1/threads/T/inputs status=202`) {
		t.Errorf("no access log line of the submission:\n%s", logs)
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// TestRequestRouteLabels: without a tracer, the route of a request's
// metrics is the pattern the mux matched as it served it; a request the
// token check refused keeps its route, one no route takes (404, 405) is
// unmatched.
func TestRequestRouteLabels(t *testing.T) {
	s := newServer(t, false, httpapi.Options{Token: "s3cret"})
	auth := []string{"Authorization", "Bearer s3cret"}
	s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"x"}`)
	_, body := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"x"}`, auth...)
	adm := decode[httpapi.Admission](t, body)
	s.do(t, "GET", "/v1/runs/"+adm.RunID+"/result?wait=60s", "", auth...)
	s.do(t, "GET", "/v1/runs/"+adm.RunID+"/result?wait=60s", "", auth...)
	s.do(t, "GET", "/v1/nothing", "", auth...)
	s.do(t, "DELETE", "/v1/runs/"+adm.RunID, "", auth...)
	_, metrics := s.do(t, "GET", "/metrics", "", auth...)
	for _, want := range []string{
		`agenthost_http_requests_total{code="401",route="POST /v1/threads/{thread_id}/inputs"} 1`,
		`agenthost_http_requests_total{code="202",route="POST /v1/threads/{thread_id}/inputs"} 1`,
		`agenthost_http_requests_total{code="200",route="GET /v1/runs/{run_id}/result"} 2`,
		`agenthost_http_requests_total{code="404",route="unmatched"} 1`,
		`agenthost_http_requests_total{code="405",route="unmatched"} 1`,
		`agenthost_http_request_seconds_count{code="200",route="GET /v1/runs/{run_id}/result"} 2`,
	} {
		if !strings.Contains(string(metrics), want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

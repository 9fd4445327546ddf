// Package observe instruments a runtime for operators: Prometheus metrics
// of model and tool calls, and OpenTelemetry spans of runs, steps, model
// calls and tool calls named and attributed after the OpenTelemetry GenAI
// semantic conventions.
//
// It wraps the model (Model) and the tools (Tools), and its Tracer is the
// runtime's host.Observer: the runtime itself knows nothing of Prometheus
// or OpenTelemetry.
package observe

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agenthost/agenthost/host/model"
)

// Metrics are the model and tool call families. They are a
// prometheus.Collector: register them where /metrics is served.
type Metrics struct {
	modelCalls   *prometheus.CounterVec
	modelErrors  *prometheus.CounterVec
	modelSeconds *prometheus.HistogramVec
	modelTokens  *prometheus.CounterVec
	toolCalls    *prometheus.CounterVec
	toolErrors   *prometheus.CounterVec
	toolSeconds  *prometheus.HistogramVec
}

// callBuckets are the upper bounds, in seconds, of the call latencies.
var callBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// NewMetrics returns the families, empty.
func NewMetrics() *Metrics {
	return &Metrics{
		modelCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agenthost_model_calls_total", Help: "Model calls (one per step), by model.",
		}, []string{"model"}),
		modelErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agenthost_model_call_errors_total", Help: "Model calls that failed (an interrupted or canceled run's call included), by model.",
		}, []string{"model"}),
		modelSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agenthost_model_call_seconds", Help: "Model call latency, by model.", Buckets: callBuckets,
		}, []string{"model"}),
		modelTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agenthost_model_tokens_total", Help: "Tokens the model reported using, by model and type (input, output).",
		}, []string{"model", "type"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agenthost_tool_calls_total", Help: "Tool calls, by tool.",
		}, []string{"tool"}),
		toolErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agenthost_tool_call_errors_total", Help: "Tool calls that returned an error (their time limit included), by tool.",
		}, []string{"tool"}),
		toolSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agenthost_tool_call_seconds", Help: "Tool call latency, by tool.", Buckets: callBuckets,
		}, []string{"tool"}),
	}
}

func (m *Metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.modelCalls, m.modelErrors, m.modelSeconds, m.modelTokens, m.toolCalls, m.toolErrors, m.toolSeconds}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all() {
		c.Collect(ch)
	}
}

// Model returns m instrumented: each step is counted in met (when not nil)
// and traced as a span by tr (when not nil). name is the model's name, for
// steps whose parameters name none.
func Model(m model.Model, name string, met *Metrics, tr *Tracer) model.Model {
	return &instrumentedModel{m: m, name: name, met: met, tr: tr}
}

type instrumentedModel struct {
	m    model.Model
	name string
	met  *Metrics
	tr   *Tracer
}

func (im *instrumentedModel) Step(ctx context.Context, req model.Request, stream func(string)) (model.Response, error) {
	name := im.name
	if req.Params.Model != "" {
		name = req.Params.Model
	}
	ctx, end := im.tr.modelCall(ctx, name, req)
	start := time.Now()
	resp, err := im.m.Step(ctx, req, stream)
	if im.met != nil {
		im.met.modelCalls.WithLabelValues(name).Inc()
		im.met.modelSeconds.WithLabelValues(name).Observe(time.Since(start).Seconds())
		if err != nil {
			im.met.modelErrors.WithLabelValues(name).Inc()
		}
		if resp.Usage.InputTokens > 0 {
			im.met.modelTokens.WithLabelValues(name, "input").Add(float64(resp.Usage.InputTokens))
		}
		if resp.Usage.OutputTokens > 0 {
			im.met.modelTokens.WithLabelValues(name, "output").Add(float64(resp.Usage.OutputTokens))
		}
	}
	end(resp, err)
	return resp, err
}

// Tools returns the tools instrumented like Model's steps. A tool with its
// own time limit (model.TimeLimited) keeps it.
func Tools(tools []model.Tool, met *Metrics, tr *Tracer) []model.Tool {
	out := make([]model.Tool, len(tools))
	for i, t := range tools {
		it := &instrumentedTool{Tool: t, met: met, tr: tr}
		if tl, ok := t.(model.TimeLimited); ok {
			out[i] = timeLimitedTool{it, tl}
		} else {
			out[i] = it
		}
	}
	return out
}

type instrumentedTool struct {
	model.Tool
	met *Metrics
	tr  *Tracer
}

func (it *instrumentedTool) Call(ctx context.Context, arguments string) (string, error) {
	name := it.Spec().Name
	ctx, end := it.tr.toolCall(ctx, name)
	start := time.Now()
	out, err := it.Tool.Call(ctx, arguments)
	if it.met != nil {
		it.met.toolCalls.WithLabelValues(name).Inc()
		it.met.toolSeconds.WithLabelValues(name).Observe(time.Since(start).Seconds())
		if err != nil {
			it.met.toolErrors.WithLabelValues(name).Inc()
		}
	}
	end(err)
	return out, err
}

type timeLimitedTool struct {
	*instrumentedTool
	tl model.TimeLimited
}

func (t timeLimitedTool) Timeout() time.Duration { return t.tl.Timeout() }

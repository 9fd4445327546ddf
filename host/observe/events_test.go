package observe_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/observe"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// TestDecisionAndAbsorptionEvents: an input to a busy thread under an
// inject policy is a decision event on the active run's span; the run
// takes it and absorbs its run, which are events too, and the absorbed
// run's submission is linked to the run that answered it.
func TestDecisionAndAbsorptionEvents(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	tr := observe.NewTracer(tp)
	sm, err := model.NewScripted(model.Script{Steps: []model.ScriptStep{{Tool: &model.ScriptTool{Name: "lookup"}}, {Answer: "echo"}}})
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	sm.Sleep = func(ctx context.Context, _ time.Duration) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	rt, err := host.New(context.Background(), host.Config{
		Driver: memdriver.New(), Model: observe.Model(sm, "scripted", nil, tr), Tools: observe.Tools([]model.Tool{tool{name: "lookup"}}, nil, tr),
		Policy:   policy.Static{Name: "inject", Decision: runstate.Decision{Action: runstate.ActionInject}},
		Observer: tr, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := rt.Submit(ctx, "T", "first", host.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Wait for A's first step: it executes here, its span started.
	for started := false; !started; {
		evs, more := rt.Events(a.RunID, 0)
		for _, e := range evs {
			started = started || e.Type == host.EventStepStarted
		}
		if !started {
			select {
			case <-more:
			case <-ctx.Done():
				t.Fatal("run A never started a step")
			}
		}
	}
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}, TraceFlags: trace.FlagsSampled, Remote: true})
	b, err := rt.Submit(trace.ContextWithRemoteSpanContext(ctx, remote), "T", "second", host.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	close(gate)
	if res, err := rt.Wait(ctx, b.RunID); err != nil || res.AnsweredByRunID != a.RunID {
		t.Fatalf("B: %+v %v, want answered by A", res, err)
	}
	if _, err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var run *tracetest.SpanStub
	spans := exp.GetSpans()
	for i, s := range spans {
		if s.Name == "invoke_agent agenthost" {
			if run != nil {
				t.Fatalf("two run spans: B was absorbed, it never ran")
			}
			run = &spans[i]
		}
	}
	if run == nil {
		t.Fatalf("no run span: %v", names(spans))
	}
	events := map[string]map[string]string{}
	for _, e := range run.Events {
		m := map[string]string{}
		for _, kv := range e.Attributes {
			m[string(kv.Key)] = kv.Value.String()
		}
		events[e.Name] = m
	}
	if d := events[observe.EventDecision]; d["agenthost.input_policy.decision"] != "inject" || d["agenthost.admitted_run.id"] != b.RunID {
		t.Errorf("decision event %v", d)
	}
	if e := events[observe.EventInputTaken]; e["agenthost.from_run.id"] != b.RunID {
		t.Errorf("input taken event %v", e)
	}
	if e := events[observe.EventAbsorbed]; e["agenthost.absorbed_run.id"] != b.RunID {
		t.Errorf("absorbed event %v", e)
	}
	var linked bool
	for _, l := range run.Links {
		linked = linked || l.SpanContext.TraceID() == remote.TraceID()
	}
	if !linked {
		t.Errorf("A's span does not link B's submission: %+v", run.Links)
	}
}

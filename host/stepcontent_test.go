package host_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// refusingSteps refuses, as too large, every step batch holding a message
// longer than limit, as a driver does past its size limits.
type refusingSteps struct {
	*memdriver.Driver
	limit int
}

func (r *refusingSteps) CommitSteps(ctx context.Context, b driver.StepBatch) error {
	for _, st := range b.Steps {
		if len(st.Message.Content) > r.limit {
			return fmt.Errorf("%w: step of %d bytes", driver.ErrTooLarge, len(st.Message.Content))
		}
	}
	return r.Driver.CommitSteps(ctx, b)
}

// TestToolResultTooLargeToStore: a tool result the store refuses to keep is
// not left to be made again (the run would loop on the call, its side
// effect repeated): the model is told the result could not be stored, the
// call is made once, and the run answers.
func TestToolResultTooLargeToStore(t *testing.T) {
	tool := &keyedTool{}
	big := &bigTool{keyedTool: tool, size: 4096}
	m := &stepsModel{steps: 1, calls: map[int]int{}}
	rt, err := host.New(context.Background(), host.Config{
		Driver: &refusingSteps{Driver: memdriver.New(), limit: 1024},
		Policy: hintPolicy{}, Model: m, Tools: []model.Tool{big}, Logger: quietLog,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	tk, err := rt.Submit(context.Background(), "T", "fetch it", host.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := rt.Wait(ctx, tk.RunID)
	if err != nil || res.Answer == nil {
		t.Fatalf("run: %+v, %v", res, err)
	}
	if keys := tool.log(); len(keys) != 2 {
		t.Fatalf("tool executions %v, want each of the step's two calls once", keys)
	}
	if !strings.Contains(res.Answer.Content, "could not be stored") {
		t.Fatalf("answer %q does not show the model was told the result was not kept", res.Answer.Content)
	}
}

// bigTool answers with a result of size bytes, logging its keys.
type bigTool struct {
	*keyedTool
	size int
}

func (b *bigTool) Call(ctx context.Context, args string) (string, error) {
	if _, err := b.keyedTool.Call(ctx, args); err != nil {
		return "", err
	}
	return strings.Repeat("x", b.size), nil
}

// TestInterruptedCallNotCommitted: a tool call cut short by an interrupt
// has no result: none is committed for it, so that a recovered run would
// make the call again with its key instead of trusting the stop as the
// tool's answer.
func TestInterruptedCallNotCommitted(t *testing.T) {
	entered := make(chan struct{}, 1)
	var once sync.Once
	tool := &keyedTool{kill: func(string) bool {
		first := false
		once.Do(func() { first = true; entered <- struct{}{} })
		return first // only run A's first call hangs until it is stopped
	}}
	m := &stepsModel{steps: 1, calls: map[int]int{}}
	rt, err := host.New(context.Background(), host.Config{Driver: memdriver.New(), Policy: hintPolicy{}, Model: m, Tools: []model.Tool{tool}, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := rt.Submit(ctx, "T", "first", host.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the tool was never called")
	}
	if _, err := rt.Submit(ctx, "T", "stop that", host.SubmitOptions{Hint: "interrupt"}); err != nil {
		t.Fatal(err)
	}
	res, err := rt.Wait(ctx, a.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != "interrupted" {
		t.Fatalf("run A ended %s, want interrupted", res.State)
	}
	steps, err := rt.Steps(ctx, a.RunID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		if st.Kind == "tool" {
			t.Fatalf("step %d commits a result for a call the interrupt cut short: %q", st.Seq, st.Message.Content)
		}
	}
}

package host_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// crashable is a process's view of a store that survives it: once killed,
// every call fails as a dead process's would, and nothing more reaches the
// store. beforeCommit, when set, may kill it as a batch arrives (the batch
// is then not written).
type crashable struct {
	*memdriver.Driver
	dead         atomic.Bool
	beforeCommit func(driver.Batch) bool
}

var errDead = fmt.Errorf("%w: the process is dead", driver.ErrUnavailable)

func (c *crashable) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	if c.dead.Load() || (c.beforeCommit != nil && c.beforeCommit(b)) {
		c.dead.Store(true)
		return 0, errDead
	}
	return c.Driver.Commit(ctx, b)
}

func (c *crashable) CommitSteps(ctx context.Context, b driver.StepBatch) error {
	if c.dead.Load() {
		return errDead
	}
	return c.Driver.CommitSteps(ctx, b)
}

func (c *crashable) LoadThread(ctx context.Context, id string) (driver.ThreadSnapshot, error) {
	if c.dead.Load() {
		return driver.ThreadSnapshot{}, errDead
	}
	return c.Driver.LoadThread(ctx, id)
}

func (c *crashable) Close(context.Context) error { return nil }

// stepsModel is a model of several steps, each asking for two tool calls,
// then answering with the inputs it was shown and the tool results it saw,
// in order. It logs every call it gets by step, and may die at one.
type stepsModel struct {
	steps int
	mu    sync.Mutex
	calls map[int]int
	kill  func(step int) bool // true: the process dies in this model call
}

func (m *stepsModel) Step(ctx context.Context, req model.Request, _ func(string)) (model.Response, error) {
	m.mu.Lock()
	m.calls[req.Step]++
	m.mu.Unlock()
	if m.kill != nil && m.kill(req.Step) {
		<-ctx.Done() // dead: nothing more comes of this call
		return model.Response{}, ctx.Err()
	}
	if req.Step < m.steps {
		return model.Response{ToolCalls: []record.ToolCall{
			{ID: fmt.Sprintf("c%d.0", req.Step), Name: "keyed"}, {ID: fmt.Sprintf("c%d.1", req.Step), Name: "keyed"},
		}}, nil
	}
	var parts []string
	for _, msg := range req.Messages {
		switch msg.Role {
		case record.RoleUser:
			parts = append(parts, msg.Content)
		case record.RoleTool:
			parts = append(parts, "["+msg.ToolCallID+"="+msg.Content+"]")
		}
	}
	return model.Response{Content: strings.Join(parts, " ")}, nil
}

// keyedTool logs the idempotency key of every execution, and may die in one
// (after logging it: the call was made, its result never committed).
type keyedTool struct {
	mu   sync.Mutex
	keys []string
	kill func(key string) bool
}

func (*keyedTool) Spec() model.ToolSpec { return model.ToolSpec{Name: "keyed"} }

func (t *keyedTool) Call(ctx context.Context, _ string) (string, error) {
	c, _ := model.CallFrom(ctx)
	key := c.IdempotencyKey()
	t.mu.Lock()
	t.keys = append(t.keys, key)
	t.mu.Unlock()
	if t.kill != nil && t.kill(key) {
		<-ctx.Done()
		return "", ctx.Err()
	}
	// The result depends on the call's place, not on the run: an
	// uninterrupted run elsewhere gets the same.
	return fmt.Sprintf("r%d.%d", c.Step, c.Index), nil
}

func (t *keyedTool) log() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.keys)
}

const resumeSteps = 3 // tool steps before the answer

// runOnce runs one input to its answer on a fresh store, uninterrupted.
func runOnce(t *testing.T) string {
	m := &stepsModel{steps: resumeSteps, calls: map[int]int{}}
	rt, err := host.New(context.Background(), host.Config{Driver: memdriver.New(), Policy: hintPolicy{}, Model: m, Tools: []model.Tool{&keyedTool{}}, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	tk, err := rt.Submit(context.Background(), "T", "plan the trip", host.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := rt.Wait(ctx, tk.RunID)
	if err != nil || res.Answer == nil {
		t.Fatalf("uninterrupted run: %+v, %v", res, err)
	}
	return res.Answer.Content
}

// TestResumeAfterCrash kills the process executing a run of several steps
// with two tool calls each at every point between and inside its steps,
// and restarts it on the same store: the run resumes where it stopped (I9:
// no committed model or tool call is made again; I10: the call in flight is
// made again with its key) and answers as an uninterrupted run does.
func TestResumeAfterCrash(t *testing.T) {
	want := runOnce(t)
	type point struct {
		name     string
		model    int    // die in the model call of this step (-1: not)
		tool     string // die in the tool call with this key's suffix ("": not)
		terminal bool   // die as the terminal commit is sent
		// modelAgain is the model step called twice (-1: none): the one
		// the process died in, or, dying at the terminal commit, the
		// answer's, whose message is committed with the run's end.
		modelAgain int
		againKeys  int // tool calls made twice
	}
	var points []point
	for k := 0; k <= resumeSteps; k++ {
		points = append(points, point{name: fmt.Sprintf("in model step %d", k), model: k, modelAgain: k})
	}
	for k := 0; k < resumeSteps; k++ {
		for i := range 2 {
			points = append(points, point{name: fmt.Sprintf("in tool call %d of step %d", i, k), model: -1, tool: fmt.Sprintf("/step%d/%d", k, i), againKeys: 1, modelAgain: -1})
		}
	}
	points = append(points, point{name: "before the terminal commit", model: -1, terminal: true, modelAgain: resumeSteps})
	for _, p := range points {
		t.Run(p.name, func(t *testing.T) {
			mem := memdriver.New()
			tool := &keyedTool{}
			m := &stepsModel{steps: resumeSteps, calls: map[int]int{}}
			first := &crashable{Driver: mem}
			var dieOnce sync.Once
			die := func() bool {
				died := false
				dieOnce.Do(func() { first.dead.Store(true); died = true })
				return died
			}
			m.kill = func(step int) bool { return step == p.model && die() }
			tool.kill = func(key string) bool { return p.tool != "" && strings.HasSuffix(key, p.tool) && die() }
			if p.terminal {
				first.beforeCommit = func(b driver.Batch) bool {
					return slices.ContainsFunc(b.Runs, func(r record.Run) bool { return r.State == record.StateCompleted })
				}
			}
			rt1, err := host.New(context.Background(), host.Config{Driver: first, Policy: hintPolicy{}, Model: m, Tools: []model.Tool{tool}, Logger: quietLog})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				rt1.Close(ctx) // abandons what the dead process was doing
			})
			tk, err := rt1.Submit(context.Background(), "T", "plan the trip", host.SubmitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(time.Minute)
			for !first.dead.Load() {
				if time.Now().After(deadline) {
					t.Fatal("the process never reached its crash point")
				}
				time.Sleep(5 * time.Millisecond)
			}
			m.kill, tool.kill = nil, nil
			steps, err := mem.ReadSteps(context.Background(), tk.RunID, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			committed := map[string]bool{} // keys whose result was committed before the crash
			modelCommitted := map[int]bool{}
			calls := map[string]int{}
			for _, st := range steps {
				if st.Kind == record.StepModel {
					modelCommitted[st.Model] = true
					for i, c := range st.Message.ToolCalls {
						calls[c.ID] = i
					}
				}
				if st.Kind == record.StepTool {
					committed[model.Call{RunID: tk.RunID, Step: st.Model, Index: calls[st.Message.ToolCallID]}.IdempotencyKey()] = true
				}
			}
			before := tool.log()

			// The restarted process, on the same store.
			rt2, err := host.New(context.Background(), host.Config{Driver: mem, Policy: hintPolicy{}, Model: m, Tools: []model.Tool{tool}, Logger: quietLog})
			if err != nil {
				t.Fatal(err)
			}
			defer rt2.Close(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := rt2.Wait(ctx, tk.RunID)
			if err != nil || res.Answer == nil {
				t.Fatalf("after the restart: %+v, %v", res, err)
			}
			if res.Answer.Content != want {
				t.Fatalf("answer %q, an uninterrupted run answers %q", res.Answer.Content, want)
			}
			keys := tool.log()
			after := keys[len(before):]
			for _, k := range after {
				if committed[k] {
					t.Errorf("I9: tool call %s, whose result was committed, was made again", k)
				}
			}
			count := map[string]int{}
			twice := 0
			for _, k := range keys {
				count[k]++
				if count[k] == 2 {
					twice++
				}
			}
			if twice != p.againKeys || len(count) != 2*resumeSteps {
				t.Errorf("tool calls %v: %d made twice (want %d), %d distinct (want %d)", keys, twice, p.againKeys, len(count), 2*resumeSteps)
			}
			if p.tool != "" && count[tk.RunID+p.tool] != 2 {
				t.Errorf("I10: the call in flight (%s) was not made again with its key: %v", p.tool, keys)
			}
			m.mu.Lock()
			for step, n := range m.calls {
				if n > 1 && (step != p.modelAgain || modelCommitted[step]) {
					t.Errorf("I9: model step %d was called %d times", step, n)
				}
			}
			m.mu.Unlock()
			if st := rt2.Stats(); len(steps) > 0 && st.StepsResumed != int64(len(steps)) {
				t.Errorf("resumed from %d steps, %d were committed", st.StepsResumed, len(steps))
			}
			// The stored conversation is valid and is what the model saw.
			hist, err := rt2.History(context.Background(), "T")
			if err != nil {
				t.Fatal(err)
			}
			var roles []string
			for _, msg := range hist {
				roles = append(roles, string(msg.Role))
			}
			wantRoles := []string{"user"}
			for range resumeSteps {
				wantRoles = append(wantRoles, "assistant", "tool", "tool")
			}
			wantRoles = append(wantRoles, "assistant")
			if !slices.Equal(roles, wantRoles) {
				t.Fatalf("history roles %v, want %v", roles, wantRoles)
			}
		})
	}
}

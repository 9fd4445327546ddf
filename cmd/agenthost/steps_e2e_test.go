package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/internal/mcptest"
	"github.com/agenthost/agenthost/internal/openaitest"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/plugins/badgerstore/badgerdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// The end-to-end tests of durable steps (docs/adr/0130): real serve
// processes over HTTP, a fake OpenAI-compatible model that plays a plan of
// several tool-calling steps (internal/openaitest), and the MCP test server
// (internal/mcptest) as the tool server, over HTTP in the test process so
// that its log of idempotency keys spans every serve process of a test.
// Each run is stopped at its own point by a call the test holds (a tool
// call, or the model's call), never by a sleep; the host is then killed
// with SIGKILL and the run completes on the restarted host, or on another
// host of a shared store.

// planServer is the name the MCP test server is configured under: the
// model calls its tools as planServer + "_echo" and planServer + "_add".
const planServer = "t"

// The run every test plays, for a tag that tells runs apart:
//
//	model step 0: echo a-TAG
//	model step 1: echo b-TAG, echo c-TAG, add 1 2   (three calls, one step)
//	model step 2: echo d-TAG
//	model step 3: the answer, "done: a-TAG | b-TAG | c-TAG | 3 | d-TAG"
//
// Its step records, in order: model 0, tool, model 1, tool, tool, tool,
// model 2, tool, model 3 (the answer).
const planRecords = 9

// planFinal is the model step of the answer.
const planFinal = 3

// planKeys are the idempotency keys of the plan's tool calls, after the
// run's id.
var planKeys = []string{"step0/0", "step1/0", "step1/1", "step1/2", "step2/0"}

func planInput(tag string) string {
	echo := func(s string) map[string]any {
		return map[string]any{"tool": planServer + "_echo", "arguments": map[string]string{"text": s + "-" + tag}}
	}
	add := map[string]any{"tool": planServer + "_add", "arguments": map[string]int{"a": 1, "b": 2}}
	b, _ := json.Marshal([][]map[string]any{{echo("a")}, {echo("b"), echo("c"), add}, {echo("d")}})
	return "plan " + string(b)
}

func planAnswer(tag string) string {
	return fmt.Sprintf("done: a-%[1]s | b-%[1]s | c-%[1]s | 3 | d-%[1]s", tag)
}

// killPoint is where a run is stopped when its host is killed.
type killPoint struct {
	name string
	tag  string
	// hold is the echo text of the tool call held (in flight at the
	// kill), inflight its key after the run's id; empty when no tool call
	// is in flight.
	hold, inflight string
	// holdModel holds the model's call of step planFinal; final lets the
	// model answer and stops the run in the terminal commit that carries
	// the answer's step record, which is then not applied.
	holdModel, final bool
	// committed is how many step records the run committed before the
	// kill.
	committed int

	run       string
	toolGate  *gate
	modelGate *gate
}

// killPoints are the points every test stops a run at, one run each.
func killPoints() []*killPoint {
	return []*killPoint{
		{name: "after a model step, before its tools", tag: "k1", hold: "b-k1", inflight: "step1/0", committed: 3},
		{name: "between two tool calls of one step", tag: "k2", hold: "c-k2", inflight: "step1/1", committed: 4},
		{name: "after the last tool step, the model's call in flight", tag: "k3", holdModel: true, committed: 8},
		{name: "in the terminal commit that carries the answer", tag: "k4", holdModel: true, final: true, committed: 8},
	}
}

// gate holds one call until it is released.
type gate struct {
	arrived, release chan struct{}
	hit              bool
	once             sync.Once
}

func newGate() *gate { return &gate{arrived: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// wait waits until the held call arrived.
func (g *gate) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.arrived:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: the held call never came", what)
	}
}

// stepsRig is the model and the tool server the serve processes of a test
// share, and the calls they received.
type stepsRig struct {
	t      *testing.T
	fake   *openaitest.Server
	rec    *mcptest.Recorder
	mcpURL string

	mu         sync.Mutex
	toolGates  map[string]*gate // by echo text
	modelGates map[string]*gate // by the run's input
	requests   []openaitest.Request
}

func newStepsRig(t *testing.T) *stepsRig {
	rg := &stepsRig{t: t, fake: openaitest.New(), rec: &mcptest.Recorder{},
		toolGates: map[string]*gate{}, modelGates: map[string]*gate{}}
	t.Cleanup(rg.fake.Close)
	rg.fake.SetHold(func(ctx context.Context, r openaitest.Request) {
		rg.mu.Lock()
		rg.requests = append(rg.requests, r)
		g := rg.modelGates[r.LastUser]
		if r.Step != planFinal || g == nil || g.hit {
			g = nil
		} else {
			g.hit = true
		}
		rg.mu.Unlock()
		if g != nil {
			close(g.arrived)
			select {
			case <-g.release:
			case <-ctx.Done():
			}
		}
	})
	srv := mcptest.NewServer(mcptest.Options{Recorder: rg.rec, Hold: func(ctx context.Context, c mcptest.Call) {
		var args struct{ Text string }
		json.Unmarshal([]byte(c.Arguments), &args)
		rg.mu.Lock()
		g := rg.toolGates[args.Text]
		if g == nil || g.hit {
			g = nil
		} else {
			g.hit = true
		}
		rg.mu.Unlock()
		if g != nil {
			close(g.arrived)
			select {
			case <-g.release:
			case <-ctx.Done():
			}
		}
	}})
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	hs := httptest.NewServer(mux)
	t.Cleanup(func() {
		rg.openAll()
		hs.CloseClientConnections()
		hs.Close()
	})
	rg.mcpURL = hs.URL + "/mcp"
	return rg
}

// config is the part of serve's configuration that names the model and
// the tool server.
func (rg *stepsRig) config() string {
	return fmt.Sprintf(`model: openai
openai:
  base_url: %s
  model: fake-model
  timeout: 5m
mcp_servers:
  - name: %s
    url: %s
    timeout: 5m
`, rg.fake.BaseURL(), planServer, rg.mcpURL)
}

// arm sets the gates of kp's run.
func (rg *stepsRig) arm(kp *killPoint) {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	if kp.hold != "" {
		kp.toolGate = newGate()
		rg.toolGates[kp.hold] = kp.toolGate
	}
	if kp.holdModel {
		kp.modelGate = newGate()
		rg.modelGates[planInput(kp.tag)] = kp.modelGate
	}
}

// openAll releases every held call.
func (rg *stepsRig) openAll() {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	for _, g := range rg.toolGates {
		g.open()
	}
	for _, g := range rg.modelGates {
		g.open()
	}
}

// mark returns how many model calls were made so far.
func (rg *stepsRig) mark() int {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	return len(rg.requests)
}

// modelCalls counts the model's calls for runs with input since mark, by
// model step.
func (rg *stepsRig) modelCalls(input string, mark int) map[int]int {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	n := map[int]int{}
	for _, r := range rg.requests[mark:] {
		if r.LastUser == input {
			n[r.Step]++
		}
	}
	return n
}

// toolCalls returns the tool calls the run made, by key (after the run's
// id), in the order the server received them.
func (rg *stepsRig) toolCalls(run string) map[string][]mcptest.Call {
	out := map[string][]mcptest.Call{}
	for _, c := range rg.rec.Calls() {
		if k, ok := strings.CutPrefix(c.Key, run+"/"); ok {
			out[k] = append(out[k], c)
		}
	}
	return out
}

// outcome is what a completed run left, for comparing two runs of one
// plan.
type outcome struct {
	answer  string
	history []string // the thread's messages: role, content, calls
	records []string // the run's step records: kind, model step, message
}

func (s *server) getJSON(path string, out any) {
	s.t.Helper()
	code, body := s.get(path)
	if code != http.StatusOK {
		s.t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), out); err != nil {
		s.t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

type apiMessage struct {
	Role       string `json:"role"`
	Content    string `json:"content"`
	ToolCallID string `json:"tool_call_id"`
	ToolCalls  []struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"tool_calls"`
}

func (m apiMessage) String() string {
	s := m.Role + " " + m.Content
	for _, c := range m.ToolCalls {
		s += " " + c.Name + c.Arguments
	}
	return s
}

type apiStep struct {
	Seq     int64      `json:"seq"`
	Attempt int        `json:"attempt"`
	Model   int        `json:"model_step"`
	Kind    string     `json:"kind"`
	Message apiMessage `json:"message"`
}

type apiRun struct {
	ID       string `json:"id"`
	ThreadID string `json:"thread_id"`
	State    string `json:"state"`
	Attempt  int    `json:"attempt"`
}

// steps returns the run's step records.
func (s *server) steps(run string) []apiStep {
	var page struct {
		Steps []apiStep `json:"steps"`
	}
	s.getJSON("/v1/runs/"+run+"/steps?limit=1000", &page)
	return page.Steps
}

// result waits for the run to complete and returns its answer.
func (s *server) result(run string) string {
	s.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, body := s.get("/v1/runs/" + run + "/result?wait=20s")
		if code == http.StatusOK {
			var res struct {
				State  string `json:"state"`
				Error  string `json:"error"`
				Answer *struct {
					Content string `json:"content"`
				} `json:"answer"`
			}
			if err := json.Unmarshal([]byte(body), &res); err != nil {
				s.t.Fatalf("result of %s: %v in %s", run, err, body)
			}
			if res.State != "completed" || res.Answer == nil {
				s.t.Fatalf("run %s ended %s (%s), want completed", run, res.State, res.Error)
			}
			return res.Answer.Content
		}
		if code != http.StatusAccepted || time.Now().After(deadline) {
			s.t.Fatalf("run %s not completed within 2m: %d %s", run, code, body)
		}
	}
}

// outcome reads what the completed run left.
func (s *server) outcome(thread, run string) outcome {
	s.t.Helper()
	o := outcome{answer: s.result(run)}
	var msgs struct {
		Messages []apiMessage `json:"messages"`
	}
	s.getJSON("/v1/threads/"+url.PathEscape(thread)+"/messages?limit=1000", &msgs)
	for _, m := range msgs.Messages {
		o.history = append(o.history, m.String())
	}
	for _, st := range s.steps(run) {
		o.records = append(o.records, fmt.Sprintf("%s %d %s", st.Kind, st.Model, st.Message))
	}
	return o
}

// submitPlan submits the plan of tag to thread and returns the run.
func (s *server) submitPlan(thread, tag string) string {
	return s.submit(thread, planInput(tag))
}

var driverPidsRE = regexp.MustCompile(`store driver (?:ready|relaunched).* pid=(\d+)`)

// driverPids are the pids of every driver process the server logged.
func (s *server) driverPids() []int {
	var pids []int
	for _, m := range driverPidsRE.FindAllStringSubmatch(s.log.String(), -1) {
		n, _ := strconv.Atoi(m[1])
		pids = append(pids, n)
	}
	return pids
}

// crash kills the server with SIGKILL, with its process group (its store
// driver), as a machine that loses power would, and waits until every
// driver process it started is gone.
func (s *server) crash() {
	s.t.Helper()
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-s.done:
	case <-time.After(time.Minute):
		s.t.Fatal("serve still running a minute after SIGKILL")
	}
	for _, pid := range s.driverPids() {
		syscall.Kill(pid, syscall.SIGKILL)
		deadline := time.Now().Add(time.Minute)
		for processAlive(pid) {
			if time.Now().After(deadline) {
				s.t.Fatalf("driver %d alive a minute after SIGKILL", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// baseline runs the plan of every kill point on a thread of its own with
// nothing held: the outcome an uninterrupted run gives.
func baseline(t *testing.T, s *server, kps []*killPoint) map[string]outcome {
	t.Helper()
	runs := map[string]string{}
	for _, kp := range kps {
		runs[kp.tag] = s.submitPlan("base-"+kp.tag, kp.tag)
	}
	out := map[string]outcome{}
	for _, kp := range kps {
		o := s.outcome("base-"+kp.tag, runs[kp.tag])
		if o.answer != planAnswer(kp.tag) {
			t.Fatalf("uninterrupted run of %s answered %q, want %q", kp.tag, o.answer, planAnswer(kp.tag))
		}
		if len(o.records) != planRecords {
			t.Fatalf("uninterrupted run of %s has %d step records, want %d:\n%s", kp.tag, len(o.records), planRecords, strings.Join(o.records, "\n"))
		}
		out[kp.tag] = o
	}
	return out
}

// startHeld arms the gates of every kill point, submits its run to s and
// waits until the run holds where it should. It returns the mark of the
// model calls before.
func startHeld(t *testing.T, rg *stepsRig, s *server, kps []*killPoint) int {
	t.Helper()
	mark := rg.mark()
	for _, kp := range kps {
		rg.arm(kp)
		kp.run = s.submitPlan(kp.tag, kp.tag)
	}
	for _, kp := range kps {
		if kp.toolGate != nil {
			kp.toolGate.wait(t, kp.name)
		}
		if kp.modelGate != nil {
			kp.modelGate.wait(t, kp.name)
		}
	}
	return mark
}

// checkResumed checks each kill point's run after it completed on s: the
// answer and the thread's history are those of the uninterrupted run; no
// tool call whose result was committed was made again, the call in flight
// at the kill was made again with its key, and nothing else; no model step
// that was committed was asked again, and the answer's step, in flight or
// lost with the terminal commit that carried it, was asked once more; the
// step records are the uninterrupted run's, each once, the first
// attempt's as many as were committed before the kill.
func checkResumed(t *testing.T, rg *stepsRig, s *server, kps []*killPoint, base map[string]outcome, mark int) {
	t.Helper()
	for _, kp := range kps {
		o := s.outcome(kp.tag, kp.run)
		want := base[kp.tag]
		if o.answer != want.answer {
			t.Errorf("%s: answer %q, want %q (the uninterrupted run's)", kp.name, o.answer, want.answer)
		}
		if !slices.Equal(o.history, want.history) {
			t.Errorf("%s: history\n%s\nwant (the uninterrupted run's)\n%s", kp.name, strings.Join(o.history, "\n"), strings.Join(want.history, "\n"))
		}
		if !slices.Equal(o.records, want.records) {
			t.Errorf("%s: step records\n%s\nwant (the uninterrupted run's)\n%s", kp.name, strings.Join(o.records, "\n"), strings.Join(want.records, "\n"))
		}
		var run apiRun
		s.getJSON("/v1/runs/"+kp.run, &run)
		if run.Attempt != 2 {
			t.Errorf("%s: the run completed at attempt %d, want 2 (recovered once)", kp.name, run.Attempt)
		}
		first := 0
		for _, st := range s.steps(kp.run) {
			if st.Attempt == 1 {
				first++
			}
		}
		if first != kp.committed {
			t.Errorf("%s: %d step records of the first attempt, want %d (where the run was stopped)", kp.name, first, kp.committed)
		}
		calls := rg.toolCalls(kp.run)
		var keys []string
		for k, cs := range calls {
			keys = append(keys, k)
			want := 1
			if k == kp.inflight {
				want = 2
			}
			if len(cs) != want {
				t.Errorf("%s: the call with key %s/%s was made %d times, want %d", kp.name, kp.run, k, len(cs), want)
			}
			for _, c := range cs {
				if c.Arguments != cs[0].Arguments || c.HeaderKey != c.Key {
					t.Errorf("%s: the calls with key %s differ: %+v", kp.name, c.Key, cs)
				}
			}
		}
		slices.Sort(keys)
		if !slices.Equal(keys, planKeys) {
			t.Errorf("%s: tool calls with keys %v, want %v", kp.name, keys, planKeys)
		}
		asked := rg.modelCalls(planInput(kp.tag), mark)
		for step := 0; step <= planFinal; step++ {
			want := 1
			if kp.holdModel && step == planFinal {
				// In flight at the kill, or answered and lost with the
				// terminal commit: never committed either way.
				want = 2
			}
			if asked[step] != want {
				t.Errorf("%s: the model was asked for step %d %d times, want %d", kp.name, step, asked[step], want)
			}
		}
	}
}

// faultDriverEnv makes the test binary serve badgerstore's driver under
// the name faultDriverName: a driver given by its path may not call itself
// by a built-in driver's name.
const (
	faultDriverEnv  = "AGENTHOST_TEST_FAULT_DRIVER"
	faultDriverName = "badgerstore-faults"
)

// renamedBadger is badgerstore's driver under another name.
type renamedBadger struct{ *badgerdriver.Driver }

func (d renamedBadger) Info(ctx context.Context) (driver.Info, error) {
	in, err := d.Driver.Info(ctx)
	in.Name = faultDriverName
	return in, err
}

// serveFaultDriverIfAsked serves renamedBadger and exits when the binary
// was run as faultDriver's program.
func serveFaultDriverIfAsked() {
	if os.Getenv(faultDriverEnv) == "" {
		return
	}
	f := badgerdriver.Factory{Logger: storedriver.Logger(faultDriverName)}
	storedriver.Serve(storedriver.FactoryFunc(func(ctx context.Context, cfg map[string]string) (driver.Driver, error) {
		d, err := f.Open(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return renamedBadger{d.(*badgerdriver.Driver)}, nil
	}))
	os.Exit(0)
}

// faultDriver writes a driver program for `store:` that runs this test
// binary's badgerstore driver, with the driver fault point the file flag
// holds armed (internal/driverfault) when it exists. It returns the
// program's path and flag's.
func faultDriver(t *testing.T) (path, flag string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// In the shared data directory: one program, certified once, for
	// every test of the binary.
	dir := sharedData(t)
	path, flag = filepath.Join(dir, "faultdriver.sh"), filepath.Join(dir, "faultdriver.flag")
	script := fmt.Sprintf(`#!/bin/sh
# The badgerstore driver of the agenthost test binary; with %[1]s there,
# the driver fault point it names armed.
if [ -f '%[1]s' ]; then
	read -r AGENTHOST_DRIVER_FAULT < '%[1]s'
	export AGENTHOST_DRIVER_FAULT
fi
%[2]s=1
export %[2]s
exec '%[3]s' "$@"
`, flag, faultDriverEnv, exe)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Remove(flag)
	t.Cleanup(func() { os.Remove(flag) })
	return path, flag
}

// stopInTerminal lets kp's held answer come while the terminal commit
// that carries it can never be applied: the driver is killed and
// relaunched, it and every later driver with the fault point
// before-commit@1 armed (the runs held, the relaunched driver's first
// commit is kp's terminal commit). It returns once the driver died at
// that commit.
func stopInTerminal(t *testing.T, s *server, kp *killPoint, flag string) {
	t.Helper()
	if err := os.WriteFile(flag, []byte("before-commit@1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pids := s.driverPids()
	if len(pids) == 0 {
		t.Fatal("no driver pid in the log")
	}
	if err := syscall.Kill(pids[len(pids)-1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for len(s.driverPids()) == len(pids) {
		if time.Now().After(deadline) {
			t.Fatal("the killed driver was not relaunched")
		}
		time.Sleep(20 * time.Millisecond)
	}
	armed := s.driverPids()[len(pids)]
	kp.modelGate.open()
	for processAlive(armed) {
		if time.Now().After(deadline) {
			t.Fatal("the relaunched driver did not reach its fault point")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// On badgerstore: runs of several tool-calling steps, each stopped at its
// own point (after a model step before its tools; between two tool calls
// of one step; with the last model call in flight; in the terminal commit
// that carries the answer) when serve is killed with SIGKILL, complete
// after the restart as an uninterrupted run does, with no committed step
// made again and the call in flight made again with its key.
func TestStepsResumeAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agenthost serve")
	}
	rg := newStepsRig(t)
	prog, flag := faultDriver(t)
	config := rg.config() + fmt.Sprintf("store: %s\nstore_config:\n  dir: %s\n", prog, filepath.Join(t.TempDir(), "badger"))
	began := time.Now()
	s := startServe(t, config)
	t.Logf("serve up (the driver certified) in %v", time.Since(began))
	kps := killPoints()
	base := baseline(t, s, kps)
	began = time.Now()
	mark := startHeld(t, rg, s, kps)
	for _, kp := range kps {
		if kp.final {
			stopInTerminal(t, s, kp, flag)
		}
	}
	s.crash()
	killed := time.Now()
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	rg.openAll()
	s2 := startServe(t, config)
	checkResumed(t, rg, s2, kps, base, mark)
	t.Logf("runs held in %v; from the kill to every run checked: %v", killed.Sub(began), time.Since(killed))
}

// On pgstore with two hosts: the same runs, started on one host before the
// other joins and stopped at the same points on the host that owns them
// (the last one by a row lock the test holds on the run's thread, which
// holds back the terminal commit that carries the answer until the owner
// is dead and its lease expired), move to the other host when the owner
// is killed with SIGKILL and its lease expires, and complete there as an
// uninterrupted run does.
func TestStepsMoveToAnotherHost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agenthost serve")
	}
	dbURL := pgtest.URL(t)
	rg := newStepsRig(t)
	config := func(name string) string {
		// A short lease, the owner's threads move 6s after it dies, yet
		// well above the pauses of a loaded machine: a live host whose
		// lease expired would recover its runs once more.
		return rg.config() + fmt.Sprintf("store: pgstore\nstore_url: %s\nlease_ttl: 6s\npoll_interval: 500ms\nhost_name: %s\n", dbURL, name)
	}
	began := time.Now()
	a := startServe(t, config("a"))
	t.Logf("host a up (the driver certified) in %v", time.Since(began))
	kps := killPoints()
	base := baseline(t, a, kps)
	began = time.Now()
	// The runs start on a while it is the only host, so a owns their
	// threads; b joins after. A thread stays with its owner while it has
	// a run open, whichever live host it would belong with when idle.
	mark := startHeld(t, rg, a, kps)
	b := startServe(t, config("b"))

	ctx := context.Background()
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	lock, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	for _, kp := range kps {
		if !kp.final {
			continue
		}
		// pgstore's terminal commit (commit_batch3) locks the thread's
		// row FOR UPDATE; a step commit only FOR SHARE, as this lock does.
		if _, err := lock.Exec(ctx, "SELECT 1 FROM agenthost.threads WHERE id = $1 FOR SHARE", kp.tag); err != nil {
			t.Fatal(err)
		}
		kp.modelGate.open()
		// The model answered once the terminal commit that carries the
		// answer waits for the lock: whatever waits for it is that commit
		// (alone, or grouped with others in one call), since the lock
		// holds only this thread's row, in a mode step commits share.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			var waiting int
			if err := db.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
				lock.Conn().PgConn().PID()).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no terminal commit came to wait for the thread's lock", kp.name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	a.crash()
	killed := time.Now()
	// The owner's terminal commit still waits in the database for the
	// lock; it is let go once the owner's lease expired, so that only the
	// fence can refuse it.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var live int
		if err := db.QueryRow(ctx, "SELECT count(*) FROM agenthost.leases WHERE holder = 'a' AND expires_at > clock_timestamp()").Scan(&live); err != nil {
			t.Fatal(err)
		}
		if live == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed host's lease did not expire")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	rg.openAll()
	checkResumed(t, rg, b, kps, base, mark)
	for _, kp := range kps {
		if !regexp.MustCompile(`recovered run" run=` + kp.run).MatchString(b.log.String()) {
			t.Errorf("%s: host b did not log that it recovered run %s", kp.name, kp.run)
		}
	}
	t.Logf("runs held in %v; from the kill to every run checked: %v", killed.Sub(began), time.Since(killed))
}

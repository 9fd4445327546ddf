package wasm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/guests/policy/rules"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/step"
)

type decideCase struct {
	hint, content string
	refine        runstate.Action // what refine decides
}

var decideCases = []decideCase{
	{"", "summarise this thread", runstate.ActionQueue},
	{"", "actually, in bullet points", runstate.ActionInject},
	{"", "Actually I meant the other thread", runstate.ActionInject},
	{"", "in bullet points please", runstate.ActionInject},
	{"", "also cover the costs", runstate.ActionInject},
	{"", "ALSO: the appendix", runstate.ActionInject},
	{"", "make it shorter", runstate.ActionInject},
	{"", "more concise, please", runstate.ActionInject},
	{"", "with more detail on step 2", runstate.ActionInject},
	{"", "  stop", runstate.ActionInterrupt},
	{"", "Please STOP, wrong thread", runstate.ActionInterrupt},
	{"", "cancel that", runstate.ActionInterrupt},
	{"", "actually, stop", runstate.ActionInterrupt},
	{"", "unstoppable force", runstate.ActionQueue},
	{"", "alsoran horses", runstate.ActionQueue},
	{"", "actuallyx", runstate.ActionQueue},
	{"", "what is the weather", runstate.ActionQueue},
	{"", "", runstate.ActionQueue},
	{"refine", "what is the weather", runstate.ActionInject},
	{"Refine", "stop", runstate.ActionInject},
	{"redirect", "also more detail", runstate.ActionInterrupt},
	{"REDIRECT", "", runstate.ActionInterrupt},
	{"other", "shorter", runstate.ActionInject},
	{"", "this is a long message that eventually says stop", runstate.ActionInterrupt},
	{"", "could you reformat it as Bullet Points", runstate.ActionInject},
	{"", "xxxxxxxmore detail", runstate.ActionInject},
	{"", "the bus stopped at the corner", runstate.ActionQueue},
	{"", "make it a bit shorter and then stop.", runstate.ActionInterrupt},
	{"", "bullet poin", runstate.ActionQueue},
	{"", "more concis", runstate.ActionQueue},
	{"", "\n\t also", runstate.ActionInject},
	{"", "Actually", runstate.ActionInject},
	{"", "so, actually", runstate.ActionQueue},
}

func request(c decideCase) policy.Request {
	return policy.Request{
		ThreadID: "t-1",
		Input:    policy.Input{Content: c.content, Hint: c.hint, Metadata: map[string]string{"user": "u1", "lang": "en"}},
		Active:   &policy.RunInfo{RunID: "r-1", Seq: 1, Steps: 3, Inputs: []string{"summarise this thread"}},
		Queued:   []policy.RunInfo{{RunID: "r-2", Seq: 2, Inputs: []string{"a", "b"}}},
	}
}

// TestStandardPolicies runs every standard inputPolicy guest, Go and C, with
// and without coalescePending, through the real host on a table of cases.
func TestStandardPolicies(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	type guest struct {
		name, path string
		decide     func(decideCase) runstate.Action
		actions    []runstate.Action
	}
	static := func(a runstate.Action) func(decideCase) runstate.Action {
		return func(decideCase) runstate.Action { return a }
	}
	refine := func(c decideCase) runstate.Action { return c.refine }
	guests := []guest{
		{"queue", goGuest(t, "queue"), static(runstate.ActionQueue), []runstate.Action{"queue"}},
		{"interrupt", goGuest(t, "interrupt"), static(runstate.ActionInterrupt), []runstate.Action{"interrupt", "queue"}},
		{"reject", goGuest(t, "reject"), static(runstate.ActionReject), []runstate.Action{"reject", "queue"}},
		{"inject", goGuest(t, "inject"), static(runstate.ActionInject), []runstate.Action{"inject", "queue"}},
		{"refine", goGuest(t, "refine"), refine, []runstate.Action{"queue", "inject", "interrupt"}},
		{"refine-c", cGuest(), refine, []runstate.Action{"queue", "inject", "interrupt"}},
	}
	for _, g := range guests {
		for _, coalesce := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/coalesce=%v", g.name, coalesce), func(t *testing.T) {
				var failures []Failure
				m := load(t, e, g.path, Options{
					Config:    fmt.Appendf(nil, `{"coalescePending": %v}`, coalesce),
					OnFailure: func(f Failure) { failures = append(failures, f) },
				})
				if got := m.Manifest(); fmt.Sprint(got.Actions) != fmt.Sprint(g.actions) {
					t.Errorf("manifest actions %v, want %v", got.Actions, g.actions)
				}
				for _, c := range decideCases {
					d, err := m.Decide(context.Background(), request(c))
					if err != nil {
						t.Fatal(err)
					}
					want := runstate.Decision{Action: g.decide(c), CoalescePending: coalesce}
					if d != want {
						t.Errorf("hint %q content %q: got %+v, want %+v", c.hint, c.content, d, want)
					}
				}
				if len(failures) > 0 {
					t.Errorf("failures: %v", failures)
				}
			})
		}
	}
}

// TestRefineRulesMatchTable checks the native rules, which benchmarks run as
// the guests' native twin, against the fixed table.
func TestRefineRulesMatchTable(t *testing.T) {
	for _, c := range decideCases {
		if got := rules.Refine(c.hint, c.content); got != string(c.refine) {
			t.Errorf("rules.Refine(%q, %q) = %s, want %s", c.hint, c.content, got, c.refine)
		}
	}
}

func TestPolicyConfigErrors(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	for _, path := range []string{goGuest(t, "refine"), cGuest()} {
		for _, cfg := range []string{`{"coalescePending": 1}`, `[]`, `{"other": true}`} {
			_, err := e.LoadFile(context.Background(), path, Options{Config: []byte(cfg)})
			if err == nil || !containsAll(err.Error(), "agenthost_init", "config") {
				t.Errorf("%s with config %s: err = %v, want a config error", path, cfg, err)
			}
		}
	}
}

func stepRequest(n int) step.Request {
	temp := 0.3
	return step.Request{
		Step:     n,
		Messages: []step.Message{{Role: "user", Content: "summarise"}},
		StepSettings: step.Settings{
			System:      "You are helpful.",
			ActiveTools: []string{"search", "read"},
			ToolChoice:  "auto",
			Model:       step.ModelParams{Model: "m", Temperature: &temp, MaxTokens: 100},
		},
	}
}

func TestStepBudget(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	m := load(t, e, goGuest(t, "step-budget"), Options{Config: []byte(`{"maxSteps": 2}`)})
	if !m.HasHook(guestabi.HookPrepareStep) || m.HasHook(guestabi.HookInputPolicy) {
		t.Fatalf("hooks %v", m.GuestManifest().Hooks)
	}
	for n := 1; n <= 4; n++ {
		req := stepRequest(n)
		res, err := m.PrepareStep(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if n <= 2 {
			if fmt.Sprint(res.StepSettings.ActiveTools) != "[search read]" || res.ToolChoice != "auto" || len(res.AppendMessages) != 0 {
				t.Errorf("step %d: changed: %+v", n, res)
			}
		} else {
			if len(res.ActiveTools) != 0 || res.ToolChoice != "none" || len(res.AppendMessages) != 1 ||
				res.AppendMessages[0].Role != "system" || res.AppendMessages[0].Content != rules.DefaultBudgetMessage {
				t.Errorf("step %d: want no tools and a final-answer instruction, got %+v", n, res)
			}
		}
		if res.System != req.System || res.Model.Temperature == nil || *res.Model.Temperature != 0.3 || res.Model.MaxTokens != 100 {
			t.Errorf("step %d: settings not kept: %+v", n, res.StepSettings)
		}
	}
	if _, err := e.LoadFile(context.Background(), goGuest(t, "step-budget"), Options{Config: []byte(`{"maxSteps": 0}`)}); err == nil {
		t.Error("maxSteps 0 loaded")
	}
	if _, err := m.Decide(context.Background(), policy.Request{}); err != ErrNoHook {
		t.Errorf("Decide on a prepareStep guest: %v", err)
	}
}

func TestSystemInstruction(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	m := load(t, e, goGuest(t, "system-instruction"), Options{Config: []byte(`{"instruction": "Answer in French."}`)})
	res, err := m.PrepareStep(context.Background(), stepRequest(1))
	if err != nil {
		t.Fatal(err)
	}
	if res.System != "You are helpful.\n\nAnswer in French." || fmt.Sprint(res.ActiveTools) != "[search read]" {
		t.Errorf("got %+v", res)
	}
	req := stepRequest(2)
	req.System = ""
	res, _ = m.PrepareStep(context.Background(), req)
	if res.System != "Answer in French." {
		t.Errorf("empty system: got %q", res.System)
	}
	_, err = e.LoadFile(context.Background(), goGuest(t, "system-instruction"), Options{})
	if err == nil || !containsAll(err.Error(), "instruction is required") {
		t.Errorf("load without config: %v", err)
	}
}

// refineSpec is the refine policy written plainly from its documentation
// (rules.Refine's comment), independently of the word-at-a-time scan the
// guests are compiled from: generated texts are checked against it.
func refineSpec(hint, content string) runstate.Action {
	switch {
	case strings.EqualFold(hint, "refine") && isASCII(hint):
		return runstate.ActionInject
	case strings.EqualFold(hint, "redirect") && isASCII(hint):
		return runstate.ActionInterrupt
	}
	low := []byte(strings.TrimLeft(content, " \t\r\n"))
	for i, c := range low {
		if 'A' <= c && c <= 'Z' {
			low[i] = c + 'a' - 'A'
		}
	}
	t := string(low)
	letter := func(c byte) bool { return 'a' <= c && c <= 'z' }
	var words []string
	for i := 0; i < len(t); {
		if !letter(t[i]) {
			i++
			continue
		}
		j := i
		for j < len(t) && letter(t[j]) {
			j++
		}
		words = append(words, t[i:j])
		i = j
	}
	if slices.Contains(words, "stop") || slices.Contains(words, "cancel") {
		return runstate.ActionInterrupt
	}
	for _, p := range []string{"bullet point", "shorter", "more concise", "more detail"} {
		if strings.Contains(t, p) {
			return runstate.ActionInject
		}
	}
	if len(words) > 0 && strings.HasPrefix(t, words[0]) && (words[0] == "actually" || words[0] == "also") {
		return runstate.ActionInject
	}
	return runstate.ActionQueue
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// TestRefineSpecMatchesTable keeps the plain reference and the fixed table
// in step, so that both oracles say the same thing.
func TestRefineSpecMatchesTable(t *testing.T) {
	for _, c := range decideCases {
		if got := refineSpec(c.hint, c.content); got != c.refine {
			t.Errorf("refineSpec(%q, %q) = %s, want %s", c.hint, c.content, got, c.refine)
		}
	}
}

// TestRefineGuestsOnGeneratedTexts checks both refine guests, and the
// native rules they share with benchmarks, against the plain reference on
// generated texts.
func TestRefineGuestsOnGeneratedTexts(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	guests := []*Module{load(t, e, cGuest(), Options{}), load(t, e, goGuest(t, "refine"), Options{})}
	frags := []string{"stop", "Stop", "cancel", "actually", "also", "bullet point", "shorter", "more concise",
		"more detail", "x", " ", "ab", "s", "sto", "more", "bullet", ",", "\n", "é", "STOPPED", "m", "unstop",
		"Bullet Point", "MORE DETAIL", "\t", "cancelled", "Also", "ACTUALLY"}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		var b strings.Builder
		for range rng.IntN(8) {
			b.WriteString(frags[rng.IntN(len(frags))])
		}
		hint := []string{"", "refine", "redirect", "other", "REFINE"}[rng.IntN(5)]
		want := refineSpec(hint, b.String())
		if got := runstate.Action(rules.Refine(hint, b.String())); got != want {
			t.Errorf("case %d rules.Refine: hint %q content %q: got %v, want %s", i, hint, b.String(), got, want)
		}
		for _, m := range guests {
			d, err := m.Decide(context.Background(), policy.Request{Input: policy.Input{Content: b.String(), Hint: hint}})
			if err != nil || d.Action != want {
				t.Errorf("case %d %s: hint %q content %q: got %v %v, want %s", i, m.GuestManifest().Name, hint, b.String(), d.Action, err, want)
			}
		}
	}
}

// TestPrepareStepMerge: members a guest leaves out keep their values; a
// failed call leaves the step unchanged and is reported.
func TestPrepareStepMerge(t *testing.T) {
	e := newEngine(t, EngineConfig{})
	m := load(t, e, hostile("partialstep"), Options{})
	req := stepRequest(2)
	res, err := m.PrepareStep(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.ToolChoice != "none" || res.Model.MaxTokens != 5 || res.System != req.System ||
		fmt.Sprint(res.ActiveTools) != "[search read]" || res.Model.Temperature == nil || *res.Model.Temperature != 0.3 ||
		res.Model.Model != "m" || len(res.AppendMessages) != 1 || res.AppendMessages[0].Content != "be brief" {
		t.Errorf("got %+v", res)
	}

	var failures []Failure
	bad := load(t, e, hostile("badstep"), Options{OnFailure: func(f Failure) { failures = append(failures, f) }})
	res, err = bad.PrepareStep(context.Background(), req)
	if err != nil || res.System != req.System || res.ToolChoice != "auto" || fmt.Sprint(res.ActiveTools) != "[search read]" || len(res.AppendMessages) != 0 {
		t.Errorf("failed call: got %+v, %v; want the request's settings", res, err)
	}
	if len(failures) != 1 || failures[0].Hook != guestabi.HookPrepareStep || !strings.Contains(failures[0].Err.Error(), "prepareStep result") {
		t.Errorf("failures %+v", failures)
	}
}

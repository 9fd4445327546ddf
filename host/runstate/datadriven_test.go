package runstate_test

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
)

// world is the test's store: it holds records and applies effects the way a
// driver commits a batch.
type world struct {
	threads map[string]record.Thread
	runs    map[string]record.Run
	msgs    []record.Message
	idem    map[string]record.Idempotency // thread/key
	steps   map[string][]record.Step      // by run
	clock   time.Time
	// stepsKept: the store keeps step records (`store steps=kept`); a file
	// starts as over a store without them.
	stepsKept bool
}

func newWorld() *world {
	return &world{
		threads: map[string]record.Thread{},
		runs:    map[string]record.Run{},
		idem:    map[string]record.Idempotency{},
		steps:   map[string][]record.Step{},
		clock:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	}
}

func (w *world) now() time.Time {
	w.clock = w.clock.Add(time.Second)
	return w.clock
}

func (w *world) snapshot(thread, key string) runstate.Snapshot {
	t, ok := w.threads[thread]
	if !ok {
		t = record.Thread{ID: thread}
	}
	s := runstate.Snapshot{Thread: t, StepsKept: w.stepsKept}
	for _, id := range t.OpenRunIDs {
		s.Open = append(s.Open, w.runs[id])
	}
	if k, ok := w.idem[thread+"/"+key]; ok && key != "" {
		s.Idempotency = &k
	}
	return s
}

func (w *world) apply(e runstate.Effects) {
	if e.Empty() {
		return
	}
	w.threads[e.Thread.ID] = *e.Thread
	for _, r := range e.RunRecords {
		w.runs[r.ID] = r
	}
	for _, h := range e.HistoryMutations {
		w.msgs = append(w.msgs, h.Message)
	}
	for _, k := range e.Idempotency {
		w.idem[k.ThreadID+"/"+k.Key] = k
	}
	for _, st := range e.Steps {
		w.steps[st.RunID] = append(w.steps[st.RunID], st)
	}
}

// nextSeq is the next Seq of run's step log.
func (w *world) nextSeq(run string) int64 { return int64(len(w.steps[run])) + 1 }

func (w *world) threadRuns(thread string) []record.Run {
	var out []record.Run
	for _, r := range w.runs {
		if r.ThreadID == thread {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b record.Run) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

func (w *world) threadMsgs(thread string) []record.Message {
	var out []record.Message
	for _, m := range w.msgs {
		if m.ThreadID == thread {
			out = append(out, m)
		}
	}
	return out
}

func (w *world) msg(id string) record.Message {
	for _, m := range w.msgs {
		if m.ID == id {
			return m
		}
	}
	return record.Message{ID: id}
}

// TestRules runs the data-driven rule files in testdata/. Each file is a
// sequence of mutations on a fresh world; each command prints the effects it
// committed (or the error), and `state`, `history` and `prompt` print
// projections. Run with -rewrite to regenerate expectations after an
// intended change, and review the diff.
func TestRules(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		w := newWorld()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return w.run(t, d)
		})
	})
}

func arg(d *datadriven.TestData, key, def string) string {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return strings.Join(a.Vals, ",")
		}
	}
	return def
}

func (w *world) run(t *testing.T, d *datadriven.TestData) string {
	var m runstate.Mutation
	thread := arg(d, "thread", "T")
	key := ""
	switch d.Cmd {
	case "store":
		switch v := arg(d, "steps", ""); v {
		case "kept", "none":
			w.stepsKept = v == "kept"
			return "steps " + v
		default:
			t.Fatalf("store steps=%q: want kept or none", v)
		}
	case "admit":
		key = arg(d, "key", "")
		// Ids follow the content: input a of thread T is message a of run A,
		// whose answer is ans-A; on other threads they carry the thread's name.
		content := arg(d, "content", "")
		msgID := content
		if thread != "T" {
			msgID = strings.ToLower(thread) + "." + content
		}
		runID := strings.ToUpper(msgID)
		a := runstate.Admit{
			ThreadID: thread, Key: key, Content: content, Hint: arg(d, "hint", ""),
			RunID: runID, InputMessageID: msgID, AssistantMessageID: "ans-" + runID,
			StartAs: arg(d, "start-as", ""), Now: w.now(),
		}
		if dec := arg(d, "decide", ""); dec != "" {
			parts := strings.Split(dec, "+")
			a.Decision = &runstate.Decision{Action: runstate.Action(parts[0]), CoalescePending: len(parts) > 1 && parts[1] == "coalesce"}
		}
		m = a
	case "start":
		m = runstate.Start{ThreadID: thread, Owner: arg(d, "owner", "h1"), Now: w.now()}
	case "take":
		// take run=A entries=B:b+c,C:d seq=3 model=1
		tk := runstate.Take{ThreadID: thread, RunID: arg(d, "run", ""), Owner: arg(d, "owner", "h1"), Now: w.now()}
		fmt.Sscan(arg(d, "seq", "1"), &tk.Seq)
		fmt.Sscan(arg(d, "model", "0"), &tk.Model)
		tk.StepID = fmt.Sprintf("%s-s%d", tk.RunID, tk.Seq)
		for _, a := range d.CmdArgs {
			if a.Key != "entries" {
				continue
			}
			for _, v := range strings.Split(strings.Join(a.Vals, ","), ",") {
				run, ins, _ := strings.Cut(v, ":")
				e := record.Take{RunID: run}
				if ins != "" {
					e.InputMessageIDs = strings.Split(ins, "+")
				}
				tk.Entries = append(tk.Entries, e)
			}
		}
		m = tk
	case "wait":
		// wait run=A calls=c1,c2 approvals=1 attempt=1 model=0
		run := arg(d, "run", "")
		wt := runstate.Wait{ThreadID: thread, RunID: run, Owner: arg(d, "owner", "h1"), Now: w.now()}
		fmt.Sscan(arg(d, "attempt", "1"), &wt.Attempt)
		approvals, model := 1, 0
		fmt.Sscan(arg(d, "approvals", "1"), &approvals)
		fmt.Sscan(arg(d, "model", "0"), &model)
		seq := w.nextSeq(run)
		for k, c := range strings.Split(arg(d, "calls", ""), ",") {
			wt.Asks = append(wt.Asks, record.Step{ID: fmt.Sprintf("%s-s%d", run, seq+int64(k)), RunID: run, ThreadID: thread, Seq: seq + int64(k),
				Attempt: wt.Attempt, Model: model, Kind: record.StepAsk, Ask: record.Ask{CallID: c, Tool: "tool-" + c, Approvals: approvals}})
		}
		m = wt
	case "answer":
		// answer run=A call=c1 action=approve key=k text=... args=...
		run, call := arg(d, "run", ""), arg(d, "call", "")
		an := runstate.Answer{ThreadID: thread, RunID: run, Seq: w.nextSeq(run), Now: w.now(),
			Answer: record.Answer{CallID: call, Action: record.AnswerAction(arg(d, "action", "approve")), Key: arg(d, "key", ""),
				Text: arg(d, "text", ""), Arguments: arg(d, "args", "")}}
		an.StepID = fmt.Sprintf("%s-s%d", run, an.Seq)
		for _, st := range w.steps[run] {
			switch {
			case st.Kind == record.StepAsk && st.Ask.CallID == call:
				st := st
				an.Ask = &st
			case st.Kind == record.StepAnswer && st.Answer.CallID == call:
				an.Prior = append(an.Prior, st)
			}
		}
		m = an
	case "commit":
		c := runstate.CommitTerminal{
			ThreadID: thread, RunID: arg(d, "run", ""), Owner: arg(d, "owner", "h1"),
			Reason: record.TerminalReason(arg(d, "reason", "completed")), Answer: arg(d, "answer", ""),
			Error: arg(d, "error", ""), Now: w.now(),
		}
		// absorb=R2:m2+m3,R3:m4
		for _, a := range d.CmdArgs {
			if a.Key != "absorb" {
				continue
			}
			for _, v := range strings.Split(strings.Join(a.Vals, ","), ",") {
				run, ins, _ := strings.Cut(v, ":")
				ins, at, _ := strings.Cut(ins, "@") // absorb=B:b@2: seen before step 2
				e := runstate.AbsorbEntry{RunID: run}
				if ins != "" {
					e.InputMessageIDs = strings.Split(ins, "+")
				}
				if at != "" {
					fmt.Sscan(at, &e.At)
				}
				c.Absorb = append(c.Absorb, e)
			}
		}
		// steps=call:c1:search,result:c1
		for _, a := range d.CmdArgs {
			if a.Key != "steps" {
				continue
			}
			for i, v := range a.Vals {
				f := strings.Split(v, ":")
				id := fmt.Sprintf("%s-step%d", c.RunID, i+1)
				switch f[0] {
				case "call": // call:c1+c2:search asks for two calls in one message
					var calls []record.ToolCall
					for _, cid := range strings.Split(f[1], "+") {
						calls = append(calls, record.ToolCall{ID: cid, Name: f[2]})
					}
					c.Steps = append(c.Steps, record.Message{ID: id, Role: record.RoleAssistant, ToolCalls: calls})
				case "result":
					c.Steps = append(c.Steps, record.Message{ID: id, Role: record.RoleTool, ToolCallID: f[1], Content: "ok"})
				default:
					t.Fatalf("unknown step %q", v)
				}
			}
		}
		m = c
	case "recover":
		max := 3
		fmt.Sscan(arg(d, "max", "3"), &max)
		m = runstate.Recover{ThreadID: thread, RunID: arg(d, "run", ""), DeadOwner: arg(d, "dead", "h1"), MaxAttempts: max, NewOwner: arg(d, "by", ""), Now: w.now()}
	case "cancel":
		m = runstate.Cancel{ThreadID: thread, RunID: arg(d, "run", ""), Active: d.HasArg("active"), Now: w.now()}
	case "state":
		var b strings.Builder
		for _, r := range w.threadRuns(thread) {
			fmt.Fprintln(&b, fmtRun(r))
		}
		return b.String()
	case "history", "prompt":
		var out []record.Message
		var err error
		if d.Cmd == "history" {
			out, err = runstate.History(w.threadRuns(thread), w.threadMsgs(thread))
		} else {
			var taken []record.Message
			for _, a := range d.CmdArgs {
				if a.Key == "taken" {
					for _, id := range a.Vals {
						taken = append(taken, w.msg(id))
					}
				}
			}
			if d.HasArg("from") {
				var from int64
				fmt.Sscan(arg(d, "from", "1"), &from)
				out, err = runstate.PromptWindow(w.threadRuns(thread), w.threadMsgs(thread), from, arg(d, "run", ""), taken)
			} else {
				out, err = runstate.Prompt(w.threadRuns(thread), w.threadMsgs(thread), arg(d, "run", ""), taken)
			}
		}
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		var b strings.Builder
		for _, m := range out {
			fmt.Fprintln(&b, fmtMsg(m))
		}
		return b.String()
	default:
		t.Fatalf("unknown command %q", d.Cmd)
	}
	before := w.snapshot(thread, key)
	eff, err := runstate.Reduce(before, m)
	if err != nil {
		if !eff.Empty() || len(eff.RunRecords) > 0 || len(eff.HistoryMutations) > 0 || len(eff.Idempotency) > 0 || len(eff.Steps) > 0 {
			t.Fatalf("error %v came with effects %+v", err, eff)
		}
		return "error: " + err.Error() + "\n"
	}
	w.apply(eff)
	return fmtEffects(eff)
}

func fmtEffects(e runstate.Effects) string {
	var b strings.Builder
	if a := e.Admission; a != nil {
		fmt.Fprintf(&b, "admission: run=%s input=%s", a.RunID, a.InputMessageID)
		if a.Duplicate {
			b.WriteString(" duplicate")
		}
		if a.Decision != nil {
			fmt.Fprintf(&b, " decision=%s", a.Decision.Action)
			if a.Decision.CoalescePending {
				b.WriteString("+coalesce")
			}
		}
		if a.Coalesced {
			b.WriteString(" coalesced")
		}
		if a.ActiveRunID != "" {
			fmt.Fprintf(&b, " active=%s", a.ActiveRunID)
		}
		if a.Offer {
			b.WriteString(" offer")
		}
		if a.InterruptRunID != "" {
			fmt.Fprintf(&b, " interrupt=%s", a.InterruptRunID)
		}
		b.WriteString("\n")
	}
	for _, d := range e.Dropped {
		fmt.Fprintf(&b, "dropped: %s (%s)\n", d.RunID, d.Reason)
	}
	if a := e.Answered; a != nil {
		fmt.Fprintf(&b, "answered: %s %s step=%s", a.Step.Answer.CallID, a.Step.Answer.Action, a.Step.ID)
		if a.Duplicate {
			b.WriteString(" duplicate")
		}
		if a.Decided {
			b.WriteString(" decided")
		}
		if a.Resume {
			b.WriteString(" resume")
		}
		b.WriteString("\n")
	}
	if len(e.Released) > 0 {
		fmt.Fprintf(&b, "released: %s\n", strings.Join(e.Released, " "))
	}
	if e.Empty() {
		b.WriteString("writes nothing\n")
		return b.String()
	}
	t := e.Thread
	fmt.Fprintf(&b, "thread %s v%d next-run=%d next-msg=%d open=[%s]\n", t.ID, t.Version, t.NextRunSeq, t.NextMessageSeq, strings.Join(t.OpenRunIDs, " "))
	for _, r := range e.RunRecords {
		fmt.Fprintln(&b, fmtRun(r))
	}
	for _, h := range e.HistoryMutations {
		fmt.Fprintf(&b, "%s %s\n", h.Op, fmtMsg(h.Message))
	}
	for _, k := range e.Idempotency {
		fmt.Fprintf(&b, "idempotency %s/%s -> %s %s\n", k.ThreadID, k.Key, k.RunID, k.InputMessageID)
	}
	for _, st := range e.Steps {
		fmt.Fprintf(&b, "step %s run=%s seq=%d model=%d attempt=%d %s", st.ID, st.RunID, st.Seq, st.Model, st.Attempt, st.Kind)
		for _, tk := range st.Taken {
			fmt.Fprintf(&b, " %s:[%s]", tk.RunID, strings.Join(tk.InputMessageIDs, " "))
		}
		if st.Kind == record.StepAsk {
			fmt.Fprintf(&b, " call=%s approvals=%d", st.Ask.CallID, st.Ask.Approvals)
		}
		if a := st.Answer; st.Kind == record.StepAnswer {
			fmt.Fprintf(&b, " call=%s %s", a.CallID, a.Action)
			if a.Key != "" {
				fmt.Fprintf(&b, " key=%s", a.Key)
			}
			if a.Text != "" {
				fmt.Fprintf(&b, " %q", a.Text)
			}
			if a.Arguments != "" {
				fmt.Fprintf(&b, " args=%s", a.Arguments)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func fmtRun(r record.Run) string {
	s := fmt.Sprintf("run %s seq=%d %s", r.ID, r.Seq, r.State)
	if r.TerminalReason != "" {
		s += "/" + string(r.TerminalReason)
	}
	s += fmt.Sprintf(" inputs=[%s] attempt=%d", strings.Join(r.InputMessageIDs, " "), r.Attempt)
	if r.WaitTakeovers != 0 {
		s += fmt.Sprintf(" takeovers=%d", r.WaitTakeovers)
	}
	if r.Owner != "" {
		s += " owner=" + r.Owner
	}
	if r.AbsorbedIntoRunID != "" {
		s += " absorbed-into=" + r.AbsorbedIntoRunID
	}
	if r.TakenBy != "" {
		s += " taken-by=" + r.TakenBy
	}
	if len(r.Pending) > 0 {
		s += " pending=[" + strings.Join(r.Pending, " ") + "]"
	}
	if len(r.TranscriptIDs) > 0 {
		s += " transcript=[" + strings.Join(r.TranscriptIDs, " ") + "]"
	}
	if r.AnswerSeq != 0 {
		s += fmt.Sprintf(" answer=%s@%d", r.AssistantMessageID, r.AnswerSeq)
	}
	if r.EndSeq != 0 {
		s += fmt.Sprintf(" end=%d", r.EndSeq)
	}
	if r.Error != "" {
		s += fmt.Sprintf(" error=%q", r.Error)
	}
	return s
}

func fmtMsg(m record.Message) string {
	s := fmt.Sprintf("#%d %s %s run=%s", m.Seq, m.ID, m.Role, m.RunID)
	for _, c := range m.ToolCalls {
		s += fmt.Sprintf(" call=%s:%s", c.ID, c.Name)
	}
	if m.ToolCallID != "" {
		s += " result-of=" + m.ToolCallID
	}
	if m.Content != "" {
		s += fmt.Sprintf(" %q", m.Content)
	}
	return s
}

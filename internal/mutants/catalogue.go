package main

const (
	reduce   = "host/runstate/reduce.go"
	executor = "host/executor.go"
)

// catalogue is the planted bugs, each breaking one rule of the reducer or of
// the executor's absorption path. Fragments are exact text of the files
// named; when the code moves, the tool says which fragment it no longer
// finds. Every bug here must be one a run of the system can show: a reducer
// rule the executor never exercises (an entry kept after an earlier one was
// dropped for changed inputs) is left to the property test, which sends
// such entries itself (docs/simulation.md).
var catalogue = []Mutant{
	{
		ID:   "absorb-skips-queued-run",
		Rule: "next in line: absorption takes the runs next in line only; the executor takes a contiguous prefix and the reducer keeps one",
		Edits: []Edit{
			{reduce, "\t\tcase e.at != pos:\n\t\t\twhy = \"run is not next in the queue\"\n", ""},
			{executor, "\t\tif !ok {\n\t\t\tbreak\n\t\t}\n", "\t\tif !ok {\n\t\t\tcontinue\n\t\t}\n"},
		},
	},
	{
		ID:   "absorb-changed-inputs",
		Rule: "I2: a run is absorbed only with exactly the inputs the absorber took",
		Edits: []Edit{
			{reduce, "\t\tcase !sameSet(e.entry.InputMessageIDs, queue[e.at].InputMessageIDs):\n\t\t\twhy = \"run's inputs changed since they were taken\"\n", ""},
		},
	},
	{
		ID:   "absorb-without-prompt",
		Rule: "I2: an absorbed input reached the absorber's prompt",
		Edits: []Edit{
			{executor, "\t\t\te.convo = append(e.convo, m)\n\t\t\ts.Messages = append(s.Messages, m)\n", ""},
		},
	},
	{
		ID:   "absorb-by-failed-run",
		Rule: "I3: only a completing run absorbs",
		Edits: []Edit{
			{reduce, "\tif len(m.Absorb) > 0 && m.Reason != record.ReasonCompleted {", "\tif len(m.Absorb) > 0 && m.Reason == \"\" {"},
			{executor, "\te.commit(runstate.CommitTerminal{Reason: record.ReasonFailed, Error: err.Error()})", "\te.commit(runstate.CommitTerminal{Reason: record.ReasonFailed, Error: err.Error(), Absorb: e.absorb()})"},
		},
	},
	{
		ID:   "absorbed-inputs-unrecorded",
		Rule: "I2: the absorber holds the absorbed inputs among its own",
		Edits: []Edit{
			{reduce, "\t\trun.InputMessageIDs = append(run.InputMessageIDs, a.InputMessageIDs...)\n", ""},
		},
	},
	{
		ID:   "absorbed-run-left-open",
		Rule: "I1: an absorbed run leaves its thread's queue in the absorbing commit",
		Edits: []Edit{
			{reduce, "\t\tclosed[a.ID] = true\n", ""},
		},
	},
	{
		ID:   "start-not-head",
		Rule: "I6: the head of the queue starts first",
		Edits: []Edit{
			{reduce, "\trun := cloneRun(s.Open[0]) // with no active run", "\trun := cloneRun(s.Open[len(s.Open)-1]) // with no active run"},
		},
	},
	{
		ID:   "start-while-active",
		Rule: "I6: at most one active run per thread",
		Edits: []Edit{
			{reduce, "\tif i := activeRun(s); i >= 0 {\n\t\treturn Effects{}, fmt.Errorf(\"%w: run %s is active on thread %s\", ErrThreadActive", "\tif i := activeRun(s); i >= 0 && false {\n\t\treturn Effects{}, fmt.Errorf(\"%w: run %s is active on thread %s\", ErrThreadActive"},
		},
	},
	{
		ID:   "admit-starts-on-busy-thread",
		Rule: "admit-and-start: an admission starts its run only on an idle thread",
		Edits: []Edit{
			{reduce, "\t\tif !busy && m.StartAs != \"\" {\n\t\t\tstartAdmitted(&run, m.StartAs, m.Now)", "\t\tif m.StartAs != \"\" {\n\t\t\tstartAdmitted(&run, m.StartAs, m.Now)"},
		},
	},
	{
		ID:   "cancel-leaves-open",
		Rule: "a canceled run leaves its thread's open runs",
		Edits: []Edit{
			{reduce, "\tt.OpenRunIDs = slices.DeleteFunc(t.OpenRunIDs, func(id string) bool { return id == run.ID })\n\tt.UpdatedAt = m.Now\n\treleased, ids := release(s, run.ID, nil)\n", "\tt.UpdatedAt = m.Now\n\treleased, ids := release(s, run.ID, nil)\n"},
		},
	},
	{
		ID:   "recover-no-attempt-count",
		Rule: "recovery: a run is executed at most MaxAttempts times",
		Edits: []Edit{
			{reduce, "\t\trun.State = record.StateQueued\n\t\trun.Attempt++\n", "\t\trun.State = record.StateQueued\n"},
		},
	},
	{
		ID:   "recover-one-attempt-too-many",
		Rule: "recovery: a run is executed at most MaxAttempts times",
		Edits: []Edit{
			{reduce, "\tif run.Attempt >= m.MaxAttempts {", "\tif run.Attempt > m.MaxAttempts {"},
		},
	},
	{
		ID:   "recover-abandons-early",
		Rule: "recovery: a run is abandoned only after MaxAttempts executions",
		Edits: []Edit{
			{reduce, "\tif run.Attempt >= m.MaxAttempts {", "\tif run.Attempt >= m.MaxAttempts-1 {"},
		},
	},
	{
		ID:   "recover-leaves-active",
		Rule: "recovery: a run whose owner is gone goes back to the queue",
		Edits: []Edit{
			{reduce, "\t\trun.State = record.StateQueued\n\t\trun.Attempt++\n", "\t\trun.Attempt++\n"},
		},
	},
	{
		ID:   "key-reused-accepted",
		Rule: "I4: a key used for other content is refused",
		Edits: []Edit{
			{reduce, "\t\tif k.ContentHash != hash {", "\t\tif false {"},
		},
	},
	{
		ID:   "key-ignored",
		Rule: "I4: a retry with the same key returns the first admission",
		Edits: []Edit{
			{reduce, "\tif k := s.Idempotency; k != nil && m.Key != \"\" {", "\tif k := s.Idempotency; k != nil && m.Key == \"-\" {"},
		},
	},
	{
		ID:   "commit-by-non-owner",
		Rule: "owner: only the run's owner commits its end (a paused host's late commit is refused)",
		Edits: []Edit{
			{reduce, "\tif s.Open[i].Owner != m.Owner {", "\tif false {"},
		},
	},
	{
		// Recovery clears a requeued run's owner, so the owner check alone
		// refuses a late commit for it; the state check is what stands when
		// the owner is kept.
		ID:   "commit-not-active",
		Rule: "owner: only an active run commits its end (a run requeued by recovery does not, even under its old owner)",
		Edits: []Edit{
			{reduce, "\t\trun.Owner = \"\"\n\t\trun.StartedAt = time.Time{}\n", "\t\trun.StartedAt = time.Time{}\n"},
			{reduce, "\tif s.Open[i].State != record.StateActive {\n\t\treturn Effects{}, fmt.Errorf(\"%w: run %s is %s\", ErrNotActive", "\tif false {\n\t\treturn Effects{}, fmt.Errorf(\"%w: run %s is %s\", ErrNotActive"},
		},
	},
	{
		ID:   "resume-ignores-tool-results",
		Rule: "I9: a resumed run does not make again a tool call whose result its earlier attempt committed",
		Edits: []Edit{
			{executor, "\t\t\te.resume.answered[st.Message.ToolCallID] = true\n", ""},
		},
	},
}

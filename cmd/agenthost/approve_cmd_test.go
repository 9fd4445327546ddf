package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/toolpolicy"
	"github.com/agenthost/agenthost/internal/apitest"
)

// TestApproveRejectRespond: runs show lists a waiting run's calls, and the
// three commands answer them.
func TestApproveRejectRespond(t *testing.T) {
	api := apitest.New(t, apitest.Config{
		Script: model.Script{Steps: []model.ScriptStep{
			{Tool: &model.ScriptTool{Name: "read_thread", Arguments: `{"n":1}`}},
			{Answer: "done"},
		}},
		Host: host.Config{
			Tools:      []model.Tool{readThreadTool{}},
			ToolPolicy: toolpolicy.Static{Verdict: toolpolicy.Ask, Prompt: "read the thread?", Approvals: 1},
		},
	})
	rt, url := api.Runtime, api.URL
	waitingRun := func(thread string) (string, string) {
		t.Helper()
		tk, err := rt.Submit(context.Background(), thread, "hello", host.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if r, _ := rt.Run(context.Background(), tk.RunID); len(r.Pending) == 1 {
				return tk.RunID, r.Pending[0]
			}
		}
		t.Fatal("the run never waited")
		return "", ""
	}
	run, call := waitingRun("A")
	code, out, errs := runCmd(runRunsShow, "--server", url, run)
	if code != exitOK || !strings.Contains(out, "state     waiting") || !strings.Contains(out, "waiting   call "+call+": read_thread") || !strings.Contains(out, "read the thread?") {
		t.Fatalf("runs show: %d %s %s", code, out, errs)
	}
	if code, _, _ = runCmd(runApprove, "--server", url, run, call, "--edit", "[1]"); code != exitUsage {
		t.Fatalf("approve --edit with an array: %d", code)
	}
	if code, _, errs = runCmd(runApprove, "--server", url, run, call, "--edit", ""); code != exitUsage || !strings.Contains(errs, "--edit is empty") {
		t.Fatalf("approve with an empty --edit: %d %s", code, errs)
	}
	if r, _ := rt.Run(context.Background(), run); len(r.Pending) != 1 {
		t.Fatalf("an empty --edit answered the call: %+v", r)
	}
	code, out, errs = runCmd(runApprove, "--server", url, run, call, "--edit", `{"n":2}`, "--key", "k1")
	if code != exitOK || !strings.Contains(out, "recorded: edit of call "+call) {
		t.Fatalf("approve --edit: %d %s %s", code, out, errs)
	}
	code, out, _ = runCmd(runApprove, "--server", url, run, call, "--edit", `{"n":2}`, "--key", "k1")
	if code != exitOK || !strings.Contains(out, "already recorded") {
		t.Fatalf("approve again: %d %s", code, out)
	}
	code, _, errs = runCmd(runReject, "--server", url, run, call)
	if code == exitOK || !strings.Contains(errs, "answered") {
		t.Fatalf("reject after edit: %d %s", code, errs)
	}
	run, call = waitingRun("B")
	if code, out, errs = runCmd(runReject, "--server", url, run, call, "--message", "no"); code != exitOK || !strings.Contains(out, "recorded: reject") {
		t.Fatalf("reject: %d %s %s", code, out, errs)
	}
	// Without --key the command made one up and printed it: a retry with
	// it is the same answer, recorded once.
	_, key, found := strings.Cut(errs, "--key ")
	key = strings.TrimSuffix(strings.TrimSpace(key), ")")
	if !found || !strings.HasPrefix(key, "cli-") {
		t.Fatalf("reject printed no idempotency key: %q", errs)
	}
	if code, out, errs = runCmd(runReject, "--server", url, run, call, "--message", "no", "--key", key); code != exitOK || !strings.Contains(out, "already recorded") {
		t.Fatalf("reject retried with the printed key: %d %s %s", code, out, errs)
	}
	run, call = waitingRun("C")
	if code, _, _ = runCmd(runRespond, "--server", url, run, call); code != exitUsage {
		t.Fatalf("respond without a message: %d", code)
	}
	if code, out, errs = runCmd(runRespond, "--server", url, run, call, "--message", "42"); code != exitOK || !strings.Contains(out, "recorded: respond") {
		t.Fatalf("respond: %d %s %s", code, out, errs)
	}
}

package host_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/model"
)

// childHostEnv makes the test binary a host process (childHost) over the
// badgerstore directory it names.
const childHostEnv = "AGENTHOST_TEST_CHILD_HOST"

// childHost plays the start of S1 over badgerstore, prints the ids once run
// A has taken input b, and waits to be killed.
func childHost(dir string) int {
	ctx := context.Background()
	lc, err := driverhostBuiltin(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	d, err := launch(ctx, lc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	m, _ := model.NewScripted(model.Script{Steps: []model.ScriptStep{
		{Tool: &model.ScriptTool{Name: "lookup"}},
		{Delay: model.Duration(time.Hour)}, // A is killed in its last step
	}})
	// A's tool call returns only once b is admitted and offered, so the
	// boundary where A takes b cannot pass before b exists.
	bOffered := make(chan struct{})
	rt, err := host.New(ctx, host.Config{Driver: d, Policy: hintPolicy{}, Model: m, Tools: []model.Tool{gatedTool{open: bOffered}}, Logger: quietLog})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tA, err := rt.Submit(ctx, "T", "summarise this thread", host.SubmitOptions{IdempotencyKey: "ka"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := waitFor(rt, tA.RunID, host.EventStepStarted); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tB, err := rt.Submit(ctx, "T", "actually, in bullet points", host.SubmitOptions{IdempotencyKey: "kb", Hint: "inject"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	close(bOffered)
	if !rt.Stats().DurableSteps {
		fmt.Println("no-steps")
		select {}
	}
	if err := waitFor(rt, tA.RunID, host.EventInputTaken); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%s %s\n", tA.RunID, tB.RunID)
	select {}
}

// gatedTool is the lookup tool, answering only once open is closed.
type gatedTool struct{ open <-chan struct{} }

func (gatedTool) Spec() model.ToolSpec { return lookupTool{}.Spec() }
func (g gatedTool) Call(ctx context.Context, _ string) (string, error) {
	select {
	case <-g.open:
		return "found", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func waitFor(rt *host.Runtime, runID string, typ host.EventType) error {
	deadline := time.After(30 * time.Second)
	var seq int64
	for {
		evs, more := rt.Events(runID, seq)
		for _, e := range evs {
			seq = e.Seq
			if e.Type == typ {
				return nil
			}
		}
		select {
		case <-more:
		case <-deadline:
			return fmt.Errorf("no %s event for %s", typ, runID)
		}
	}
}

// TestS3HostKilledBetweenTakeAndAnswer: as S2, but the host process is
// killed with SIGKILL after A took b and before A answers.
func TestS3HostKilledBetweenTakeAndAnswer(t *testing.T) {
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childHostEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the child host did not get to the point of the kill: %v", err)
	}
	ids := strings.Fields(line)
	if len(ids) == 1 && ids[0] == "no-steps" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Skip("badgerstore keeps no step records: injection takes nothing over it")
	}
	if len(ids) != 2 {
		t.Fatalf("child printed %q", line)
	}
	runA, runB := ids[0], ids[1]
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	// A new host on the same data. Its driver can open the directory once
	// the dead host's driver has gone (it dies with its parent).
	var h *harness
	deadline := time.Now().Add(30 * time.Second)
	for {
		lc, err := driverhostBuiltin(dir)
		if err != nil {
			t.Fatal(err)
		}
		dd, err := launch(context.Background(), lc)
		if err == nil {
			t.Cleanup(func() { dd.Close(context.Background()) }) // after the runtime's cleanup
			// Before anything runs: no absorption was committed.
			runs, err := dd.GetRuns(context.Background(), []string{runA, runB})
			if err != nil {
				t.Fatal(err)
			}
			if runs[0].State != record.StateActive || len(runs[0].InputMessageIDs) != 1 || runs[1].State != record.StateQueued || runs[1].TakenBy != runA {
				t.Fatalf("after the kill: A %+v, B %+v", runs[0], runs[1])
			}
			h = newHarness(t, dd, hintPolicy{}, twoSteps)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relaunching badgerstore on the dead host's data: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A resumes from its committed steps with the input it took durably:
	// only its last model step is left, and it absorbs B.
	h.release()
	rA, rB := h.wait(runA), h.wait(runB)
	want := "summarise this thread | actually, in bullet points"
	if answer(rA) != want || rA.AnsweredByRunID != runA {
		t.Fatalf("A: %+v", rA)
	}
	if rB.AnsweredByRunID != runA {
		t.Fatalf("B: %+v", rB)
	}
	retry := h.submit("T", "actually, in bullet points", "kb", "")
	if r := h.wait(retry.RunID); !retry.Duplicate || answer(r) != want {
		t.Fatalf("retry of b's key: %+v %+v", retry, r)
	}
}

package host_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/guests/policy/standard"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/wasm"
)

// wasmPolicy loads a policy guest through the real wazero host.
func wasmPolicy(t *testing.T, module []byte) policy.Policy {
	t.Helper()
	ctx := context.Background()
	eng, err := wasm.NewEngine(ctx, wasm.EngineConfig{CacheDir: filepath.Join(os.TempDir(), "agenthost-host-test-wasm-cache")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(context.Background()) })
	m, err := eng.Load(ctx, module, wasm.Options{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var (
	guestOnce  sync.Once
	guestDir   string
	guestErr   error
	guestNames = []string{"queue", "reject"}
)

// goGuest builds a standard Go guest (GOOS=wasip1) once per test binary.
func goGuest(t *testing.T, name string) []byte {
	t.Helper()
	guestOnce.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			guestErr = err
			return
		}
		if guestDir, guestErr = os.MkdirTemp("", "agenthost-guests-"); guestErr != nil {
			return
		}
		for _, g := range guestNames {
			cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-o", filepath.Join(guestDir, g+".wasm"), "github.com/agenthost/agenthost/guests/policy/"+g)
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				guestErr = errors.New(err.Error() + ": " + string(out))
				return
			}
		}
	})
	if guestErr != nil {
		if os.Getenv("AGENTHOST_REQUIRE_ALL") != "1" && errors.Is(guestErr, exec.ErrNotFound) {
			t.Skipf("no go command to build the %s guest: %v", name, guestErr)
		}
		t.Fatalf("building the %s guest: %v", name, guestErr)
	}
	b, err := os.ReadFile(filepath.Join(guestDir, name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The scenarios whose policy decides, with the policy loaded from a wasm
// guest: the refine guest (C) reads the text, the Go guests queue and reject.
func TestWasmPolicyScenarios(t *testing.T) {
	t.Run("S1 refine injects a refinement", func(t *testing.T) {
		h := newHarness(t, launchBuiltin(t, "memstore", nil), wasmPolicy(t, standard.RefineC), twoSteps)
		h.needSteps()
		tA := h.submit("T", "summarise this thread", "", "")
		h.waitEvent(tA.RunID, host.EventStepStarted, "step", "0")
		tB := h.submit("T", "actually, in bullet points", "", "")
		h.release()
		h.waitEvent(tA.RunID, host.EventInputTaken, "input_message_id", tB.InputMessageID)
		h.release()
		if r := h.wait(tB.RunID); r.AnsweredByRunID != tA.RunID || answer(r) != "summarise this thread | actually, in bullet points" {
			t.Fatalf("B: %+v", r)
		}
		if b := h.run(tB.RunID); b.TerminalReason != record.ReasonAbsorbed {
			t.Fatalf("B: %+v", b)
		}
	})
	t.Run("S4 a queued question is not skipped", func(t *testing.T) {
		h := newHarness(t, launchBuiltin(t, "memstore", nil), wasmPolicy(t, standard.RefineC), twoSteps)
		tA := h.submit("T", "summarise this thread", "", "")
		h.waitEvent(tA.RunID, host.EventStepStarted, "step", "0")
		tB := h.submit("T", "what is the weather tomorrow", "", "")
		tC := h.submit("T", "actually, shorter", "", "")
		h.releaseN(6)
		for tk, want := range map[*host.Ticket]string{tA: "summarise this thread", tB: "what is the weather tomorrow", tC: "actually, shorter"} {
			if r := h.wait(tk.RunID); r.AnsweredByRunID != tk.RunID || answer(r) != want {
				t.Fatalf("%s: %+v, want %q", tk.RunID, r, want)
			}
		}
	})
	t.Run("S8 a redirect interrupts", func(t *testing.T) {
		h := newHarness(t, launchBuiltin(t, "memstore", nil), wasmPolicy(t, standard.RefineC), twoSteps)
		tA := h.submit("T", "write a poem", "", "")
		h.waitEvent(tA.RunID, host.EventStepStarted, "step", "0")
		tB := h.submit("T", "stop, write a story instead", "", "")
		if r := h.wait(tA.RunID); r.State != record.StateInterrupted {
			t.Fatalf("A: %+v", r)
		}
		h.releaseN(2)
		if r := h.wait(tB.RunID); !strings.Contains(answer(r), "story") {
			t.Fatalf("B: %+v", r)
		}
	})
	t.Run("S9 reject", func(t *testing.T) {
		h := newHarness(t, launchBuiltin(t, "memstore", nil), wasmPolicy(t, goGuest(t, "reject")), twoSteps)
		tA := h.submit("T", "a", "", "")
		h.waitEvent(tA.RunID, host.EventStepStarted, "step", "0")
		if _, err := h.rt.Submit(context.Background(), "T", "b", host.SubmitOptions{IdempotencyKey: "kb"}); !errors.Is(err, runstate.ErrBusy) {
			t.Fatalf("reject: %v", err)
		}
		h.releaseN(2)
		h.wait(tA.RunID)
		tB := h.submit("T", "b", "kb", "")
		h.releaseN(2)
		if r := h.wait(tB.RunID); answer(r) != "b" {
			t.Fatalf("B: %+v", r)
		}
	})
	t.Run("S11 a guest that cannot inject gets no hook", func(t *testing.T) {
		pol := wasmPolicy(t, goGuest(t, "queue"))
		if pol.Manifest().CanReturn(runstate.ActionInject) {
			t.Fatal("the queue guest declares inject")
		}
		h := newHarness(t, launchBuiltin(t, "memstore", nil), pol, twoSteps)
		tA := h.submit("T", "a", "", "")
		h.waitEvent(tA.RunID, host.EventStepStarted, "step", "0")
		tB := h.submit("T", "actually, b", "", "")
		h.releaseN(4)
		h.wait(tA.RunID)
		h.wait(tB.RunID)
		if n := h.rt.Stats().InjectBoundaries; n != 0 {
			t.Fatalf("%d boundaries did injection work", n)
		}
	})
}

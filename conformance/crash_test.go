package conformance_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/conformance"
	"github.com/agenthost/agenthost/host/driverhost"
)

// TestCrashReported: a driver process that dies during a case is reported
// as a crash of that case, with the end of its log (its stderr), not as
// the failure of the rule the call that found it gone was checking; the
// cases after it run on a fresh instance and pass.
func TestCrashReported(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f := conformance.Launched("broken:crashes", driverhost.Config{Path: exe, Env: []string{brokenEnv + "=crashes"}}, conformance.NoConfig)
	rep, err := conformance.Check(context.Background(), f, conformance.Options{ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range rep.Results {
		if res.Status != conformance.Fail {
			continue
		}
		if res.ID() != "atomicity/refused-batch" {
			t.Errorf("case %s failed too (%v): a crash in one case spilled into others", res.ID(), res.Rules)
			continue
		}
		if !slices.Equal(res.Rules, []string{conformance.RuleCrash}) {
			t.Errorf("the crashed case broke %v, want only %s", res.Rules, conformance.RuleCrash)
		}
		if !strings.Contains(res.Message, "simulated crash in commit") {
			t.Errorf("the crash report does not carry the driver's stderr:\n%s", res.Message)
		}
	}
	if got := rep.FailedRules(); !slices.Equal(got, []string{conformance.RuleCrash}) {
		t.Fatalf("failed rules %v, want [%s]", got, conformance.RuleCrash)
	}
}

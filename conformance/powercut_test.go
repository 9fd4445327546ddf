package conformance_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/conformance"
	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/internal/lazyfs"
)

var (
	powerCutOnce sync.Once
	powerCutErr  error
)

// powerCut says whether the suite can cut the power here (mount its FUSE
// file system): nil when it can.
func powerCut(t *testing.T) error {
	t.Helper()
	powerCutOnce.Do(func() {
		dir, err := os.MkdirTemp("", "powercut-probe-")
		if err != nil {
			powerCutErr = err
			return
		}
		defer os.RemoveAll(dir)
		f, err := lazyfs.Mount(dir, lazyfs.Options{})
		if err != nil {
			powerCutErr = err
			return
		}
		powerCutErr = f.Unmount()
	})
	return powerCutErr
}

// skipPowerCut skips a test that needs the power cut, unless
// AGENTHOST_REQUIRE_ALL=1.
func skipPowerCut(t *testing.T) {
	t.Helper()
	if os.Getenv("AGENTHOST_REQUIRE_ALL") == "1" {
		t.Fatalf("the power cut cannot run here (AGENTHOST_REQUIRE_ALL=1): %v", powerCut(t))
	}
	t.Skipf("the power cut cannot run here: %v", powerCut(t))
}

// TestPowerCutCatchesUnsyncedBadger: badgerstore without SyncWrites,
// claiming the durable tier, passes every process kill of the durability
// group and fails the power cut, alone.
func TestPowerCutCatchesUnsyncedBadger(t *testing.T) {
	needBins(t)
	if powerCut(t) != nil {
		skipPowerCut(t)
	}
	target := conformance.Binary(bins["badgerstore"], func(dir string) map[string]string {
		return map[string]string{"dir": dir, "sync_writes": "false"}
	})
	rep, err := conformance.Check(context.Background(), target, conformance.Options{
		Tiers: []conformance.Tier{conformance.TierDurable}, Only: "durability/", ScratchDir: t.TempDir(), PowerCut: conformance.PowerCutRequire})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.FailedRules(); !slices.Equal(got, []string{conformance.RulePowerCut}) {
		var buf strings.Builder
		_ = rep.WriteText(&buf)
		t.Fatalf("badgerstore with sync_writes false failed %v, want exactly [%s]:\n%s", got, conformance.RulePowerCut, buf.String())
	}
	for _, res := range rep.Results {
		if res.Status == conformance.Fail {
			t.Logf("%s: %s", res.ID(), res.Message)
		}
	}
}

// TestPowerCutOff: with the power cut off, the durable tier passes on
// process kills, and the report says so.
func TestPowerCutOff(t *testing.T) {
	needBins(t)
	rep, err := conformance.Check(context.Background(), conformance.Binary(bins["badgerstore"], conformance.DirConfig), conformance.Options{
		Only: "durability/", ScratchDir: t.TempDir(), PowerCut: conformance.PowerCutOff})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Pass || rep.Durability != conformance.DurableProcessKill {
		t.Fatalf("pass %v, durability %q; want a pass on process kills", rep.Pass, rep.Durability)
	}
	var buf strings.Builder
	_ = rep.WriteText(&buf)
	if !strings.Contains(buf.String(), "checked against process kills only, not a power cut (turned off") {
		t.Fatalf("the report does not say the power cut was off:\n%s", buf.String())
	}
	buf.Reset()
	_ = rep.WriteJUnit(&buf)
	if !strings.Contains(buf.String(), `<property name="durability" value="process-kill">`) {
		t.Fatalf("the JUnit report lacks the durability property:\n%s", buf.String())
	}
	if _, err := conformance.Check(context.Background(), conformance.Binary(bins["badgerstore"], conformance.DirConfig), conformance.Options{PowerCut: "sometimes"}); err == nil {
		t.Fatal("an unknown power cut setting was taken")
	}
}

// TestPowerCutDataElsewhere: a durable driver that keeps its data outside
// its data directory, leaving there a configuration file (and, traced, an
// unsynced trace of its commits), passes the durable tier on process
// kills only: the report claims no power cut.
func TestPowerCutDataElsewhere(t *testing.T) {
	if powerCut(t) != nil {
		skipPowerCut(t)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ trace, why string }{
		{"", "synced no file in its data directory"},
		{"1", "synced no file in its data directory"},
	} {
		t.Run("trace="+tc.trace, func(t *testing.T) {
			elsewhere := t.TempDir()
			target := conformance.Launched("data-elsewhere", driverhost.Config{Path: exe, Env: []string{brokenEnv + "=data-elsewhere"}}, func(dir string) map[string]string {
				return map[string]string{"dir": dir, "elsewhere": elsewhere, "trace": tc.trace}
			})
			rep, err := conformance.Check(context.Background(), target, conformance.Options{
				Tiers: []conformance.Tier{conformance.TierDurable}, Only: "durability/power-cut", ScratchDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			var buf strings.Builder
			_ = rep.WriteText(&buf)
			if !rep.Pass || rep.Durability != conformance.DurableProcessKill || !strings.Contains(buf.String(), tc.why) {
				t.Fatalf("pass %v, durability %q; want a pass on process kills saying the driver %s:\n%s", rep.Pass, rep.Durability, tc.why, buf.String())
			}
		})
	}
}

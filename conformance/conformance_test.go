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

func TestMemstore(t *testing.T) {
	needBins(t)
	rep := conformance.Run(t, conformance.Binary(bins["memstore"], conformance.NoConfig), conformance.Options{})
	if !slices.Equal(rep.Passed, []conformance.Tier{conformance.TierBasic}) {
		t.Errorf("memstore passed tiers %v, want [basic]", rep.Passed)
	}
}

// TestMemstoreOverGRPC: the suite over gRPC, the transport of a driver
// that offers no direct one (the others run over the direct transport,
// which the SDK's drivers offer).
func TestMemstoreOverGRPC(t *testing.T) {
	needBins(t)
	target := conformance.Launched(bins["memstore"]+" over gRPC", driverhost.Config{Path: bins["memstore"], Transport: driverhost.TransportGRPC}, conformance.NoConfig)
	rep := conformance.Run(t, target, conformance.Options{})
	if !slices.Equal(rep.Passed, []conformance.Tier{conformance.TierBasic}) {
		t.Errorf("memstore over gRPC passed tiers %v, want [basic]", rep.Passed)
	}
}

func TestBadgerstore(t *testing.T) {
	needBins(t)
	rep := conformance.Run(t, conformance.Binary(bins["badgerstore"], conformance.DirConfig), conformance.Options{})
	if !slices.Equal(rep.Passed, []conformance.Tier{conformance.TierBasic, conformance.TierDurable}) {
		t.Errorf("badgerstore passed tiers %v, want [basic durable]", rep.Passed)
	}
	want := conformance.DurablePowerCut
	if powerCut(t) != nil {
		want = conformance.DurableProcessKill
	}
	if rep.Durability != want {
		t.Errorf("badgerstore's durable tier was checked against %q, want %q", rep.Durability, want)
	}
}

// TestBroken: each broken driver fails the suite, naming the rule it broke.
func TestBroken(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for name, rules := range brokenDrivers {
		t.Run(name, func(t *testing.T) {
			if extra, ok := powerCutRules[name]; ok {
				if powerCut(t) == nil {
					rules = slices.Sorted(slices.Values(append(slices.Clone(rules), extra...)))
				} else if len(extra) == 0 {
					skipPowerCut(t)
				}
			}
			// In process through the SDK's server, but for the drivers
			// that must be killed: this test binary re-executed.
			f := conformance.InProcess("broken:"+name, brokenFactory(name), conformance.NoConfig)
			switch name {
			case "loses-acked-writes", "crashes":
				f = conformance.Launched("broken:"+name, driverhost.Config{Path: exe, Env: []string{brokenEnv + "=" + name}}, conformance.NoConfig)
			case "acks-before-write", "acks-unsynced":
				f = conformance.Launched("broken:"+name, driverhost.Config{Path: exe, Env: []string{brokenEnv + "=" + name}}, conformance.DirConfig)
			}
			rep, err := conformance.Check(context.Background(), f, conformance.Options{ScratchDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Pass {
				t.Fatalf("broken driver %s passed the suite", name)
			}
			if got := rep.FailedRules(); !slices.Equal(got, rules) {
				t.Fatalf("broken driver %s failed rules %v, want exactly %v", name, got, rules)
			}
			t.Logf("fails %v", rep.FailedRules())
		})
	}
}

// TestFullProfile: the full profile (10k runs across 1k threads, 1 MiB
// messages, longer commit streams) on both drivers.
func TestFullProfile(t *testing.T) {
	needBins(t)
	if testing.Short() {
		t.Skip("the full profile is long")
	}
	for name, cfg := range map[string]conformance.ConfigFunc{"memstore": conformance.NoConfig, "badgerstore": conformance.DirConfig} {
		t.Run(name, func(t *testing.T) {
			rep, err := conformance.Check(context.Background(), conformance.Binary(bins[name], cfg), conformance.Options{Profile: conformance.Full, ScratchDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Pass {
				var buf strings.Builder
				_ = rep.WriteText(&buf)
				t.Fatalf("the full profile failed:\n%s", buf.String())
			}
			t.Logf("full profile in %s", rep.Duration)
		})
	}
}

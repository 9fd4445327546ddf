package conformance

import (
	"context"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// Run runs the suite against the drivers target starts, from a driver's own
// tests, in the manner of testing/fstest.TestFS: each case is a subtest
// named group/name, failing with the rules it broke. It also runs the
// driver SDK's contract (package storedrivertest) on instances of target, as
// subtests of "contract", and returns the suite's report (which the
// contract's outcome is not part of).
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Binary(bin, conformance.DirConfig), conformance.Options{})
//	}
func Run(t *testing.T, target Target, opts Options) *Report {
	t.Helper()
	if opts.ScratchDir == "" {
		opts.ScratchDir = t.TempDir()
	}
	rep, err := Check(context.Background(), target, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range rep.Results {
		t.Run(res.ID(), func(t *testing.T) {
			t.Logf("%s in %s %s", res.Status, res.Duration, res.Message)
			switch res.Status {
			case Fail:
				t.Errorf("broke %s:\n%s", strings.Join(res.Rules, ", "), res.Message)
			case Skip:
				t.Skip(res.Message)
			}
		})
	}
	if rep.Error != "" {
		t.Errorf("the suite could not run: %s", rep.Error)
	}
	// The in-process contract of the driver SDK, on instances of target.
	t.Run("contract", func(t *testing.T) {
		storedrivertest.Run(t, func(t *testing.T) driver.Driver {
			dir := t.TempDir()
			if cl, ok := target.(Cleaner); ok {
				t.Cleanup(func() { _ = cl.Clean(context.Background(), dir) }) // after the contract closes the instance
			}
			in, err := target.Start(context.Background(), dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if s, ok := in.(interface{ Store() driver.Driver }); ok {
				return s.Store() // as the host uses it: with the step store of a protocol 2 driver
			}
			return in
		})
	})
	t.Logf("suite %s, profile %s, driver %s %s: tiers claimed %s, passed %s, in %s",
		rep.SuiteVersion, rep.Profile, rep.Driver.Name, rep.Driver.Version, tierList(rep.Claimed), tierList(rep.Passed), rep.Duration)
	return rep
}

package conformance_test

import (
	"context"
	"fmt"
	"os"

	"github.com/agenthost/agenthost/conformance"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// Check runs the suite without a testing.T and returns the report; here on
// the in-memory driver, served in this process through the driver SDK.
func ExampleCheck() {
	f := conformance.InProcess("memstore", memdriver.Factory, conformance.NoConfig)
	rep, err := conformance.Check(context.Background(), f, conformance.Options{Profile: conformance.Quick, ScratchDir: os.TempDir()})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("suite", rep.SuiteVersion, "pass", rep.Pass, "tiers", rep.Passed, "broken", rep.FailedRules())
	// Output: suite 1.4.0 pass true tiers [basic] broken []
}

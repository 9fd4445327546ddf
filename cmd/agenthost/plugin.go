package main

import (
	"fmt"
	"os"

	"github.com/agenthost/agenthost/host/driverhost"
)

// servePluginIfAsked serves a built-in store driver when this binary was
// re-executed as a driver subprocess (driverhost.Builtin). It reports
// whether it did.
func servePluginIfAsked() (int, bool) {
	name := os.Getenv(driverhost.BuiltinEnv)
	if name == "" {
		return 0, false
	}
	if err := driverhost.ServeBuiltin(name); err != nil {
		fmt.Fprintln(os.Stderr, "agenthost:", err)
		return exitUsage, true
	}
	return exitOK, true
}

package main

import (
	"fmt"
	"os"

	"github.com/agenthost/agenthost/internal/builtins"
)

// servePluginIfAsked serves a built-in store driver when this binary was
// re-executed as a driver subprocess (builtins.Launch). It reports whether
// it did.
func servePluginIfAsked() (int, bool) {
	served, err := builtins.ServeIfAsked()
	if !served {
		return 0, false
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agenthost:", err)
		return exitUsage, true
	}
	return exitOK, true
}

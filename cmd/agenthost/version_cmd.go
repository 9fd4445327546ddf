package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/agenthost/agenthost/host/httpapi"
)

func init() {
	register("version", "print the build's version, revision and Go version", runVersion)
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "version [--json]", "agenthost version", stderr)
	jsonOut := fs.Bool("json", false, "print JSON, with the build settings and dependencies")
	_, code, ok := parseN(fs, args, 0)
	if !ok {
		return code
	}
	version, revision := httpapi.Version()
	if *jsonOut {
		out := map[string]any{"version": version, "revision": revision, "go_version": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH}
		if bi, ok := debug.ReadBuildInfo(); ok {
			settings := map[string]string{}
			for _, s := range bi.Settings {
				settings[s.Key] = s.Value
			}
			deps := map[string]string{}
			for _, d := range bi.Deps {
				deps[d.Path] = d.Version
			}
			out["module"], out["settings"], out["deps"] = bi.Main.Path, settings, deps
		}
		printJSON(stdout, out)
		return exitOK
	}
	fmt.Fprintf(stdout, "agenthost %s (revision %s, %s, %s/%s)\n", version, revision, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/agenthost/agenthost/host/wasm"
)

func init() {
	register("policy check", "validate a wasm policy module and print its manifest", runPolicyCheck)
	register("policy test", "run decision cases from a file against a wasm policy", runPolicyTest)
}

func runPolicyCheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("policy check", "policy check [--config JSON] FILE.wasm", "agenthost policy check bin/guests/refine.wasm", stderr)
	config := fs.String("config", "", "configuration passed to the guest at load, e.g. {\"coalescePending\":true}")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fs.Usage()
		return exitUsage
	}
	if err := wasm.Check(context.Background(), stdout, pos[0], wasm.CheckOptions{Config: []byte(*config)}); err != nil {
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitFail
	}
	return exitOK
}

func runPolicyTest(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("policy test", "policy test FILE.wasm --cases FILE [--config JSON]",
		"agenthost policy test bin/guests/refine.wasm --cases host/wasm/testdata/cases/refine.json", stderr)
	cases := fs.String("cases", "", "JSON file of decision cases (required)")
	config := fs.String("config", "", "configuration passed to the guest at load")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || *cases == "" {
		fs.Usage()
		return exitUsage
	}
	err := wasm.RunCases(context.Background(), stdout, pos[0], *cases, wasm.CheckOptions{Config: []byte(*config)})
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, wasm.ErrMismatch):
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitFail
	default:
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitUsage
	}
}

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
	register("policy test", "run decision cases (inputPolicy, toolPolicy) from files against a wasm guest", runPolicyTest)
}

func runPolicyCheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("policy check", "policy check [--config JSON] FILE.wasm", "agenthost policy check bin/guests/refine.wasm", stderr)
	config := fs.String("config", "", "configuration passed to the guest at load, e.g. {\"coalescePending\":true}")
	pos, code, ok := parseN(fs, args, 1)
	if !ok {
		return code
	}
	if err := wasm.Check(context.Background(), stdout, pos[0], wasm.CheckOptions{Config: []byte(*config)}); err != nil {
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitFail
	}
	return exitOK
}

func runPolicyTest(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("policy test", "policy test FILE.wasm [--cases FILE] [--tool-cases FILE] [--config JSON]",
		"agenthost policy test bin/guests/refine.wasm --cases host/wasm/testdata/cases/refine.json", stderr)
	cases := fs.String("cases", "", "JSON file of inputPolicy decision cases")
	toolCases := fs.String("tool-cases", "", "JSON file of toolPolicy decision cases")
	config := fs.String("config", "", "configuration passed to the guest at load")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || *cases == "" && *toolCases == "" {
		fs.Usage()
		return exitUsage
	}
	opts := wasm.CheckOptions{Config: []byte(*config)}
	var err error
	if *cases != "" {
		err = wasm.RunCases(context.Background(), stdout, pos[0], *cases, opts)
	}
	if *toolCases != "" && (err == nil || errors.Is(err, wasm.ErrMismatch)) {
		err = errors.Join(err, wasm.RunToolCases(context.Background(), stdout, pos[0], *toolCases, opts))
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, wasm.ErrMismatch) && onlyMismatches(err):
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitFail
	default:
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitUsage
	}
}

// onlyMismatches reports whether every error joined in err is a mismatch of
// cases (exit status 1) rather than a module or file that does not load.
func onlyMismatches(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !errors.Is(e, wasm.ErrMismatch) {
				return false
			}
		}
	}
	return errors.Is(err, wasm.ErrMismatch)
}

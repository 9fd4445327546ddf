package conformance

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Exit codes of Main.
const (
	ExitPass  = 0 // the driver passed every tier it claims
	ExitFail  = 1 // the driver failed the suite
	ExitUsage = 2 // bad arguments, or the driver could not be launched
)

const usage = `usage: agenthost conformance DRIVER [flags]

Runs the store driver conformance suite (version %s) against DRIVER: a path
to a driver binary, or the name of a driver built into this binary (%s),
served by this binary re-executed.

flags:
`

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// Main is the command "agenthost conformance DRIVER [--profile quick|full]
// [--json FILE] [--junit FILE]". It prints each result as it comes and a
// table at the end on stdout, and returns the exit code: ExitPass, ExitFail,
// or ExitUsage for bad arguments and a driver that cannot be launched.
//
// DRIVER is a driver binary's path, or one of builtins' names (nil: the
// binary has no built-in drivers), tested as builtins.Target says.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, builtins Builtins) int {
	var names []string
	if builtins != nil {
		names = builtins.Names()
	}
	known := strings.Join(names, ", ")
	if known == "" {
		known = "none"
	}
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, usage, Version, known)
		fs.PrintDefaults()
	}
	profile := fs.String("profile", string(Quick), "quick (the host's gate) or full (adds scale)")
	jsonOut := fs.String("json", "", "write the report as JSON to `FILE`")
	junitOut := fs.String("junit", "", "write the report as JUnit XML to `FILE`")
	only := fs.String("run", "", "run only the cases whose group/name contains `TEXT`")
	var tiers, configs multi
	fs.Var(&tiers, "tier", "claim `TIER` (durable, shared) on top of what the driver's info claims; repeatable")
	fs.Var(&configs, "config", "driver configuration `KEY=VALUE`; for a binary, {dir} is the instance's scratch data directory (default dir={dir}); for a built-in, the configuration it runs with (pgstore: url=postgres://..., tested in scratch schemas); repeatable")
	noConfig := fs.Bool("no-config", false, "open a driver binary with no configuration at all")
	powerCut := fs.String("power-cut", string(PowerCutAuto), "cut the power under a durable driver, on a FUSE file system that drops unsynced writes: auto (when FUSE can be mounted here), require, or off")

	// Flags may come before or after DRIVER.
	var positional []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return ExitUsage
			}
			return ExitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(positional) != 1 {
		fs.Usage()
		return ExitUsage
	}
	path := positional[0]
	opts := Options{Profile: Profile(*profile), Only: *only, PowerCut: PowerCut(*powerCut)}
	for _, t := range tiers {
		opts.Tiers = append(opts.Tiers, Tier(t))
	}

	var target Target
	switch {
	case strings.ContainsRune(path, os.PathSeparator) || fileExists(path):
		if !fileExists(path) {
			fmt.Fprintf(stderr, "conformance: no driver binary at %s\n", path)
			return ExitUsage
		}
		cfg, err := configFunc(configs, *noConfig)
		if err != nil {
			fmt.Fprintln(stderr, "conformance:", err)
			return ExitUsage
		}
		target = Binary(path, cfg)
	case slices.Contains(names, path):
		launch := map[string]string{}
		for _, kv := range configs {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				fmt.Fprintf(stderr, "conformance: --config %q: want KEY=VALUE\n", kv)
				return ExitUsage
			}
			launch[k] = v
		}
		var err error
		if target, err = builtins.Target(path, launch); err != nil {
			fmt.Fprintln(stderr, "conformance:", err)
			return ExitUsage
		}
	default:
		fmt.Fprintf(stderr, "conformance: %q is neither a driver binary nor a built-in driver (%s)\n", path, known)
		return ExitUsage
	}

	fmt.Fprintf(stdout, "%s %s, profile %s: %s\n", SuiteName, Version, opts.Profile, target)
	opts.Progress = func(r Result) { fmt.Fprintln(stdout, ProgressLine(r)) }
	rep, err := Check(ctx, target, opts)
	if err != nil {
		fmt.Fprintln(stderr, "conformance:", err)
		return ExitUsage
	}
	fmt.Fprintln(stdout)
	_ = rep.WriteText(stdout)
	code := ExitPass
	switch {
	case rep.Error != "":
		fmt.Fprintf(stderr, "conformance: the driver could not be launched: %s\n", rep.Error)
		code = ExitUsage
	case !rep.Pass:
		code = ExitFail
	}
	for _, out := range []struct {
		path  string
		write func(io.Writer) error
	}{{*jsonOut, rep.WriteJSON}, {*junitOut, rep.WriteJUnit}} {
		if out.path == "" {
			continue
		}
		if err := writeFile(out.path, out.write); err != nil {
			fmt.Fprintln(stderr, "conformance:", err)
			if code == ExitPass {
				code = ExitUsage
			}
		}
	}
	return code
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func configFunc(kvs []string, none bool) (ConfigFunc, error) {
	if none {
		if len(kvs) > 0 {
			return nil, errors.New("--no-config and --config together")
		}
		return NoConfig, nil
	}
	if len(kvs) == 0 {
		return DirConfig, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--config %q: want KEY=VALUE", kv)
		}
		m[k] = v
	}
	return func(dir string) map[string]string {
		out := make(map[string]string, len(m))
		for k, v := range m {
			out[k] = strings.ReplaceAll(v, "{dir}", dir)
		}
		return out
	}, nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/guests/policy/standard"
	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/host/trust"
	"github.com/agenthost/agenthost/host/wasm"
	"github.com/agenthost/agenthost/internal/builtins"
)

func init() {
	register("demo", "play \"summarise…\" then \"actually, in bullet points\" under the refine policy and print the timeline", runDemo)
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", "demo [--keep DIR]", "agenthost demo", stderr)
	keep := fs.String("keep", "", "keep the demo's store in DIR instead of a temporary directory")
	if _, code, ok := parse(fs, args); !ok {
		return code
	}
	dir := *keep
	if dir == "" {
		tmp, err := os.MkdirTemp("", "agenthost-demo-")
		if err != nil {
			fmt.Fprintln(stderr, "agenthost:", err)
			return exitUsage
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The demo's host admits its store like any host: through the gate.
	gate, err := trust.Open(dir, trust.Options{Builtins: builtins.Registry{}, Logger: quiet})
	if err != nil {
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitUsage
	}
	fmt.Fprintln(stdout, "certifying the badgerstore driver (conformance suite, quick profile, on a scratch instance)…")
	launch := func() (*driverhost.Driver, error) {
		d, _, err := gate.Launch(ctx, trust.Source{Builtin: "badgerstore"}, driverhost.Config{
			DriverConfig: map[string]string{"dir": filepath.Join(dir, "badgerstore")}, Logger: quiet,
		})
		return d, err
	}
	d, err := launch()
	if err != nil {
		fmt.Fprintln(stderr, "agenthost: starting badgerstore:", err)
		return exitUsage
	}
	defer func() { d.Close(context.Background()) }()
	eng, err := wasm.NewEngine(ctx, wasm.EngineConfig{CacheDir: filepath.Join(dir, "wasm-cache")})
	if err != nil {
		fmt.Fprintln(stderr, "agenthost:", err)
		return exitUsage
	}
	defer eng.Close(ctx)
	pol, err := eng.Load(ctx, standard.RefineC, wasm.Options{Logger: quiet})
	if err != nil {
		fmt.Fprintln(stderr, "agenthost: loading the refine policy:", err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "agenthost demo: badgerstore (a subprocess) in %s, the refine policy (wasm), the scripted model\n\n", dir)
	restart := func() (driver.Driver, error) {
		// The store process goes down with the host, and comes back on the
		// same data.
		d.Close(context.Background())
		nd, err := launch()
		if err != nil {
			return nil, err
		}
		d = nd
		return nd.Store(), nil
	}
	if err := demo(ctx, stdout, d.Store(), pol, restart); err != nil {
		fmt.Fprintln(stderr, "agenthost: demo failed:", err)
		return exitFail
	}
	return exitOK
}

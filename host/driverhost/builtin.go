package driverhost

import (
	"fmt"
	"os"
	"slices"

	"github.com/agenthost/agenthost/plugins/badgerstore/badgerdriver"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// BuiltinEnv is the environment variable that tells a re-executed host
// binary to serve a built-in driver instead of doing its own work. Its value
// is the driver name.
const BuiltinEnv = "AGENTHOST_SERVE_DRIVER"

// builtins are the drivers built into the host binary, with how each is
// served.
var builtins = map[string]builtin{
	memdriver.Name:    {func() storedriver.Factory { return memdriver.Factory }, memdriver.ServeOptions},
	badgerdriver.Name: {func() storedriver.Factory { return badgerdriver.Factory{Logger: storedriver.Logger(badgerdriver.Name)} }, nil},
	pgdriver.Name:     {func() storedriver.Factory { return pgdriver.Factory{} }, nil},
}

type builtin struct {
	factory func() storedriver.Factory
	opts    []storedriver.ServeOption
}

// BuiltinNames lists the built-in drivers.
func BuiltinNames() []string {
	var names []string
	for n := range builtins {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ServeBuiltin serves the built-in driver name as a plugin subprocess, and
// returns when the host ends it. A host binary calls it first thing in main
// when BuiltinEnv is set:
//
//	if name := os.Getenv(driverhost.BuiltinEnv); name != "" {
//		if err := driverhost.ServeBuiltin(name); err != nil { ... exit 1 }
//		return
//	}
func ServeBuiltin(name string) error {
	b, ok := builtins[name]
	if !ok {
		return fmt.Errorf("no built-in store driver %q (have %v)", name, BuiltinNames())
	}
	storedriver.Serve(b.factory(), b.opts...)
	return nil
}

// Builtin returns the launch config that runs the built-in driver name by
// re-executing the running binary (which must call ServeBuiltin, see there).
func Builtin(name string, driverConfig map[string]string) (Config, error) {
	if _, ok := builtins[name]; !ok {
		return Config{}, fmt.Errorf("no built-in store driver %q (have %v)", name, BuiltinNames())
	}
	exe, err := os.Executable()
	if err != nil {
		return Config{}, fmt.Errorf("finding the running binary: %w", err)
	}
	return Config{Path: exe, Env: []string{BuiltinEnv + "=" + name}, DriverConfig: driverConfig}, nil
}

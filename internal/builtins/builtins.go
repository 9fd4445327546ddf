// Package builtins is the registry of the store drivers built into the
// agenthost binary: memstore, badgerstore and pgstore. It is the one place
// that knows them; the command (cmd/agenthost) wires it into the host's
// driver gate (trust.Options.Builtins) and into the conformance command
// (conformance.Main), which know no driver by name.
//
// A built-in driver runs as a subprocess like any other: the binary
// re-executes itself with Env set to the driver's name, and its main calls
// ServeIfAsked first thing, which serves the driver instead of doing the
// binary's own work. Test binaries that launch built-in drivers do the same
// in their TestMain.
package builtins

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/agenthost/agenthost/conformance"
	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/plugins/badgerstore/badgerdriver"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// Env is the environment variable that tells a re-executed binary to serve
// a built-in driver instead of doing its own work. Its value is the driver
// name.
const Env = "AGENTHOST_SERVE_DRIVER"

// Host is what the host's configuration gives a built-in driver's
// configuration by default.
type Host struct {
	// Data is the host's data directory.
	Data string
	// StoreURL is the database URL the host was given (--store-url).
	StoreURL string
}

// driverEntry is one built-in driver.
type driverEntry struct {
	// factory returns what the driver process serves.
	factory func() storedriver.Factory
	// opts are how it is served.
	opts []storedriver.ServeOption
	// configure fills the host's defaults into the configuration the host
	// runs the driver with, and reports a setting the driver cannot do
	// without; nil: nothing to fill.
	configure func(cfg map[string]string, h Host) error
}

var drivers = map[string]driverEntry{
	memdriver.Name: {
		factory: func() storedriver.Factory { return memdriver.Factory },
		opts:    memdriver.ServeOptions,
	},
	badgerdriver.Name: {
		factory: func() storedriver.Factory {
			return badgerdriver.Factory{Logger: storedriver.Logger(badgerdriver.Name)}
		},
		configure: func(cfg map[string]string, h Host) error {
			if cfg["dir"] == "" {
				cfg["dir"] = filepath.Join(h.Data, badgerdriver.Name)
			}
			return nil
		},
	},
	pgdriver.Name: {
		factory: func() storedriver.Factory { return pgdriver.Factory{} },
		configure: func(cfg map[string]string, h Host) error {
			if h.StoreURL != "" {
				cfg["url"] = h.StoreURL
			}
			if cfg["url"] == "" {
				return fmt.Errorf("store %s needs a database URL: store_url (env AGENTHOST_STORE_URL, flag --store-url)", pgdriver.Name)
			}
			return nil
		},
	},
}

// Registry is the registry of the built-in drivers, as the gate
// (trust.Builtins) and the conformance command (conformance.Builtins) take
// it.
type Registry struct{}

var _ conformance.Builtins = Registry{}

// Names lists the built-in drivers, sorted.
func (Registry) Names() []string { return Names() }

// Launch returns the launch configuration of the built-in driver name (see
// package Launch).
func (Registry) Launch(name string, driverConfig map[string]string) (driverhost.Config, error) {
	return Launch(name, driverConfig)
}

// Scratch returns how the conformance suite makes scratch instances of the
// built-in driver name (see package Scratch).
func (Registry) Scratch(name string, launch map[string]string) (conformance.Scratch, error) {
	return Scratch(name, launch)
}

// Target returns the conformance target of the built-in driver name (see
// package Target).
func (Registry) Target(name string, launch map[string]string) (conformance.Target, error) {
	return Target(name, launch)
}

// Names lists the built-in drivers, sorted.
func Names() []string {
	return slices.Sorted(maps.Keys(drivers))
}

// Has reports whether name is a built-in driver.
func Has(name string) bool {
	_, ok := drivers[name]
	return ok
}

func lookup(name string) (driverEntry, error) {
	d, ok := drivers[name]
	if !ok {
		return driverEntry{}, fmt.Errorf("no built-in store driver %q (have %v)", name, Names())
	}
	return d, nil
}

// Configure returns cfg, the configuration the host runs the built-in
// driver name with, with the host's defaults filled in (badgerstore: its
// data directory under the host's; pgstore: the host's database URL), or
// the setting the driver cannot do without. cfg is not modified.
func Configure(name string, cfg map[string]string, h Host) (map[string]string, error) {
	d, err := lookup(name)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(cfg)+1)
	maps.Copy(out, cfg)
	if d.configure != nil {
		if err := d.configure(out, h); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ServeIfAsked serves the built-in driver Env names, if it is set, and
// reports whether it did; it returns when the host ends the driver. A
// binary that launches built-in drivers calls it first thing in main (or
// TestMain):
//
//	if served, err := builtins.ServeIfAsked(); served {
//		if err != nil { ... exit 1 }
//		return
//	}
func ServeIfAsked() (served bool, err error) {
	name := os.Getenv(Env)
	if name == "" {
		return false, nil
	}
	d, err := lookup(name)
	if err != nil {
		return true, err
	}
	storedriver.Serve(d.factory(), d.opts...)
	return true, nil
}

// Launch returns the launch configuration that runs the built-in driver
// name, opened with driverConfig, by re-executing the running binary (which
// must call ServeIfAsked).
func Launch(name string, driverConfig map[string]string) (driverhost.Config, error) {
	if _, err := lookup(name); err != nil {
		return driverhost.Config{}, err
	}
	exe, err := os.Executable()
	if err != nil {
		return driverhost.Config{}, fmt.Errorf("finding the running binary: %w", err)
	}
	return driverhost.Config{Path: exe, Env: []string{Env + "=" + name}, DriverConfig: driverConfig}, nil
}

// Scratch returns how the conformance suite makes the scratch instances of
// the built-in driver name that runs with configuration launch (the
// user's): what its factory says (conformance.ScratchOf).
func Scratch(name string, launch map[string]string) (conformance.Scratch, error) {
	d, err := lookup(name)
	if err != nil {
		return conformance.Scratch{}, err
	}
	return conformance.ScratchOf(d.factory(), launch), nil
}

// Target returns the conformance target that tests the built-in driver
// name, served by the running binary re-executed, its scratch instances
// those of Scratch(name, launch).
func Target(name string, launch map[string]string) (conformance.Target, error) {
	cfg, err := Launch(name, nil)
	if err != nil {
		return nil, err
	}
	sc, err := Scratch(name, launch)
	if err != nil {
		return nil, err
	}
	var t conformance.Target = conformance.Launched("builtin:"+name, cfg, sc.Config)
	if sc.Clean != nil {
		t = conformance.WithCleanup(t, sc.Clean)
	}
	return t, nil
}

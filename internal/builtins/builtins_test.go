package builtins_test

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/conformance"
	"github.com/agenthost/agenthost/internal/builtins"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
)

func TestNames(t *testing.T) {
	want := []string{"badgerstore", "memstore", "pgstore"}
	if got := builtins.Names(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, n := range want {
		if !builtins.Has(n) {
			t.Errorf("Has(%q) = false", n)
		}
	}
	if builtins.Has("nosuch") || builtins.Has("") {
		t.Error("Has of an unknown driver")
	}
}

func TestConfigure(t *testing.T) {
	h := builtins.Host{Data: "/data", StoreURL: ""}
	user := map[string]string{"sync_writes": "true"}
	got, err := builtins.Configure("badgerstore", user, h)
	if err != nil || got["dir"] != filepath.Join("/data", "badgerstore") || got["sync_writes"] != "true" {
		t.Fatalf("badgerstore: %v, %v", got, err)
	}
	if _, ok := user["dir"]; ok {
		t.Fatal("Configure modified its argument")
	}
	if got, err := builtins.Configure("badgerstore", map[string]string{"dir": "/mine"}, h); err != nil || got["dir"] != "/mine" {
		t.Fatalf("badgerstore with a dir: %v, %v", got, err)
	}
	if got, err := builtins.Configure("memstore", nil, h); err != nil || len(got) != 0 {
		t.Fatalf("memstore: %v, %v", got, err)
	}
	if _, err := builtins.Configure("pgstore", nil, h); err == nil || !strings.Contains(err.Error(), "needs a database URL") {
		t.Fatalf("pgstore without a URL: %v", err)
	}
	h.StoreURL = "postgres://h/db"
	if got, err := builtins.Configure("pgstore", map[string]string{"url": "postgres://other/db"}, h); err != nil || got["url"] != h.StoreURL {
		t.Fatalf("pgstore with the host's URL: %v, %v", got, err)
	}
	if got, err := builtins.Configure("pgstore", map[string]string{"url": "postgres://other/db"}, builtins.Host{}); err != nil || got["url"] != "postgres://other/db" {
		t.Fatalf("pgstore with its own URL: %v, %v", got, err)
	}
	if _, err := builtins.Configure("nosuch", nil, h); err == nil {
		t.Fatal("Configure of an unknown driver: no error")
	}
}

// TestScratch: each built-in's scratch instances are what its factory says,
// not what its name says.
func TestScratch(t *testing.T) {
	dir := t.TempDir()
	mem, err := builtins.Scratch("memstore", nil)
	if err != nil || mem.Config(dir) != nil || mem.Clean != nil {
		t.Fatalf("memstore: %+v, %v", mem, err)
	}
	bad, err := builtins.Scratch("badgerstore", map[string]string{"dir": "/user/data"})
	if err != nil || !reflect.DeepEqual(bad.Config(dir), map[string]string{"dir": dir}) || bad.Clean != nil {
		t.Fatalf("badgerstore: %+v, %v", bad, err)
	}
	launch := map[string]string{"url": "postgres://h/db", "schema": "users", "max_conns": "8"}
	pg, err := builtins.Scratch("pgstore", launch)
	if err != nil || pg.Clean == nil {
		t.Fatalf("pgstore: %+v, %v", pg, err)
	}
	want := map[string]string{"url": "postgres://h/db", "max_conns": "8", "schema": pgdriver.ScratchSchema(dir)}
	if got := pg.Config(dir); !reflect.DeepEqual(got, want) {
		t.Fatalf("pgstore scratch config = %v, want %v", got, want)
	}
	launch["url"] = "postgres://changed/db"
	if got := pg.Config(dir); got["url"] != "postgres://h/db" {
		t.Fatalf("the scratch config follows a later change of the launch config: %v", got)
	}
	// Without a URL no instance could start: there is nothing to drop.
	pgNone, _ := builtins.Scratch("pgstore", nil)
	if err := pgNone.Clean(context.Background(), dir); err != nil {
		t.Fatalf("Clean without a URL: %v", err)
	}
	if _, err := builtins.Scratch("nosuch", nil); err == nil {
		t.Fatal("Scratch of an unknown driver: no error")
	}
}

func TestLaunch(t *testing.T) {
	cfg, err := builtins.Launch("memstore", map[string]string{"k": "v"})
	if err != nil || cfg.Path == "" || !reflect.DeepEqual(cfg.Env, []string{builtins.Env + "=memstore"}) || cfg.DriverConfig["k"] != "v" {
		t.Fatalf("Launch = %+v, %v", cfg, err)
	}
	if _, err := builtins.Launch("nosuch", nil); err == nil || !strings.Contains(err.Error(), "no built-in store driver") {
		t.Fatalf("Launch of an unknown driver: %v", err)
	}
	target, err := builtins.Target("badgerstore", nil)
	if err != nil || target.String() != "builtin:badgerstore" {
		t.Fatalf("Target = %v, %v", target, err)
	}
	if _, ok := target.(conformance.Cleaner); ok {
		t.Fatal("badgerstore's target cleans outside its data directories")
	}
	if target, err := builtins.Target("pgstore", map[string]string{"url": "postgres://h/db"}); err != nil {
		t.Fatal(err)
	} else if _, ok := target.(conformance.Cleaner); !ok {
		t.Fatal("pgstore's target does not drop its scratch schemas")
	}
	if _, err := builtins.Target("nosuch", nil); err == nil {
		t.Fatal("Target of an unknown driver: no error")
	}
}

package wasm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
)

// Test guests built with the Go toolchain (GOOS=wasip1) are built on demand
// into a directory shared by the test binary; compiled wasm code is cached
// across runs in the user cache directory, as the host would cache it.

var (
	root      string // the module root
	guestDir  string // built Go guests
	cacheDir  string // wazero compilation cache for tests
	buildMu   sync.Mutex
	buildErrs = map[string]error{}
	built     = map[string]bool{}
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	root = filepath.Clean(filepath.Join(wd, "..", ".."))
	guestDir, err = os.MkdirTemp("", "agenthost-guests-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(guestDir)
	if d, err := os.UserCacheDir(); err == nil {
		cacheDir = filepath.Join(d, "agenthost", "wasm-test-cache")
	} else {
		cacheDir = filepath.Join(guestDir, "cache")
	}
	return m.Run()
}

// goGuest returns the path of the standard Go guest name, building it first.
func goGuest(tb testing.TB, name string) string {
	tb.Helper()
	return buildGuest(tb, name, "./guests/policy/"+name)
}

// buildGuest builds the Go guest in pkg (relative to the module root).
func buildGuest(tb testing.TB, name, pkg string) string {
	tb.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	out := filepath.Join(guestDir, name+".wasm")
	if built[name] {
		return out
	}
	if err := buildErrs[name]; err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(goTool(), "build", "-buildmode=c-shared", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		buildErrs[name] = fmt.Errorf("building guest %s: %v\n%s", name, err, b)
		tb.Fatal(buildErrs[name])
	}
	built[name] = true
	return out
}

// goTool is the go command of the toolchain running the tests, if it can be
// found, else the one on PATH.
func goTool() string {
	if p := filepath.Join(os.Getenv("GOROOT"), "bin", "go"); os.Getenv("GOROOT") != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

// cGuest returns the committed C refine guest.
func cGuest() string { return filepath.Join(root, "guests", "policy", "refine-c", "refine.wasm") }

func hostile(name string) string { return filepath.Join("testdata", "hostile", name+".wasm") }

func newEngine(tb testing.TB, cfg EngineConfig) *Engine {
	tb.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = cacheDir
	}
	e, err := NewEngine(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close(context.Background()) })
	return e
}

// load loads a guest for a test. Without a CallTimeout it gets a generous
// one: the machine running the tests may be slow, and only the tests about
// deadlines want them short.
func load(tb testing.TB, e *Engine, path string, opts Options) *Module {
	tb.Helper()
	if opts.CallTimeout == 0 {
		opts.CallTimeout = 10 * time.Second
	}
	m, err := e.LoadFile(context.Background(), path, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// requireTool skips a test when tool is missing, unless AGENTHOST_REQUIRE_ALL
// is set, in which case it fails.
func requireTool(t *testing.T, tool, pkgs string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		if os.Getenv("AGENTHOST_REQUIRE_ALL") != "" {
			t.Fatalf("%s not found (install Debian packages: %s)", tool, pkgs)
		}
		t.Skipf("%s not found (install Debian packages: %s)", tool, pkgs)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// isFallback reports whether Decide's error reports a failed call answered
// with the fallback d.
func isFallback(err error, d runstate.Decision) bool {
	var fb *policy.FallbackError
	return errors.As(err, &fb) && fb.Decision == d
}

package wasm

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agenthost/agenthost/host/runstate"
)

// TestCGuestMatchesSource rebuilds the committed C guest from its source and
// checks the committed module is that build.
func TestCGuestMatchesSource(t *testing.T) {
	requireTool(t, "clang", "clang lld")
	requireTool(t, "wasm-ld", "lld")
	out := filepath.Join(t.TempDir(), "refine.wasm")
	cmd := exec.Command("sh", filepath.Join(root, "guests", "policy", "refine-c", "build.sh"), out)
	// A wasm-opt on PATH must not take part in the build (clang -O2 runs
	// one when it links): put one that fails first.
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "wasm-opt"), []byte("#!/bin/sh\necho wasm-opt must not run >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, b)
	}
	sameFile(t, out, cGuest())
}

// TestHostileFixturesMatchSource rebuilds the WAT fixtures and checks the
// committed modules are those builds.
func TestHostileFixturesMatchSource(t *testing.T) {
	requireTool(t, "wat2wasm", "wabt")
	dir := t.TempDir()
	cmd := exec.Command("sh", filepath.Join("testdata", "hostile", "build.sh"), dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, b)
	}
	wats, _ := filepath.Glob(filepath.Join("testdata", "hostile", "*.wat"))
	if len(wats) == 0 {
		t.Fatal("no fixtures")
	}
	for _, w := range wats {
		n := filepath.Base(w[:len(w)-len(".wat")]) + ".wasm"
		sameFile(t, filepath.Join(dir, n), filepath.Join("testdata", "hostile", n))
	}
}

func sameFile(t *testing.T, built, committed string) {
	t.Helper()
	a, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s does not match its source: rebuild it with its build.sh and commit it", committed)
	}
}

// TestSpecExample builds the WAT guest of abi/guestabi/SPEC.md and runs it.
func TestSpecExample(t *testing.T) {
	requireTool(t, "wat2wasm", "wabt")
	spec, err := os.ReadFile(filepath.Join(root, "abi", "guestabi", "SPEC.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(spec, []byte("```wat\n"))
	wat, _, ok2 := bytes.Cut(rest, []byte("```"))
	if !ok || !ok2 {
		t.Fatal("no wat block in SPEC.md")
	}
	dir := t.TempDir()
	src, out := filepath.Join(dir, "example.wat"), filepath.Join(dir, "example.wasm")
	if err := os.WriteFile(src, wat, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("wat2wasm", "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm: %v\n%s", err, b)
	}
	e := newEngine(t, EngineConfig{})
	m := load(t, e, out, Options{})
	d, err := m.Decide(context.Background(), request(decideCases[0]))
	if err != nil || d != (runstate.Decision{Action: runstate.ActionQueue, CoalescePending: true}) || m.Stats().Failures != 0 {
		t.Errorf("got %+v %v, stats %+v", d, err, m.Stats())
	}
	if m.GuestManifest().Name != "always-queue" {
		t.Errorf("manifest %+v", m.GuestManifest())
	}
}

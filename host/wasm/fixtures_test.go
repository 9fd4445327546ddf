package wasm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCGuestMatchesSource rebuilds the committed C guest from its source and
// checks the committed module is that build.
func TestCGuestMatchesSource(t *testing.T) {
	requireTool(t, "clang", "clang lld")
	requireTool(t, "wasm-ld", "lld")
	out := filepath.Join(t.TempDir(), "refine.wasm")
	cmd := exec.Command("sh", filepath.Join(root, "guests", "policy", "refine-c", "build.sh"), out)
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

package examples

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host/wasm"
)

// requireAll (AGENTHOST_REQUIRE_ALL=1) makes a missing toolchain a failure
// instead of a skip.
var requireAll = os.Getenv("AGENTHOST_REQUIRE_ALL") == "1"

func need(t *testing.T, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if requireAll {
		t.Fatal(why)
	}
	t.Skip(why)
}

func have(tool string) bool { _, err := exec.LookPath(tool); return err == nil }

// debianRustc is the rustc the Rust build uses (build.sh): Debian's when
// installed, whatever else is on PATH.
func debianRustc() string {
	if _, err := os.Stat("/usr/bin/rustc"); err == nil {
		return "/usr/bin/rustc"
	}
	return "rustc"
}

func version(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// hasWasm32Std reports whether rustc has the wasm32-unknown-unknown
// standard library (Debian package libstd-rust-dev-wasm32).
func hasWasm32Std(rustc string) bool {
	dir := version(rustc, "--print", "target-libdir", "--target", "wasm32-unknown-unknown")
	m, _ := filepath.Glob(filepath.Join(dir, "libcore-*.rlib"))
	return dir != "" && len(m) > 0
}

type example struct {
	lang string
	// ready says whether the toolchain is here, and why not.
	ready func() (bool, string)
	// pinned reports whether the toolchain is the one that built the
	// committed module, so the rebuild must be byte for byte the same.
	pinned func() bool
}

var examples = []example{
	{"c", func() (bool, string) {
		return have("clang") && have("wasm-ld"), "clang and wasm-ld are needed (Debian packages clang, lld)"
	}, func() bool { return strings.Contains(version("clang", "--version"), "clang version 14.0.6") }},
	{"rust", func() (bool, string) {
		r := debianRustc()
		return have(r) && hasWasm32Std(r), "rustc with the wasm32 standard library is needed (Debian packages rustc, libstd-rust-dev-wasm32)"
	}, func() bool { return strings.HasPrefix(version(debianRustc(), "--version"), "rustc 1.63.0") }},
	{"assemblyscript", func() (bool, string) {
		_, err := os.Stat(filepath.Join("assemblyscript", "node_modules", ".bin", "asc"))
		return have("node") && err == nil, "node and the pinned compiler are needed (npm ci in guests/examples/assemblyscript)"
	}, func() bool { return true }},
	{"wat", func() (bool, string) {
		return have("wat2wasm"), "wat2wasm is needed (Debian package wabt)"
	}, func() bool { return version("wat2wasm", "--version") == "1.0.32" }},
}

// hostileBin is a directory of tools that fail when run, put first on PATH
// for the builds: a build must not pick up whatever happens to be installed
// (clang -O2 runs a wasm-opt it finds; a rustup rustc may lack wasm32).
func hostileBin(t *testing.T) string {
	dir := t.TempDir()
	tools := []string{"wasm-opt"}
	if _, err := os.Stat("/usr/bin/rustc"); err == nil {
		tools = append(tools, "rustc")
	}
	for _, tool := range tools {
		script := "#!/bin/sh\necho \"" + tool + " from PATH must not run\" >&2\nexit 3\n"
		if err := os.WriteFile(filepath.Join(dir, tool), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runCases(t *testing.T, path string) {
	t.Helper()
	var out bytes.Buffer
	// A generous call deadline: the machine running the tests may be
	// loaded, and the cases include inputs of over a megabyte.
	opts := wasm.CheckOptions{CallTimeout: 10 * time.Second}
	if err := wasm.RunCases(context.Background(), &out, path, "cases.json", opts); err != nil {
		t.Errorf("%s: %v\n%s", path, err, out.String())
	}
	out.Reset()
	if err := wasm.RunToolCases(context.Background(), &out, path, "tool_cases.json", opts); err != nil {
		t.Errorf("%s: %v\n%s", path, err, out.String())
	}
}

// TestExamples runs the shared cases (cases.json for the inputPolicy,
// tool_cases.json for the toolPolicy) against each committed module and
// against a rebuild from source, which must equal the committed module when
// the toolchain is the pinned one.
func TestExamples(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.lang, func(t *testing.T) {
			t.Parallel()
			committed := filepath.Join(ex.lang, "policy.wasm")
			runCases(t, committed)
			ok, why := ex.ready()
			need(t, ok, why)
			out := filepath.Join(t.TempDir(), "policy.wasm")
			cmd := exec.Command("sh", filepath.Join(ex.lang, "build.sh"), out)
			cmd.Env = append(os.Environ(), "PATH="+hostileBin(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s/build.sh: %v\n%s", ex.lang, err, b)
			}
			runCases(t, out)
			if !ex.pinned() {
				t.Logf("%s toolchain is not the pinned one: rebuild not compared with %s", ex.lang, committed)
				return
			}
			a, _ := os.ReadFile(out)
			b, _ := os.ReadFile(committed)
			if !bytes.Equal(a, b) {
				t.Errorf("%s does not match its source: run %s/build.sh and commit the result", committed, ex.lang)
			}
		})
	}
	t.Run("go", func(t *testing.T) {
		t.Parallel()
		out := filepath.Join(t.TempDir(), "example-go.wasm")
		cmd := exec.Command(goTool(), "build", "-buildmode=c-shared", "-o", out, "./go")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, b)
		}
		runCases(t, out)
	})
}

// goTool is the go command of the toolchain running the tests (go test
// sets GOROOT for them), else the one on PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

// TestRustSDK runs the Rust SDK's unit tests, built natively by rustc.
func TestRustSDK(t *testing.T) {
	t.Parallel()
	rustc := debianRustc()
	need(t, have(rustc), "rustc is needed (Debian package rustc)")
	bin := filepath.Join(t.TempDir(), "sdk-test")
	build := exec.Command(rustc, "--edition", "2021", "--test", "-o", bin, filepath.Join("..", "..", "sdk", "rust", "src", "lib.rs"))
	build.Env = append(os.Environ(), "RUSTFLAGS=", "RUSTUP_TOOLCHAIN=")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("rustc --test: %v\n%s", err, b)
	}
	if b, err := exec.Command(bin).CombinedOutput(); err != nil {
		t.Fatalf("Rust SDK tests: %v\n%s", err, b)
	} else {
		t.Logf("%s", b)
	}
}

// TestAssemblyScriptSDK runs the AssemblyScript SDK's tests under node.
func TestAssemblyScriptSDK(t *testing.T) {
	t.Parallel()
	asc, _ := filepath.Abs(filepath.Join("assemblyscript", "node_modules", ".bin", "asc"))
	_, err := os.Stat(asc)
	need(t, have("node") && err == nil, "node and the pinned compiler are needed (npm ci in guests/examples/assemblyscript)")
	cmd := exec.Command("node", filepath.Join("..", "..", "sdk", "assemblyscript", "test", "test.mjs"), asc)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("AssemblyScript SDK tests: %v\n%s", err, out.String())
	}
	t.Logf("%s", out.String())
}

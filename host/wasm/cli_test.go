package wasm

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	var out bytes.Buffer
	if err := Check(context.Background(), &out, cGuest(), CheckOptions{CacheDir: cacheDir, CallTimeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if !containsAll(out.String(), "name:", "refine-c", "hooks:", "inputPolicy", "actions:", "queue, inject, interrupt", "imports:", "(none)") {
		t.Errorf("output:\n%s", out.String())
	}
	out.Reset()
	if err := Check(context.Background(), &out, goGuest(t, "step-budget"), CheckOptions{Config: []byte(`{"maxSteps": 3}`), CacheDir: cacheDir, CallTimeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if !containsAll(out.String(), "step-budget", "prepareStep", "wasi_snapshot_preview1.fd_write") {
		t.Errorf("output:\n%s", out.String())
	}
	out.Reset()
	err := Check(context.Background(), &out, hostile("sockimport"), CheckOptions{})
	if !errors.Is(err, ErrInvalidModule) || !containsAll(err.Error(), "sockimport.wasm", "sock_accept") || out.Len() != 0 {
		t.Errorf("err = %v, output %q", err, out.String())
	}
}

func TestRunCases(t *testing.T) {
	cases := filepath.Join("testdata", "cases")
	for _, path := range []string{cGuest(), goGuest(t, "refine")} {
		var out bytes.Buffer
		if err := RunCases(context.Background(), &out, path, filepath.Join(cases, "refine.json"), CheckOptions{CacheDir: cacheDir}); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, out.String())
		}
		if !containsAll(out.String(), "CASE", "WANT", "GOT", "refinement", "6 cases, 0 failed") {
			t.Errorf("output:\n%s", out.String())
		}
		out.Reset()
		err := RunCases(context.Background(), &out, path, filepath.Join(cases, "refine-wrong.json"), CheckOptions{CacheDir: cacheDir})
		if !errors.Is(err, ErrMismatch) || !containsAll(out.String(), "wrong action", "reject", "queue", "FAIL",
			"interrupt+coalesce", "3 cases, 2 failed") {
			t.Errorf("err = %v, output:\n%s", err, out.String())
		}
	}
	// A failing guest never passes a case on its fallback.
	var out bytes.Buffer
	err := RunCases(context.Background(), &out, hostile("trap"), filepath.Join(cases, "refine.json"), CheckOptions{CacheDir: cacheDir})
	if !errors.Is(err, ErrMismatch) || !containsAll(out.String(), "error:", "divide by zero") {
		t.Errorf("err = %v, output:\n%s", err, out.String())
	}
}

// TestCheckDecides: Check decides its built-in requests and fails a guest
// that returns what its manifest does not declare, or cannot take a large
// request.
func TestCheckDecides(t *testing.T) {
	var out bytes.Buffer
	// A generous call deadline: the machine running the tests may be slow.
	if err := Check(context.Background(), &out, cGuest(), CheckOptions{CacheDir: cacheDir, CallTimeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if !containsAll(out.String(), "slowest:", "decide:", "requests, 0 failed", "queue ×", "inject ×", "interrupt ×") {
		t.Errorf("output:\n%s", out.String())
	}
	for _, c := range []struct{ fixture, want string }{
		{"undeclared", `returned "reject", which its manifest does not declare`},

		{"trap", "divide by zero"},
	} {
		out.Reset()
		err := Check(context.Background(), &out, hostile(c.fixture), CheckOptions{CacheDir: cacheDir})
		if !errors.Is(err, ErrCheckFailed) || !strings.Contains(err.Error(), c.want) || !strings.Contains(out.String(), "decide:") {
			t.Errorf("%s: err = %v, output:\n%s", c.fixture, err, out.String())
		}
	}
}

// TestCheckLoop: a guest that never answers fails the check on its deadline.
func TestCheckLoop(t *testing.T) {
	var out bytes.Buffer
	err := Check(context.Background(), &out, hostile("loop"), CheckOptions{CacheDir: cacheDir, CallTimeout: 150 * time.Millisecond})
	if !errors.Is(err, ErrCheckFailed) || !strings.Contains(err.Error(), "deadline exceeded") || !strings.Contains(out.String(), "warning:") {
		t.Errorf("err = %v, output:\n%s", err, out.String())
	}
}

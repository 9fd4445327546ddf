package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestStartTrace: AGENTHOST_TRACE's file is an execution trace once
// stopped, and a path that cannot be created is an error.
func TestStartTrace(t *testing.T) {
	p := filepath.Join(t.TempDir(), "serve.trace")
	stop, err := startTrace(p)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("go 1.")) || !bytes.Contains(b[:16], []byte(" trace")) {
		t.Fatalf("not an execution trace: %q", b[:min(len(b), 16)])
	}
	if _, err := startTrace(filepath.Join(t.TempDir(), "missing", "serve.trace")); err == nil {
		t.Fatal("a path in a missing folder: no error")
	}
}

// TestStartCPUProfile: AGENTHOST_CPU_PROFILE's file is a profile once
// stopped (gzip-compressed protobuf).
func TestStartCPUProfile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err := startCPUProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Fatalf("not a gzip-compressed profile: % x", b[:min(len(b), 4)])
	}
}

package main

import (
	"io"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/internal/apitest"
)

func cliServer(t *testing.T) string {
	t.Helper()
	return apitest.New(t, apitest.Config{}).URL
}

func runCmd(run func([]string, io.Writer, io.Writer) int, args ...string) (int, string, string) {
	var out, errb strings.Builder
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestCLIPositionalIDs: the thread or run a command is about is its first
// argument; the old --thread forms still work, with a note.
func TestCLIPositionalIDs(t *testing.T) {
	url := cliServer(t)
	code, out, errs := runCmd(runSubmit, "--server", url, "T", "hello", "there", "--wait", "--json")
	if code != exitOK || !strings.Contains(out, `"hello there"`) || errs != "" {
		t.Fatalf("submit T: %d %s %s", code, out, errs)
	}
	code, out, errs = runCmd(runSubmit, "--server", url, "--thread", "T", "--wait", "again")
	if code != exitOK || !strings.Contains(out, "accepted") || !strings.Contains(errs, "deprecated") {
		t.Fatalf("submit --thread: %d %s %s", code, out, errs)
	}
	code, out, _ = runCmd(runRunsList, "--server", url, "T")
	if code != exitOK || strings.Count(out, "run_") != 2 {
		t.Fatalf("runs list T: %d %s", code, out)
	}
	code, out2, errs := runCmd(runRunsList, "--server", url, "--thread", "T")
	if code != exitOK || out2 != out || !strings.Contains(errs, `use "agenthost runs list T"`) {
		t.Fatalf("runs list --thread T: %d %s %s", code, out2, errs)
	}
	code, out, _ = runCmd(runThreadShow, "--server", url, "T")
	if code != exitOK || !strings.Contains(out, "user      hello there") {
		t.Fatalf("thread show T: %d %s", code, out)
	}
	if code, out, errs = runCmd(runThreadsList, "--server", url); code != exitOK || !strings.Contains(out, "T") {
		t.Fatalf("threads list: %d %s %s", code, out, errs)
	}
	if code, _, _ = runCmd(runRunsList, "--server", url); code != exitUsage {
		t.Fatalf("runs list without a thread: %d", code)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runCmd(runVersion)
	if code != exitOK || !strings.HasPrefix(out, "agenthost ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version: %d %q", code, out)
	}
	code, out, _ = runCmd(runVersion, "--json")
	if code != exitOK || !strings.Contains(out, `"go_version"`) || !strings.Contains(out, `"module": "github.com/agenthost/agenthost"`) {
		t.Fatalf("version --json: %d %s", code, out)
	}
}

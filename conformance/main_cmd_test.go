package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/conformance"
	"github.com/agenthost/agenthost/internal/builtins"
)

func TestMainCommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	main := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := conformance.Main(ctx, args, &out, &errb, builtins.Registry{})
		return code, out.String(), errb.String()
	}
	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{nil, {"nosuchdriver"}, {"memstore", "extra"}, {"--profile"}, {"/nonexistent/driver"}, {"memstore", "--profile", "slow"}, {"memstore", "--power-cut", "sometimes"}} {
			if code, _, _ := main(args...); code != conformance.ExitUsage {
				t.Errorf("%q: exit %d, want %d", args, code, conformance.ExitUsage)
			}
		}
	})
	t.Run("not-a-driver", func(t *testing.T) {
		code, _, stderr := main("/bin/true", "--no-config")
		if code != conformance.ExitUsage || !strings.Contains(stderr, "could not be launched") {
			t.Fatalf("/bin/true: exit %d, %s", code, stderr)
		}
	})
	t.Run("builtin-memstore", func(t *testing.T) {
		jsonPath, junitPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.xml")
		code, stdout, stderr := main("memstore", "--json", jsonPath, "--junit", junitPath)
		if code != conformance.ExitPass {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		for _, want := range []string{"PASS  handshake/info", "verdict", "passed basic", conformance.Version} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		}
		var rep conformance.Report
		b, err := os.ReadFile(jsonPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &rep); err != nil || rep.SuiteVersion != conformance.Version || !rep.Pass || rep.Driver.Name != "memstore" {
			t.Fatalf("JSON report: %+v, %v", rep, err)
		}
		x, err := os.ReadFile(junitPath)
		if err != nil {
			t.Fatal(err)
		}
		var j struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
		}
		if err := xml.Unmarshal(x, &j); err != nil || j.Tests != len(rep.Results) || j.Failures != 0 || !bytes.Contains(x, []byte(`"suite_version" value="`+conformance.Version)) {
			t.Fatalf("JUnit report: %+v, %v\n%s", j, err, x)
		}
	})
	t.Run("binary-badgerstore-durable-only", func(t *testing.T) {
		needBins(t)
		code, stdout, _ := main(bins["badgerstore"], "--run", "durability/", "--config", "dir={dir}", "--config", "sync_writes=true")
		if code != conformance.ExitPass || !strings.Contains(stdout, "PASS  durability/kill-during-commits") {
			t.Fatalf("exit %d\n%s", code, stdout)
		}
	})
	t.Run("failing-driver", func(t *testing.T) {
		needBins(t)
		// memstore claiming the durable tier fails it.
		code, stdout, _ := main(bins["memstore"], "--no-config", "--tier", "durable", "--run", "handshake")
		if code != conformance.ExitFail || !strings.Contains(stdout, "handshake.durability-claim") {
			t.Fatalf("exit %d\n%s", code, stdout)
		}
		// Two memstore processes share nothing: claiming the shared tier fails.
		code, stdout, _ = main(bins["memstore"], "--no-config", "--tier", "shared", "--run", "shared/")
		if code != conformance.ExitFail || !strings.Contains(stdout, "shared.visible") || !strings.Contains(stdout, "claimed basic,shared; passed basic\n") {
			t.Fatalf("memstore claiming shared: exit %d\n%s", code, stdout)
		}
	})
}

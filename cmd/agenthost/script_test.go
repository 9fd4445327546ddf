package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/agenthost/agenthost/internal/builtins"
	"github.com/agenthost/agenthost/internal/mcptest"
	"github.com/agenthost/agenthost/internal/openaitest"
	"github.com/agenthost/agenthost/internal/pgtest"
)

var (
	runIDRE  = regexp.MustCompile(`run_[0-9a-f]+`)
	callIDRE = regexp.MustCompile(`waiting +call (\S+):`)
)

func TestMain(m *testing.M) {
	// Re-executed as a built-in store driver: main1 serves it.
	if os.Getenv(builtins.Env) != "" {
		os.Exit(main1())
	}
	// Re-executed as agenthost by the tests that start serve themselves.
	if os.Getenv(runMainEnv) != "" {
		os.Exit(main1())
	}
	// Re-executed as the store driver of faultDriver.
	serveFaultDriverIfAsked()
	testscript.Main(cleanupM{m}, map[string]func(){
		"agenthost":     func() { os.Exit(main1()) },
		"mcptestserver": func() { os.Exit(mcptest.ServeStdio()) },
	})
}

// cleanupM removes the shared data directory once the tests ran.
type cleanupM struct{ m *testing.M }

func (c cleanupM) Run() int {
	code := pgtest.Run(c.m.Run) // and stop the PostgreSQL the tests started
	if gateData.dir != "" {
		os.RemoveAll(gateData.dir)
	}
	return code
}

// TestScripts runs the command line end to end: the txtar scripts in
// testdata/script run the real agenthost binary (serve, submit, kill -9,
// restart, ...).
func TestScripts(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			env.Setenv("PORT", strconv.Itoa(port))
			env.Setenv("AGENTHOST_SERVER", fmt.Sprintf("http://127.0.0.1:%d", port))
			env.Setenv("REPO", root)
			// A fake OpenAI-compatible endpoint (internal/openaitest) for
			// the scripts that serve with model openai.
			fake := openaitest.New()
			env.Defer(fake.Close)
			env.Setenv("FAKE_OPENAI", fake.BaseURL())
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// httpget PATH writes the body of the server's answer to stdout.
			"httpget": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 1 {
					ts.Fatalf("usage: httpget PATH")
				}
				resp, err := http.Get(ts.Getenv("AGENTHOST_SERVER") + args[0])
				if err != nil {
					ts.Fatalf("GET %s: %v", args[0], err)
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil || resp.StatusCode != http.StatusOK {
					ts.Fatalf("GET %s: %s %v", args[0], resp.Status, err)
				}
				ts.Stdout().Write(b)
			},
			// readmeyaml writes the README's agent.yaml example to a file.
			"readmeyaml": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 1 {
					ts.Fatalf("usage: readmeyaml FILE")
				}
				b, err := os.ReadFile(filepath.Join(root, "README.md"))
				ts.Check(err)
				_, rest, ok := strings.Cut(string(b), "<!-- agent.yaml -->\n```yaml\n")
				block, _, ok2 := strings.Cut(rest, "```\n<!-- /agent.yaml -->")
				if !ok || !ok2 {
					ts.Fatalf("README.md has no agent.yaml example")
				}
				ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte(block), 0o644))
			},
			// setrun sets $RUN to the first run id of the last command's
			// stdout.
			"setrun": func(ts *testscript.TestScript, neg bool, args []string) {
				id := runIDRE.FindString(ts.ReadFile("stdout"))
				if id == "" {
					ts.Fatalf("no run id in stdout")
				}
				ts.Setenv("RUN", id)
			},
			// setcall sets $CALL to the first pending call of a run that
			// the last command's stdout shows waiting.
			"setcall": func(ts *testscript.TestScript, neg bool, args []string) {
				m := callIDRE.FindStringSubmatch(ts.ReadFile("stdout"))
				if m == nil {
					ts.Fatalf("no waiting call in stdout")
				}
				ts.Setenv("CALL", m[1])
			},
			// waitrun RUN STATE waits until the run is in STATE (waiting,
			// completed, ...).
			"waitrun": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 2 {
					ts.Fatalf("usage: waitrun RUN STATE")
				}
				url := ts.Getenv("AGENTHOST_SERVER") + "/v1/runs/" + args[0]
				state := ""
				for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
					resp, err := http.Get(url)
					if err != nil {
						continue
					}
					var run struct {
						State string `json:"state"`
					}
					json.NewDecoder(resp.Body).Decode(&run)
					resp.Body.Close()
					if state = run.State; state == args[1] {
						return
					}
				}
				ts.Fatalf("run %s is %s, not %s, after 2m", args[0], state, args[1])
			},
			// waitserver waits until the server answers /healthz.
			"waitserver": func(ts *testscript.TestScript, neg bool, args []string) {
				url := ts.Getenv("AGENTHOST_SERVER") + "/healthz"
				deadline := time.Now().Add(3 * time.Minute)
				for time.Now().Before(deadline) {
					if resp, err := http.Get(url); err == nil {
						resp.Body.Close()
						if resp.StatusCode == 200 {
							return
						}
					}
					time.Sleep(100 * time.Millisecond)
				}
				ts.Fatalf("the server at %s did not come up", url)
			},
		},
	})
}

package soak

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// rig is what every soak sets up before its servers start and takes down
// after them: a folder for the data and the logs (a temporary one unless
// given, removed when the run passed), the agenthost binary (built unless
// given), the scripted model's script, the test MCP server when the runs
// call tools, and the servers, each killed with every process it started.
type rig struct {
	Dir, Bin, Script string
	// Tools is the test MCP server's binary, empty when the runs call the
	// built-in lookup tool only.
	Tools string

	temp    bool
	servers []*Server
	logf    func(string, ...any)
}

// rigOptions configure newRig.
type rigOptions struct {
	Dir, Bin string
	Prefix   string // of the temporary folder's name
	// ToolSteps > 0 runs the test MCP server: the script calls its echo
	// tool in that many steps before it answers.
	ToolSteps int
	Logf      func(string, ...any)
}

// newRig makes the folder, builds what is missing and writes the script.
func newRig(ctx context.Context, o rigOptions) (r *rig, err error) {
	r = &rig{Dir: o.Dir, Bin: o.Bin, logf: o.Logf}
	if r.Dir == "" {
		if r.Dir, err = os.MkdirTemp("", o.Prefix); err != nil {
			return nil, err
		}
		r.temp = true
		defer func() {
			if err != nil {
				os.RemoveAll(r.Dir)
			}
		}()
	}
	if r.Bin == "" {
		r.logf("building agenthost")
		if r.Bin, err = Build(ctx, r.Dir); err != nil {
			return nil, err
		}
	}
	if o.ToolSteps > 0 {
		r.Tools = filepath.Join(r.Dir, "mcptestserver")
		if err := goBuild(ctx, r.Tools, "github.com/agenthost/agenthost/internal/mcptest/mcptestserver"); err != nil {
			return nil, err
		}
	}
	r.Script = filepath.Join(r.Dir, "script.json")
	if err := os.WriteFile(r.Script, []byte(scriptFor(o.ToolSteps)), 0o644); err != nil {
		return nil, err
	}
	return r, nil
}

// server returns a server on the rig's binary and script, its data in
// the folder under data and its log at name.log, and keeps it for stop.
// A rig with tools gives it the test MCP server.
func (r *rig) server(name, data string, env, args []string) *Server {
	s := &Server{Bin: r.Bin, Data: filepath.Join(r.Dir, data), Script: r.Script,
		LogPath: filepath.Join(r.Dir, name+".log"),
		Env:     append([]string{"AGENTHOST_SHUTDOWN_TIMEOUT=1s"}, env...), Args: args}
	if r.Tools != "" {
		s.Env = append(s.Env, fmt.Sprintf(`AGENTHOST_MCP_SERVERS=[{"name":%q,"command":%q,"env":["MCPTEST_CALLS"]}]`, toolServer, r.Tools))
		s.StartEnv = func(n int) []string { return []string{"MCPTEST_CALLS=" + r.CallsLog(name, n)} }
		s.Helpers = []string{"MCPTEST_CALLS"}
	}
	r.servers = append(r.servers, s)
	return s
}

// CallsLog is where the test MCP server of server name's n-th start (from
// 1) appends the key of every call: one log a start, so that calls the
// server killed before had in flight never land among the next one's.
func (r *rig) CallsLog(name string, n int) string {
	return filepath.Join(r.Dir, fmt.Sprintf("tool-calls-%s-%03d.log", name, n))
}

// stop kills every server and what it started, and returns a problem for
// each process left alive.
func (r *rig) stop() []string {
	var out []string
	for _, s := range r.servers {
		if alive := s.Cleanup(); len(alive) > 0 {
			out = append(out, fmt.Sprintf("processes left behind: %v", alive))
		}
	}
	return out
}

// finish removes a temporary folder after a run that passed, and says
// where it is kept otherwise.
func (r *rig) finish(passed bool) {
	if !r.temp {
		return
	}
	if passed {
		os.RemoveAll(r.Dir)
		return
	}
	r.logf("kept %s (data, logs)", r.Dir)
}

// Build builds the agenthost binary into dir.
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "agenthost")
	return bin, goBuild(ctx, bin, "github.com/agenthost/agenthost/cmd/agenthost")
}

func goBuild(ctx context.Context, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// Package packaging holds the container image's Dockerfile and build
// script and the systemd unit; its tests check them as far as a machine
// without a container engine allows.
package packaging

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// instruction is one Dockerfile instruction.
type instruction struct {
	cmd, args string
}

// stage is one stage of a Dockerfile.
type stage struct {
	from, name string
	ins        []instruction
}

// parseDockerfile splits a Dockerfile into stages of instructions,
// joining continued lines.
func parseDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages []stage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		cmd = strings.ToUpper(cmd)
		args = strings.TrimSpace(args)
		if cmd == "FROM" {
			from, name, _ := strings.Cut(args, " AS ")
			stages = append(stages, stage{from: strings.TrimSpace(from), name: strings.TrimSpace(name)})
			return
		}
		if len(stages) == 0 {
			t.Fatalf("%s: %s before any FROM", path, cmd)
		}
		s := &stages[len(stages)-1]
		s.ins = append(s.ins, instruction{cmd, args})
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if l, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(l + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	return stages
}

func (s stage) all(cmd string) []string {
	var out []string
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// buildImageFiles runs packaging/build.sh, the build stage's script, into
// a temporary directory, once per test binary.
var built struct {
	dir string
	err error
	out []byte
}

func buildImageFiles(t *testing.T) string {
	t.Helper()
	if built.dir == "" && built.err == nil {
		built.dir = filepath.Join(t.TempDir(), "out")
		cmd := exec.Command("bash", "build.sh", built.dir)
		built.out, built.err = cmd.CombinedOutput()
	}
	if built.err != nil {
		t.Fatalf("packaging/build.sh: %v\n%s", built.err, built.out)
	}
	return built.dir
}

// TestDockerfile checks the image's structure: a build stage that runs
// packaging/build.sh, a runtime stage without the toolchain that copies
// what the script built, runs as a non-root user and keeps its data on a
// volume; and runs the script, checking what it builds.
func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t, "Dockerfile")
	if len(stages) != 2 {
		t.Fatalf("%d stages, want 2 (build, runtime)", len(stages))
	}
	build, run := stages[0], stages[1]
	if build.name != "build" || !strings.HasPrefix(build.from, "golang:1.26") {
		t.Errorf("build stage FROM %s AS %s: want golang:1.26… AS build", build.from, build.name)
	}
	if !strings.Contains(strings.Join(build.all("RUN"), "\n"), "packaging/build.sh /out") {
		t.Errorf("the build stage does not run packaging/build.sh /out: %v", build.all("RUN"))
	}
	if strings.HasPrefix(run.from, "golang") {
		t.Errorf("the runtime stage is built FROM %s: it would carry the toolchain", run.from)
	}
	users := run.all("USER")
	if len(users) == 0 {
		t.Fatal("the runtime stage sets no USER: it would run as root")
	}
	if u := users[len(users)-1]; u == "root" || u == "0" || strings.HasPrefix(u, "0:") || strings.HasPrefix(u, "root:") {
		t.Errorf("USER %s: want a non-root user", u)
	}
	if vols := strings.Join(run.all("VOLUME"), " "); !strings.Contains(vols, "/var/lib/agenthost") {
		t.Errorf("VOLUME %q: want the data directory /var/lib/agenthost", vols)
	}
	env := strings.Join(run.all("ENV"), " ")
	for _, want := range []string{"AGENTHOST_DATA=/var/lib/agenthost", "AGENTHOST_CONFIG=/etc/agenthost/agenthost.yaml"} {
		if !strings.Contains(env, want) {
			t.Errorf("ENV lacks %s", want)
		}
	}
	if ep := strings.Join(run.all("ENTRYPOINT"), ""); !strings.Contains(ep, "tini") || !strings.Contains(ep, "/usr/local/bin/agenthost") {
		t.Errorf("ENTRYPOINT %s: want tini then agenthost", ep)
	}

	// Every COPY --from=build names something the script builds, and every
	// other COPY a file of the repository.
	out := buildImageFiles(t)
	copyFrom := regexp.MustCompile(`^--from=build\s+/out/(\S+)\s+\S+$`)
	var fromBuild int
	for _, c := range run.all("COPY") {
		if m := copyFrom.FindStringSubmatch(c); m != nil {
			fromBuild++
			if _, err := os.Stat(filepath.Join(out, m[1])); err != nil {
				t.Errorf("COPY %s: the build script made no %s", c, m[1])
			}
			continue
		}
		src := strings.Fields(c)[0]
		if _, err := os.Stat(filepath.Join("..", src)); err != nil {
			t.Errorf("COPY %s: no %s in the repository", c, src)
		}
	}
	if fromBuild != 2 {
		t.Errorf("%d COPY --from=build, want 2 (the binary, the guests)", fromBuild)
	}
	v, err := exec.Command(filepath.Join(out, "agenthost"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(v), "agenthost ") {
		t.Errorf("the built agenthost version: %v %s", err, v)
	}
	for _, g := range []string{"refine", "refine-c", "queue", "interrupt", "reject", "inject", "step-budget", "system-instruction"} {
		b, err := os.ReadFile(filepath.Join(out, "guests", g+".wasm"))
		if err != nil || !bytes.HasPrefix(b, []byte("\x00asm")) {
			t.Errorf("guest %s: %v (not a wasm module)", g, err)
		}
	}
}

// unit reads the systemd unit's [Service] settings.
func unit(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("agenthost.service")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	section := ""
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, _ := strings.Cut(line, "=")
			out[k] = append(out[k], v)
		}
	}
	return out
}

// TestSystemdUnit: the stop signal goes to agenthost alone (KillMode=mixed:
// the host decides when its driver stops), systemd waits longer than the
// production configuration's shutdown does, and systemd-analyze accepts
// the unit when it is installed.
func TestSystemdUnit(t *testing.T) {
	u := unit(t)
	for k, want := range map[string]string{"KillMode": "mixed", "KillSignal": "SIGTERM", "ExecStart": "/usr/local/bin/agenthost serve", "SuccessExitStatus": "3", "User": "agenthost"} {
		if got := u[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s=%v, want %s", k, got, want)
		}
	}
	b, err := os.ReadFile("../examples/production.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var prod struct {
		ShutdownTimeout   time.Duration `yaml:"shutdown_timeout"`
		DriverStopTimeout time.Duration `yaml:"driver_stop_timeout"`
	}
	if err := yaml.Unmarshal(b, &prod); err != nil {
		t.Fatal(err)
	}
	stop, err := time.ParseDuration(u["TimeoutStopSec"][0])
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	if need := prod.ShutdownTimeout + 2*prod.DriverStopTimeout; prod.ShutdownTimeout == 0 || stop <= need {
		t.Errorf("TimeoutStopSec %v: want more than shutdown_timeout + 2 x driver_stop_timeout = %v", stop, need)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("AGENTHOST_REQUIRE_ALL") == "1" {
			t.Fatal("systemd-analyze not found (AGENTHOST_REQUIRE_ALL=1)")
		}
		t.Skip("systemd-analyze not found")
	}
	// verify wants the unit's executables: point ExecStart at a stand-in.
	dir := t.TempDir()
	bin := filepath.Join(dir, "agenthost")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, _ := os.ReadFile("agenthost.service")
	unitFile := filepath.Join(dir, "agenthost.service")
	os.WriteFile(unitFile, bytes.ReplaceAll(src, []byte("/usr/local/bin/agenthost"), []byte(bin)), 0o644)
	cmd := exec.Command(analyze, "verify", "--man=no", unitFile)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=warning")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	if s := strings.TrimSpace(string(out)); s != "" && strings.Contains(s, "agenthost.service") {
		t.Errorf("systemd-analyze verify warns:\n%s", s)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host/driverhost"
)

// runMainEnv makes the test binary run main1 (the agenthost command) when
// re-executed by the tests below.
const runMainEnv = "AGENTHOST_TEST_RUN_MAIN"

// gateData is one data directory for every server these tests start: the
// admission gate certifies the built-in driver once, and each test keeps
// its store in a directory of its own (store_config dir).
var gateData struct {
	once sync.Once
	dir  string
	err  error
}

func sharedData(t *testing.T) string {
	t.Helper()
	gateData.once.Do(func() {
		gateData.dir, gateData.err = os.MkdirTemp("", "agenthost-shutdown-")
	})
	if gateData.err != nil {
		t.Fatal(gateData.err)
	}
	return gateData.dir
}

// server is an agenthost serve process of a test, in a process group of
// its own.
type server struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	log    *syncBuffer
	done   chan struct{}
	status int
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startServer starts serve with the configuration file body config (data,
// listen and model are added) and waits until it answers /healthz.
func startServer(t *testing.T, config string, script string, env ...string) *server {
	t.Helper()
	scriptPath := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(scriptPath, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	return startServe(t, fmt.Sprintf("model: scripted:%s\n%s", scriptPath, config), env...)
}

// startServe starts serve with the configuration file body config (data
// and listen are added) and waits until it answers /healthz.
func startServe(t *testing.T, config string, env ...string) *server {
	t.Helper()
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	config = fmt.Sprintf("data: %s\nlisten: %s\n%s", sharedData(t), addr, config)
	configPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, addr: addr, log: &syncBuffer{}, done: make(chan struct{}), status: -1}
	s.cmd = exec.Command(exe, "serve", "--config", configPath)
	s.cmd.Env = append(append(os.Environ(), runMainEnv+"=1"), env...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.cmd.Wait()
		s.status = s.cmd.ProcessState.ExitCode()
		close(s.done)
	}()
	t.Cleanup(func() {
		// Whatever happened, leave no process behind.
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		if pid := s.driverPid(); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		<-s.done
		if t.Failed() {
			t.Logf("server log:\n%s", s.log.String())
		}
	})
	deadline := time.Now().Add(3 * time.Minute) // the first start certifies the driver
	for {
		select {
		case <-s.done:
			t.Fatalf("serve exited at start with status %d:\n%s", s.status, s.log.String())
		default:
		}
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not healthy within 3m:\n%s", s.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var driverPidRE = regexp.MustCompile(`store driver ready.* pid=(\d+)`)

// driverPid is the pid of the driver process the server logged, 0 if none.
func (s *server) driverPid() int {
	m := driverPidRE.FindStringSubmatch(s.log.String())
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// submit submits content to thread and returns the run id.
func (s *server) submit(thread, content string) string {
	s.t.Helper()
	body, _ := json.Marshal(map[string]string{"content": content})
	resp, err := http.Post("http://"+s.addr+"/v1/threads/"+thread+"/inputs", "application/json", bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		RunID string `json:"run_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusAccepted {
		s.t.Fatalf("submit to %s: status %d, %v", thread, resp.StatusCode, err)
	}
	return out.RunID
}

// waitRunState waits until the run is in state.
func (s *server) waitRunState(runID, state string) {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + s.addr + "/v1/runs/" + runID)
		if err == nil {
			var run struct {
				State string `json:"state"`
			}
			json.NewDecoder(resp.Body).Decode(&run)
			resp.Body.Close()
			if run.State == state {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("run %s not %s within 1m", runID, state)
}

// wait waits up to limit for the server to exit and returns its status.
func (s *server) wait(limit time.Duration) int {
	s.t.Helper()
	select {
	case <-s.done:
		return s.status
	case <-time.After(limit):
		s.t.Fatalf("serve still running %v later", limit)
		return -1
	}
}

// waitLog waits until the server's log matches re.
func (s *server) waitLog(re string) {
	s.t.Helper()
	r := regexp.MustCompile(re)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if r.MatchString(s.log.String()) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("the log never showed %q", re)
}

func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	st := string(b)
	i := strings.LastIndexByte(st, ')')
	return i < 0 || i+2 >= len(st) || st[i+2] != 'Z'
}

// slowScript answers "hold" slowly and anything else at once.
const slowScript = `{"steps":[{"answer":"echo"}],
 "when":[{"input":"hold","steps":[{"delay":"6s","tool":{"name":"lookup","arguments":"{}"}},{"delay":"1s","answer":"echo"}]}]}`

// A SIGTERM sent to the whole process group (timeout(1), kill -- -PGID,
// systemd) reaches the driver too; the host still drains with its store and
// stops cleanly. The driver is also signalled on its own, as systemd does.
func TestSIGTERMToProcessGroupDrains(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agenthost serve")
	}
	s := startServer(t, "store: badgerstore\nstore_config:\n  dir: "+filepath.Join(t.TempDir(), "badger")+"\nshutdown_timeout: 5m\n", slowScript)
	run := s.submit("pg1", "hold")
	s.waitRunState(run, "active")
	drv := s.driverPid()
	if drv == 0 {
		t.Fatal("no driver pid in the log")
	}
	if err := syscall.Kill(drv, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The run still works for seconds: its driver must have let the
	// signals pass and still be there, the same process, not one
	// relaunched after a signal ended it.
	s.waitLog("ignoring the signal")
	if !processAlive(drv) {
		t.Fatal("the driver ended on the signal while its host drains")
	}
	if code := s.wait(3 * time.Minute); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	log := s.log.String()
	if !strings.Contains(log, "settled=true") {
		t.Fatal("the runtime did not settle")
	}
	if strings.Contains(log, "restarting it") || strings.Count(log, "store driver ready") != 1 {
		t.Fatal("the driver was relaunched during the drain")
	}
}

// A second signal ends a draining server at once, and its driver with it.
func TestSecondSignalEndsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agenthost serve")
	}
	s := startServer(t, "store: badgerstore\nstore_config:\n  dir: "+filepath.Join(t.TempDir(), "badger")+"\nshutdown_timeout: 1h\n",
		`{"steps":[{"delay":"1h","answer":"never"}]}`)
	run := s.submit("sig1", "wait forever")
	s.waitRunState(run, "active")
	drv := s.driverPid()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.waitLog("shutting down")
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := s.wait(time.Minute); code != 128+int(syscall.SIGINT) {
		t.Fatalf("exit status %d, want %d", code, 128+int(syscall.SIGINT))
	}
	deadline := time.Now().Add(30 * time.Second)
	for processAlive(drv) {
		if time.Now().After(deadline) {
			t.Fatalf("driver %d still alive after the host ended", drv)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A store that cannot close (badger retrying its flush into a directory
// that is gone) does not hold the shutdown forever: the driver is killed
// after driver_stop_timeout and the exit status says so.
func TestShutdownBoundedWhenDriverHangs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agenthost serve")
	}
	badger := filepath.Join(t.TempDir(), "badger")
	s := startServer(t, "store: badgerstore\nstore_config:\n  dir: "+badger+"\nshutdown_timeout: 10s\ndriver_stop_timeout: 5s\n",
		`{"steps":[{"answer":"done"}]}`)
	var runs []string
	for i := range 20 {
		runs = append(runs, s.submit(fmt.Sprintf("gone%d", i), strings.Repeat("x", 1000)))
	}
	for _, r := range runs {
		s.waitRunState(r, "completed")
	}
	if err := os.RemoveAll(badger); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := s.wait(3 * time.Minute)
	if code != exitKilled {
		t.Fatalf("exit status %d, want %d (driver killed)", code, exitKilled)
	}
	if !strings.Contains(s.log.String(), "did not close in time and was killed") {
		t.Fatal("the log does not say the driver was killed")
	}
	if drv := s.driverPid(); drv > 0 && processAlive(drv) {
		t.Fatalf("driver %d still alive", drv)
	}
}

func TestServeStatus(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errors.New("bad config"), exitUsage},
		{fmt.Errorf("x: %w", errServeFailed), exitServeFailed},
		{fmt.Errorf("x: %w", errUnsettled), exitUnsettled},
		{errors.Join(fmt.Errorf("x: %w", errUnsettled), fmt.Errorf("y: %w", errStuck)), exitKilled},
		{fmt.Errorf("%w: closing the runtime: %w", errShutdown, errors.New("releasing the lease: store unavailable")), exitShutdownFailed},
		{fmt.Errorf("%w: closing the store driver: %w", errShutdown, errors.New("broken pipe")), exitShutdownFailed},
		{fmt.Errorf("%w: closing the store driver: %w", errShutdown, driverhost.ErrKilled), exitKilled},
		{errors.Join(fmt.Errorf("%w: x", errShutdown), fmt.Errorf("y: %w", errUnsettled)), exitUnsettled},
	} {
		if got := serveStatus(c.err); got != c.want {
			t.Errorf("serveStatus(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

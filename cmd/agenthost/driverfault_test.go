package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// post submits content to thread with a client that gives up after
// limit, and returns the status (0 when no answer came) and body.
func (s *server) post(thread, content string, limit time.Duration) (int, string) {
	body, _ := json.Marshal(map[string]string{"content": content})
	c := &http.Client{Timeout: limit}
	resp, err := c.Post("http://"+s.addr+"/v1/threads/"+thread+"/inputs", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// get returns the status and body of GET path (0 when no answer came).
func (s *server) get(path string) (int, string) {
	c := &http.Client{Timeout: time.Minute}
	resp, err := c.Get("http://" + s.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var relaunchPidRE = regexp.MustCompile(`store driver relaunched.* pid=(\d+)`)

// relaunchedPid is the pid of the last driver process relaunched, 0 if
// none was.
func (s *server) relaunchedPid() int {
	m := relaunchPidRE.FindAllStringSubmatch(s.log.String(), -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

// A driver that is not durable (memstore) whose process dies takes every
// run and message with it: the host must not carry on over an empty store
// (accepting inputs it can never answer, answering from its caches). It
// stops, with its own exit status, and says why.
func TestNonDurableDriverLostStopsServe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agenthost serve")
	}
	s := startServer(t, "store: memstore\n", `{"steps":[{"answer":"done"}]}`)
	run := s.submit("m1", "hello")
	s.waitRunState(run, "completed")
	drv := s.driverPid()
	if drv == 0 {
		t.Fatal("no driver pid in the log")
	}
	if err := syscall.Kill(drv, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-s.done:
		default:
			if code, body := s.post("m1", "after the loss", time.Minute); code == http.StatusAccepted {
				t.Fatalf("an input was accepted after the store lost its data: %s", body)
			}
			if code, body := s.get("/v1/threads/m1/runs"); code == http.StatusOK {
				t.Fatalf("the thread's runs were listed after the store lost them: %s", body)
			}
			if time.Now().After(deadline) {
				t.Fatal("serve still running 2m after its driver, not durable, was killed")
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		break
	}
	if code := s.wait(time.Minute); code != exitStoreLost {
		t.Fatalf("exit status %d, want %d (store lost)", code, exitStoreLost)
	}
	log := s.log.String()
	if !strings.Contains(log, "not durable") || strings.Contains(log, "store driver relaunched") {
		t.Fatal("the log does not say the driver, not durable, was lost, or it says it was relaunched")
	}
}

// A driver that stops answering (SIGSTOP) does not hold submissions for
// the whole stall: the call passes driver_call_timeout, the stall is
// logged and counted, readiness says no, and the driver is killed and
// relaunched on its data; then the server works again.
func TestStalledDriverReplaced(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agenthost serve")
	}
	s := startServer(t, "store: badgerstore\nstore_config:\n  dir: "+filepath.Join(t.TempDir(), "badger")+"\ndriver_call_timeout: 2s\n",
		`{"steps":[{"answer":"done"}]}`)
	before := s.submit("st1", "hello")
	s.waitRunState(before, "completed")
	drv := s.driverPid()
	if drv == 0 {
		t.Fatal("no driver pid in the log")
	}
	if err := syscall.Kill(drv, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, drv)
	t.Cleanup(func() { syscall.Kill(drv, syscall.SIGKILL) })
	// The submission ends: refused while the driver is replaced, or
	// accepted by the replacement; never held until the stall ends (it
	// does not end: only the kill ends it).
	began := time.Now()
	code, body := s.post("st2", "during the stall", 90*time.Second)
	if code != http.StatusServiceUnavailable && code != http.StatusAccepted {
		t.Fatalf("submit during the stall: %d %s after %v, want 503 or 202", code, body, time.Since(began))
	}
	s.waitLog("the store driver stopped answering")
	deadline := time.Now().Add(2 * time.Minute)
	for s.relaunchedPid() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stalled driver was not relaunched")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if processAlive(drv) {
		t.Fatal("the stalled driver process was not killed")
	}
	if c, b := s.get("/readyz"); c != http.StatusOK {
		t.Fatalf("readyz after the relaunch: %d %s", c, b)
	}
	if _, m := s.get("/metrics"); !strings.Contains(m, "agenthost_driver_stalls_total 1\n") {
		t.Fatal("/metrics does not count the stall")
	}
	after := s.submit("st2", "after the stall")
	s.waitRunState(after, "completed")
	s.waitRunState(before, "completed") // durable: still there
}

// While the driver does not answer, readiness says no.
func TestStalledDriverNotReady(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agenthost serve")
	}
	// A long call timeout: the driver stays stopped while /readyz is asked.
	s := startServer(t, "store: badgerstore\nstore_config:\n  dir: "+filepath.Join(t.TempDir(), "badger")+"\ndriver_call_timeout: 5m\n",
		`{"steps":[{"answer":"done"}]}`)
	drv := s.driverPid()
	if err := syscall.Kill(drv, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, drv)
	t.Cleanup(func() { syscall.Kill(drv, syscall.SIGKILL) })
	if c, b := s.get("/readyz"); c != http.StatusServiceUnavailable {
		t.Fatalf("readyz with the driver stopped: %d %s, want 503", c, b)
	}
	if c, _ := s.get("/healthz"); c != http.StatusOK {
		t.Fatalf("healthz with the driver stopped: %d, want 200 (liveness)", c)
	}
	if err := syscall.Kill(drv, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if c, b := s.get("/readyz"); c != http.StatusOK {
		t.Fatalf("readyz with the driver resumed: %d %s", c, b)
	}
}

// waitStopped waits until process pid is stopped (state T): a signal is
// delivered a moment after kill returns.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		st := string(b)
		if i := strings.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) && st[i+2] == 'T' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not stopped after SIGSTOP", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

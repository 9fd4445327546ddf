package soak

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Server runs `agenthost serve` as a child process on a fixed loopback
// address and data directory, and kills and restarts it.
type Server struct {
	Bin     string // the agenthost binary
	Data    string // data directory, kept across restarts
	Addr    string // 127.0.0.1:PORT
	Script  string // scripted model file
	Env     []string
	LogPath string
	// Args are added to the serve command line.
	Args []string
	// Helpers names environment variables that mark the other subprocesses
	// the server starts (e.g. MCPTEST_CALLS of the test MCP server): killed
	// at cleanup, as drivers are.
	Helpers []string
	// StartEnv, if set, adds to Env for the n-th start (from 1).
	StartEnv func(n int) []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	pgids   map[int]bool // process groups of every server started
	drivers map[int]bool // driver and helper pids seen
	starts  int
}

// FreeAddr returns a free loopback address.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Start starts the server and waits until /healthz answers.
func (s *Server) Start(ctx context.Context, c *Client) error {
	s.mu.Lock()
	if s.pgids == nil {
		s.pgids, s.drivers = map[int]bool{}, map[int]bool{}
	}
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	cmd := exec.Command(s.Bin, append([]string{"serve", "--listen", s.Addr, "--data", s.Data, "--model", "scripted:" + s.Script}, s.Args...)...)
	cmd.Env = append(os.Environ(), s.Env...)
	if s.StartEnv != nil {
		cmd.Env = append(cmd.Env, s.StartEnv(s.starts+1)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group (the driver joins it), and killed if we die.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.mu.Unlock()
		return err
	}
	logf.Close()
	s.starts++
	s.pgids[cmd.Process.Pid] = true
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case <-done:
			return fmt.Errorf("agenthost serve exited at start (%s); see %s", cmd.ProcessState, s.LogPath)
		default:
		}
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		ok := c.Healthy(hctx)
		cancel()
		if ok {
			s.mu.Lock()
			for _, c := range children(cmd.Process.Pid) {
				if s.ours(c) {
					s.drivers[c] = true
				}
			}
			s.mu.Unlock()
			return nil
		}
		sleep(ctx, 50*time.Millisecond)
	}
	return fmt.Errorf("agenthost serve not healthy within 60s; see %s", s.LogPath)
}

// Pid returns the server's pid, 0 when none runs.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Running reports whether the server process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Kill kills the server alone with SIGKILL (its driver learns of it by the
// parent-death signal) and waits for it to be gone.
func (s *Server) Kill() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return errors.New("no server")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		return errors.New("server still alive 10s after SIGKILL")
	}
	s.mu.Lock()
	s.cmd = nil
	s.mu.Unlock()
	return nil
}

// children lists the child processes of pid.
func children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// isDriver reports whether pid is a built-in driver subprocess.
func isDriver(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	return err == nil && strings.Contains("\x00"+string(b), "\x00AGENTHOST_SERVE_DRIVER=")
}

// ours reports whether pid is a driver or a helper of the server's.
func (s *Server) ours(pid int) bool {
	if isDriver(pid) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	env := "\x00" + string(b)
	for _, h := range s.Helpers {
		if strings.Contains(env, "\x00"+h+"=") {
			return true
		}
	}
	return false
}

// DriverPid finds the server's driver subprocess.
func (s *Server) DriverPid() (int, error) {
	pid := s.Pid()
	if pid == 0 {
		return 0, errors.New("no server")
	}
	for _, c := range children(pid) {
		if isDriver(c) {
			return c, nil
		}
	}
	return 0, fmt.Errorf("server %d has no driver subprocess", pid)
}

// KillDriver kills the server's driver subprocess alone with SIGKILL. A
// server may be without one for a moment (it launches a new driver on
// the store call after the last one ended): it waits up to 30 s for one.
func (s *Server) KillDriver() (int, error) {
	pid, err := s.DriverPid()
	for deadline := time.Now().Add(30 * time.Second); err != nil && s.Running() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		pid, err = s.DriverPid()
	}
	if err != nil {
		return 0, err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, err
	}
	return pid, nil
}

// NoteDriver records the current driver pid for the final cleanup.
func (s *Server) NoteDriver() {
	if pid, err := s.DriverPid(); err == nil {
		s.mu.Lock()
		s.drivers[pid] = true
		s.mu.Unlock()
	}
}

// Starts is how often the server was started.
func (s *Server) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// Cleanup kills every process the server ever started: the server, every
// driver and helper seen and every one in the servers' process groups
// (they join them), and reports the ones still alive afterwards.
func (s *Server) Cleanup() []int {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	pgids := maps.Clone(s.pgids)
	drivers := maps.Clone(s.drivers)
	s.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	// Drivers the server restarted on its own are found by their process
	// group; a group id reused by an unrelated process is left alone.
	for _, p := range groupMembers(pgids) {
		if s.ours(p) {
			drivers[p] = true
		}
	}
	for p := range drivers {
		if s.ours(p) {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
	var alive []int
	deadline := time.Now().Add(5 * time.Second)
	for p := range drivers {
		for {
			var ws syscall.WaitStatus
			syscall.Wait4(p, &ws, syscall.WNOHANG, nil) // reaps it if we are its subreaper
			if !alive1(p) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if alive1(p) {
			alive = append(alive, p)
		}
	}
	return alive
}

// groupMembers lists the processes whose process group is in groups.
func groupMembers(groups map[int]bool) []int {
	var out []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		st := string(b)
		i := strings.LastIndexByte(st, ')')
		if i < 0 {
			continue
		}
		// After the command: state, ppid, pgrp.
		fs := strings.Fields(st[i+1:])
		if len(fs) < 3 {
			continue
		}
		pg, err1 := strconv.Atoi(fs[2])
		pid, err2 := strconv.Atoi(strings.Fields(st)[0])
		if err1 == nil && err2 == nil && groups[pg] {
			out = append(out, pid)
		}
	}
	return out
}

// alive1 reports whether pid runs (a zombie does not count).
func alive1(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	st := string(b)
	if i := strings.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) {
		return st[i+2] != 'Z'
	}
	return true
}

// Subreaper makes this process the reaper of its orphaned descendants, so
// that a driver whose server was killed is reparented here and can be
// reaped and checked.
func Subreaper() {
	const prSetChildSubreaper = 36
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

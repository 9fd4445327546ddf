package driverhost_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host/driverhost"
)

// parentMain launches the memstore driver, prints its pid, and waits to be
// killed.
func parentMain() int {
	d, err := driverhost.Launch(context.Background(), driverhost.Config{Path: os.Getenv("AGENTHOST_TEST_PARENT"), Logger: quiet, Env: []string{"TMPDIR=" + os.TempDir()}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(d.Pid())
	select {}
}

// TestParentDeath: a driver whose host is killed with SIGKILL ends, by its
// own stop: the direct transport's socket directory is removed.
func TestParentDeath(t *testing.T) {
	needBins(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	tmp := t.TempDir() // the driver makes its socket's directory here
	cmd.Env = append(os.Environ(), "AGENTHOST_TEST_PARENT="+bins["memstore"], "TMPDIR="+tmp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("reading the driver pid: %v", err)
	}
	pid, err := strconv.Atoi(line[:len(line)-1])
	if err != nil || pid <= 0 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("driver pid %q", line)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The driver, now an orphan, must end. Poll; the deadline is only a
	// bound on a hang, not a timing assertion.
	for i := 0; ; i++ {
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			break
		}
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && isZombie(stat) {
			break // ended, waiting for its new parent to reap it
		}
		if i == 600 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("driver %d outlived its host", pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
	left, err := filepath.Glob(filepath.Join(tmp, "agenthost-driver-*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("the driver ended without its stop: %v left behind", left)
	}
}

func isZombie(stat []byte) bool {
	for i := len(stat) - 1; i > 0; i-- {
		if stat[i] == ')' {
			return i+2 < len(stat) && stat[i+2] == 'Z'
		}
	}
	return false
}

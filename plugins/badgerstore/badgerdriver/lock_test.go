package badgerdriver

import (
	"errors"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
)

// TestLockDir: a second holder waits, then fails clearly; once the first
// lets go, the second gets the directory.
func TestLockDir(t *testing.T) {
	dir := t.TempDir()
	first, err := lockDir(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDir(dir, 100*time.Millisecond); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("second lock while held: %v", err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		first.Close()
	}()
	second, err := lockDir(dir, 10*time.Second)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	second.Close()
}

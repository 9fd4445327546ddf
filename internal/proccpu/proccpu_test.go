package proccpu

import (
	"os"
	"testing"
	"time"
)

// The process's own CPU time grows as it works, and a process that does
// not exist is an error.
func TestOf(t *testing.T) {
	before, err := Of(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
	}
	after, err := Of(os.Getpid())
	if err != nil || after <= before {
		t.Fatalf("CPU time %v, then %v (%v)", before, after, err)
	}
	if _, err := Of(0); err == nil {
		t.Fatal("pid 0 read")
	}
}

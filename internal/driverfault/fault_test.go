package driverfault

import (
	"sync"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in    string
		point string
		n     int
		ok    bool
	}{
		{"before-commit@1", BeforeCommit, 1, true},
		{"after-sync-before-reply@12", AfterSyncBeforeReply, 12, true},
		{"after-write-before-sync@3", AfterWriteBeforeSync, 3, true},
		{"", "", 0, false},
		{"before-commit", "", 0, false},
		{"before-commit@0", "", 0, false},
		{"nowhere@1", "", 0, false},
	} {
		p, n, ok := Parse(tc.in)
		if p != tc.point || n != tc.n || ok != tc.ok {
			t.Errorf("Parse(%q) = %q, %d, %v", tc.in, p, n, ok)
		}
	}
}

// TestFault: the Nth hit of the configured point kills, no other hit does.
func TestFault(t *testing.T) {
	t.Setenv(Env, AfterSyncBeforeReply+"@3")
	kills := 0
	fault.once = sync.Once{}
	fault.kill = func() { kills++ }
	defer func() { fault.once, fault.kill, fault.point, fault.n = sync.Once{}, nil, "", 0 }()
	for i := 0; i < 5; i++ {
		Reach(BeforeCommit)
		Reach(AfterSyncBeforeReply)
		if want := map[bool]int{true: 1, false: 0}[i >= 2]; kills != want {
			t.Fatalf("after %d commits: %d kills, want %d", i+1, kills, want)
		}
	}
}

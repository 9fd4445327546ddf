package store_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agenthost/agenthost/host/store"
)

// NewID writes prefix, "_" and the UUID's 32 hex digits, lower case: the
// UUID's text without its dashes, and time-ordered.
func TestNewIDForm(t *testing.T) {
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	long := strings.Repeat("p", 100) // longer than the buffer NewID starts with
	for _, prefix := range []string{"step", "run", "", long} {
		id := store.NewID(prefix)
		rest, ok := strings.CutPrefix(id, prefix+"_")
		if !ok || !hex32.MatchString(rest) {
			t.Fatalf("NewID(%q) = %q: want the prefix, _ and 32 lower-case hex digits", prefix, id)
		}
		u, err := uuid.Parse(rest)
		if err != nil {
			t.Fatalf("NewID(%q) = %q: not a UUID: %v", prefix, id, err)
		}
		if u.Version() != 7 || strings.ReplaceAll(u.String(), "-", "") != rest {
			t.Fatalf("NewID(%q) = %q: want a version 7 UUID's text without dashes", prefix, id)
		}
	}
	prev := store.NewID("step")
	for range 1000 {
		id := store.NewID("step")
		if id <= prev {
			t.Fatalf("NewID not increasing: %q after %q", id, prev)
		}
		prev = id
	}
}

func BenchmarkNewID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = store.NewID("step")
	}
}

package main

import (
	"strings"
	"testing"
	"time"
)

// TestLoggerLevelAndDurations: the level setting filters, and durations
// are written as Go duration strings in both formats.
func TestLoggerLevelAndDurations(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var b strings.Builder
		cfg := defaults()
		cfg.LogFormat, cfg.LogLevel = format, "warn"
		log := newLogger(cfg, &b)
		log.Info("hidden", "took", time.Second)
		log.Warn("shown", "took", 1500*time.Millisecond)
		out := b.String()
		if strings.Contains(out, "hidden") || !strings.Contains(out, "shown") {
			t.Errorf("%s at warn: %s", format, out)
		}
		if !strings.Contains(out, "1.5s") || strings.Contains(out, "1500000000") {
			t.Errorf("%s: duration not a string: %s", format, out)
		}
	}
	for _, bad := range []string{"loud", "info+2", ""} {
		if _, err := parseLevel(bad); err == nil {
			t.Errorf("level %q accepted", bad)
		}
	}
	if l, err := parseLevel("DEBUG"); err != nil || l.String() != "DEBUG" {
		t.Errorf("debug: %v %v", l, err)
	}
}

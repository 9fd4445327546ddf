package conformance

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// A driver process that crashes during a case is reported as a crash
// (rule driver.crash), with the end of its log, not as the failure of
// whatever call found it gone.

// RuleCrash is the rule of a case during which a driver process ended
// without the suite killing it.
const RuleCrash = "driver.crash"

// crashReporter is an instance whose process can end on its own.
type crashReporter interface {
	// crashes is how many of its processes ended without a Kill.
	crashes() int
	// logTail is the end of what its processes logged (their stderr).
	logTail() string
}

// tailLines is how many of a driver's last log lines a crash report shows.
const tailLines = 40

// logTail keeps the last lines a driver's processes logged.
type logTail struct {
	mu    sync.Mutex
	lines []string
}

func (t *logTail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	const maxLine = 500
	if len(line) > maxLine {
		line = line[:maxLine] + "…"
	}
	t.lines = append(t.lines, line)
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
}

func (t *logTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return "(the driver logged nothing)"
	}
	return strings.Join(t.lines, "\n")
}

// tailHandler records every log record in t, and passes on to next what
// next is enabled for.
type tailHandler struct {
	t    *logTail
	next slog.Handler
}

func (h tailHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h tailHandler) Handle(ctx context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String())
	b.WriteByte(' ')
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "logger" {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		}
		return true
	})
	h.t.add(b.String())
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h tailHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return tailHandler{t: h.t, next: h.next.WithAttrs(as)}
}

func (h tailHandler) WithGroup(name string) slog.Handler {
	return tailHandler{t: h.t, next: h.next.WithGroup(name)}
}

// watched is an instance a case used, with its crashes when it began.
type watched struct {
	in     crashReporter
	before int
}

// watchCrashes records that the case uses in.
func (c *C) watchCrashes(in Instance) {
	cr, ok := in.(crashReporter)
	if !ok {
		return
	}
	for _, w := range c.watched {
		if w.in == cr {
			return
		}
	}
	c.watched = append(c.watched, watched{in: cr, before: cr.crashes()})
}

// crashed returns how many driver processes the case used ended on their
// own during it, and the end of their logs.
func (c *C) crashed() (int, string) {
	n := 0
	var tails []string
	for _, w := range c.watched {
		if k := w.in.crashes() - w.before; k > 0 {
			n += k
			tails = append(tails, w.in.logTail())
		}
	}
	return n, strings.Join(tails, "\n---\n")
}

// reportCrash turns the failure of a case during which a driver process
// crashed into a crash: a call that found the process gone failed under
// the rule it was checking, which the driver did not break as such.
func (c *C) reportCrash() {
	if !c.failed || len(c.watched) == 0 {
		return
	}
	n, tail := c.crashed()
	// The process's end may be noticed a moment after the call that
	// failed on it.
	for deadline := time.Now().Add(3 * time.Second); n == 0 && time.Now().Before(deadline) && c.mentionsUnavailable(); {
		time.Sleep(50 * time.Millisecond)
		n, tail = c.crashed()
	}
	if n == 0 {
		return
	}
	c.rules = []string{RuleCrash}
	c.msgs = append([]string{fmt.Sprintf("[%s] the driver process ended during the case without being killed (%d time(s)); the failures after this follow from it. The end of its log:\n%s", RuleCrash, n, tail)}, c.msgs...)
}

func (c *C) mentionsUnavailable() bool {
	for _, m := range c.msgs {
		if strings.Contains(m, "unavailable") {
			return true
		}
	}
	return false
}

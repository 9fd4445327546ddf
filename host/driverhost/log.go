package driverhost

import (
	"context"
	"io"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// hclogToSlog returns an hclog logger whose every line goes to l, keeping
// the level, the logger name and the fields. go-plugin logs the driver's
// stderr through it: a driver that logs hclog JSON (storedriver.Logger)
// arrives with its levels and fields intact.
func hclogToSlog(l *slog.Logger, name string) hclog.Logger {
	il := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: name, Output: io.Discard, Level: hclog.Trace})
	il.RegisterSink(slogSink{l})
	return il
}

type slogSink struct{ l *slog.Logger }

func (s slogSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	lvl := slogLevel(level)
	ctx := context.Background()
	if !s.l.Enabled(ctx, lvl) {
		return
	}
	attrs := make([]slog.Attr, 0, len(args)/2+1)
	attrs = append(attrs, slog.String("logger", name))
	for i := 0; i+1 < len(args); i += 2 {
		key, ok := args[i].(string)
		if !ok {
			key = "arg"
		}
		attrs = append(attrs, slog.Any(key, args[i+1]))
	}
	if len(args)%2 == 1 {
		attrs = append(attrs, slog.Any("extra", args[len(args)-1]))
	}
	s.l.LogAttrs(ctx, lvl, msg, attrs...)
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

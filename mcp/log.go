package mcp

import (
	"context"
	"log/slog"
)

// sdkLogger is log for the MCP SDK: its notes on connections and
// sessions, at info in the SDK, were nearly all of a day's log, so below
// warn they go to debug. Its warnings and errors stay what they are.
func sdkLogger(log *slog.Logger) *slog.Logger {
	if log == nil {
		return nil
	}
	return slog.New(quieter{log.Handler()})
}

type quieter struct{ slog.Handler }

func demoted(l slog.Level) slog.Level {
	if l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

func (q quieter) Enabled(ctx context.Context, l slog.Level) bool {
	return q.Handler.Enabled(ctx, demoted(l))
}

func (q quieter) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demoted(r.Level)
	return q.Handler.Handle(ctx, r)
}

func (q quieter) WithAttrs(attrs []slog.Attr) slog.Handler {
	return quieter{q.Handler.WithAttrs(attrs)}
}
func (q quieter) WithGroup(name string) slog.Handler { return quieter{q.Handler.WithGroup(name)} }

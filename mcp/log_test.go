package mcp

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestSDKLogIsQuiet: the SDK's info lines reach the log only at debug; its
// warnings stay warnings.
func TestSDKLogIsQuiet(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		log := sdkLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))).With("pkg", "sdk")
		log.Info("session connected", "id", 1)
		log.Warn("bad request")
		out := buf.String()
		if level == slog.LevelInfo && (strings.Contains(out, "session connected") || !strings.Contains(out, "level=WARN msg=\"bad request\" pkg=sdk")) {
			t.Fatalf("at info:\n%s\nwant the warning alone", out)
		}
		if level == slog.LevelDebug && !strings.Contains(out, "level=DEBUG msg=\"session connected\" pkg=sdk id=1") {
			t.Fatalf("at debug:\n%s\nwant the SDK's info line at debug", out)
		}
	}
}

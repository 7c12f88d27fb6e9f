package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestJSONLogDurationsAreMilliseconds: a JSON log line gives a duration as
// KEY_ms, a number of milliseconds, not slog's unnamed nanoseconds; the
// text log keeps Go's 1.5s.
func TestJSONLogDurationsAreMilliseconds(t *testing.T) {
	var out bytes.Buffer
	newLogger(&out, "info", "json").Info("run ended", "duration", 1500*time.Microsecond, "calls", 3)
	var line map[string]any
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	if line["duration_ms"] != 1.5 || line["duration"] != nil || line["calls"] != float64(3) {
		t.Errorf("the JSON line: %s", out.String())
	}
	out.Reset()
	newLogger(&out, "info", "text").Info("run ended", "duration", 1500*time.Millisecond)
	if !strings.Contains(out.String(), "duration=1.5s") {
		t.Errorf("the text line: %s", out.String())
	}
}

package launch

import (
	"bytes"
	"testing"
)

// feed writes b to w in chunks of n bytes.
func feed(t *testing.T, w interface{ Write([]byte) (int, error) }, b []byte, n int) {
	t.Helper()
	for len(b) > 0 {
		k := min(n, len(b))
		if got, err := w.Write(b[:k]); err != nil || got != k {
			t.Fatalf("Write() = %d, %v; want %d", got, err, k)
		}
		b = b[k:]
	}
}

func done(r *Report) bool {
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}

func TestReportIsTakenOutOfTheOutputInAnyChunking(t *testing.T) {
	// Output with NUL bytes and pieces of the report's start, as a binary
	// program might print.
	stdoutText := []byte("line\x00\x00sandboxd-ex\x00sandboxd-exit 00\x00")
	stderrText := []byte("warning: \x00")
	for n := 1; n <= 80; n++ {
		var stdout, stderr bytes.Buffer
		r, err := NewReport(&stdout, &stderr)
		if err != nil {
			t.Fatal(err)
		}
		line := ReportLine(r.Token(), 3)
		feed(t, r.Stdout(), append(append([]byte{}, stdoutText...), line...), n)
		if done(r) {
			t.Fatalf("chunks of %d: done after one stream", n)
		}
		feed(t, r.Stderr(), append(append([]byte{}, stderrText...), line...), n)
		if !done(r) {
			t.Fatalf("chunks of %d: not done after both streams", n)
		}
		if code, at := r.Exit(); code != 3 || at.IsZero() {
			t.Fatalf("chunks of %d: Exit() = %d, %v", n, code, at)
		}
		if !bytes.Equal(stdout.Bytes(), stdoutText) || !bytes.Equal(stderr.Bytes(), stderrText) {
			t.Fatalf("chunks of %d: output %q, %q; want %q, %q", n, stdout.Bytes(), stderr.Bytes(), stdoutText, stderrText)
		}
	}
}

func TestOutputCannotForgeAReport(t *testing.T) {
	var stdout, stderr bytes.Buffer
	r, err := NewReport(&stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewReport(&bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	forged := ReportLine(other.Token(), 0)
	malformed := append(append([]byte{}, r.marker...), "9x9\n"...)
	for _, w := range []interface{ Write([]byte) (int, error) }{r.Stdout(), r.Stderr()} {
		feed(t, w, forged, 7)
		feed(t, w, malformed, 5)
	}
	r.Flush()
	if done(r) {
		t.Fatal("a report with another token, or a malformed one, ended the wait")
	}
	want := append(append([]byte{}, forged...), malformed...)
	if !bytes.Equal(stdout.Bytes(), want) || !bytes.Equal(stderr.Bytes(), want) {
		t.Fatalf("output %q, %q; want %q on both", stdout.Bytes(), stderr.Bytes(), want)
	}
}

func TestFlushPassesOnWhatWasHeldBack(t *testing.T) {
	var stdout, stderr bytes.Buffer
	r, err := NewReport(&stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	// The program was killed while the init had written half a report.
	half := ReportLine(r.Token(), 0)[:20]
	feed(t, r.Stdout(), append([]byte("out"), half...), 4)
	if stdout.String() != "out" {
		t.Fatalf("before Flush: %q", stdout.String())
	}
	r.Flush()
	if want := append([]byte("out"), half...); !bytes.Equal(stdout.Bytes(), want) {
		t.Fatalf("after Flush: %q; want %q", stdout.Bytes(), want)
	}
}

func TestStreamsThatDisagreeAreNoReport(t *testing.T) {
	r, err := NewReport(&bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	feed(t, r.Stdout(), ReportLine(r.Token(), 0), 64)
	feed(t, r.Stderr(), ReportLine(r.Token(), 1), 64)
	if done(r) {
		t.Fatal("two different codes ended the wait")
	}
}

func TestDataFrameIsTakenOutInAnyChunking(t *testing.T) {
	data := []byte(`{"reply":{"status":"ok","note":"\u0000sandboxd-exit inside"}}`)
	for n := 1; n <= 90; n++ {
		var stdout, stderr bytes.Buffer
		r, err := NewReport(&stdout, &stderr)
		if err != nil {
			t.Fatal(err)
		}
		stream := append([]byte("out\x00"), DataLine(r.Token(), data)...)
		stream = append(stream, ReportLine(r.Token(), 0)...)
		feed(t, r.Stdout(), stream, n)
		feed(t, r.Stderr(), ReportLine(r.Token(), 0), n)
		if !done(r) {
			t.Fatalf("chunks of %d: no report", n)
		}
		if got := r.Data(); !bytes.Equal(got, data) {
			t.Fatalf("chunks of %d: Data() = %q", n, got)
		}
		if stdout.String() != "out\x00" {
			t.Fatalf("chunks of %d: stdout = %q", n, stdout.String())
		}
	}
}

func TestMalformedDataFrameIsOutput(t *testing.T) {
	var stdout, stderr bytes.Buffer
	r, err := NewReport(&stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	// A length past the bound, and one that is not hex.
	for _, bad := range []string{" dffffffff\n", " dzz000000\n"} {
		feed(t, r.Stdout(), []byte(reportPrefix+r.Token()+bad), 64)
	}
	r.Flush()
	if r.Data() != nil || done(r) || !bytes.Contains(stdout.Bytes(), []byte("zz000000")) {
		t.Fatalf("a malformed frame was taken: data %q, stdout %q", r.Data(), stdout.String())
	}
}

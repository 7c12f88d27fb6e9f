package launch

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"
)

const (
	reportPrefix = "\x00sandboxd-exit "
	tokenBytes   = 16
	codeDigits   = 3 // then a newline
)

// MaxDataBytes bounds the data a report carries.
const MaxDataBytes = 1 << 20

// dataDigits is the width of a data frame's length, in hex.
const dataDigits = 8

// DataLine is the frame of data the init writes on stdout just before a
// session call's exit report: "\x00sandboxd-exit " + token + " d" + the
// length in 8 hex digits + "\n" + data.
func DataLine(token string, data []byte) []byte {
	return append(fmt.Appendf(nil, "%s%s d%0*x\n", reportPrefix, token, dataDigits, len(data)), data...)
}

// ReportLine is the report the init writes for a program that ended with
// code.
func ReportLine(token string, code int) []byte {
	return fmt.Appendf(nil, "%s%s %0*d\n", reportPrefix, token, codeDigits, code)
}

// Report watches a launched program's output for its init's exit report,
// which is how the init tells sandboxd that the program has ended, and
// how, as soon as it has: the backend learns of a container's exit only once
// its runtime has torn the container down, which under gVisor takes tens
// of milliseconds more.
//
// When the program exits, the init kills every other process of the
// container, reaps them, flushes the working directory's file system, and
// then writes the report as the last bytes of both stdout and stderr. The
// report carries a token that sandboxd chose for the task and sent only in
// the launch message, which the program cannot read (the init reads it
// from stdin before the program exists, and is not dumpable, so its memory
// and /proc files are closed to the program); output cannot forge it. On
// each stream, everything before the report is the program's output, and
// nothing follows it.
//
// A report is "\x00sandboxd-exit " + token + " " + three-digit exit code +
// "\n"; the code is 128+N when signal N ended the program.
type Report struct {
	token  string
	marker []byte // the report up to its code

	stdout, stderr *reportWriter
	done           chan struct{} // closed when both streams carried the report
	mu             sync.Mutex
	streams        int // how many streams carried it
	code           int
	data           []byte
	at             time.Time
}

// NewReport makes the report of one task, whose streams go to stdout and
// stderr.
func NewReport(stdout, stderr io.Writer) (*Report, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	r := &Report{token: hex.EncodeToString(b), done: make(chan struct{})}
	r.marker = []byte(reportPrefix + r.token + " ")
	r.stdout = &reportWriter{report: r, w: stdout}
	r.stderr = &reportWriter{report: r, w: stderr}
	return r, nil
}

// Token goes in the task's launch message (Spec.Report).
func (r *Report) Token() string { return r.token }

// Stdout is what the container's stdout is copied to: it passes the
// program's output on and keeps the report out of it.
func (r *Report) Stdout() io.Writer { return r.stdout }

// Stderr is Stdout's counterpart for stderr.
func (r *Report) Stderr() io.Writer { return r.stderr }

// Done is closed once both streams have carried the report: all of the
// program's output has been passed on.
func (r *Report) Done() <-chan struct{} { return r.done }

// Exit returns the reported exit code and when the report was complete.
// Only valid once Done is closed.
func (r *Report) Exit() (code int, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.code, r.at
}

// Data is what the init reported besides the exit code (see DataLine),
// or nil. Only valid once Done is closed.
func (r *Report) Data() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.data
}

// Flush passes on what a stream held back because it could have been the
// start of a report. Call it once the streams have ended without one.
func (r *Report) Flush() {
	r.stdout.flush()
	r.stderr.flush()
}

// carried records that one stream carried the report, with code.
func (r *Report) carried(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.streams++
	if r.streams == 1 {
		r.code = code
	} else if code != r.code {
		// The init writes one code to both; a mismatch is not a report.
		return
	}
	if r.streams == 2 {
		r.at = time.Now()
		close(r.done)
	}
}

// reportWriter is one stream: it holds back a tail that could be the start
// of the report (for a program's output, practically never more than a
// byte or two), and takes the report out.
type reportWriter struct {
	report *Report
	w      io.Writer

	mu      sync.Mutex
	held    []byte
	reached bool // the report went by: what follows is passed on as is
}

func (w *reportWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reached {
		return w.write(p, len(p))
	}
	data := p
	if len(w.held) > 0 {
		data = append(w.held, p...)
		w.held = nil
	}
	marker := w.report.marker
	for {
		i := bytes.Index(data, marker)
		if i < 0 {
			break
		}
		at := i + len(marker)
		if len(data) > at && data[at] == 'd' {
			// A data frame: taken out whole, then the report follows.
			n, frameEnd, ok := dataFrame(data, at)
			if !ok {
				return w.write(data, len(p)) // malformed: output like any other
			}
			if len(data) < frameEnd {
				w.held = append([]byte(nil), data[i:]...)
				return w.write(data[:i], len(p))
			}
			if _, err := w.w.Write(data[:i]); err != nil {
				return 0, err
			}
			w.report.setData(data[frameEnd-n : frameEnd])
			data = data[frameEnd:]
			continue
		}
		end := at + codeDigits + 1
		if len(data) < end {
			w.held = append([]byte(nil), data[i:]...)
			return w.write(data[:i], len(p))
		}
		code, err := strconv.Atoi(string(data[at : end-1]))
		if err == nil && data[end-1] == '\n' && code >= 0 && code <= 255 {
			w.reached = true
			if _, err := w.w.Write(data[:i]); err != nil {
				return 0, err
			}
			w.report.carried(code)
			return w.write(data[end:], len(p))
		}
		// Not a well-formed report: output like any other.
		return w.write(data, len(p))
	}
	keep := heldTail(data, marker)
	if keep > 0 {
		w.held = append([]byte(nil), data[len(data)-keep:]...)
	}
	return w.write(data[:len(data)-keep], len(p))
}

// dataFrame reads the header of a data frame whose 'd' is at data[at]: the
// data's length and where the frame ends. It is false when the header,
// complete, is not one; an incomplete header is held with a frame end past
// data.
func dataFrame(data []byte, at int) (n, end int, ok bool) {
	head := at + 1 + dataDigits + 1
	if len(data) < head {
		return 0, head, true
	}
	v, err := strconv.ParseUint(string(data[at+1:head-1]), 16, 32)
	if err != nil || data[head-1] != '\n' || v > MaxDataBytes {
		return 0, 0, false
	}
	return int(v), head + int(v), true
}

func (r *Report) setData(b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.data = append([]byte(nil), b...)
}

// write passes b on and reports n bytes taken from the caller.
func (w *reportWriter) write(b []byte, n int) (int, error) {
	if len(b) > 0 {
		if _, err := w.w.Write(b); err != nil {
			return 0, err
		}
	}
	return n, nil
}

func (w *reportWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.held) > 0 {
		w.w.Write(w.held)
		w.held = nil
	}
}

// heldTail is the length of the longest tail of data that is a proper
// prefix of marker. The marker starts with a NUL byte, which output rarely
// has.
func heldTail(data, marker []byte) int {
	for i := max(0, len(data)-(len(marker)-1)); i < len(data); i++ {
		if data[i] == marker[0] && bytes.HasPrefix(marker, data[i:]) {
			return len(data) - i
		}
	}
	return 0
}

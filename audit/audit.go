// Package audit keeps sandboxd's tamper-evident audit log: one JSON line
// per decision (a request accepted or refused, and why), per run end and
// per session event. Each line carries its sequence number and the
// SHA-256 of the line before it, so that Verify finds any line edited,
// deleted, inserted or moved. Every line is one write(2) to a file opened
// for appending, with nothing buffered in the process: a daemon killed
// with kill -9 loses at most the line it was writing, which the next
// Open cuts away before it goes on with the chain.
package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/limits"
)

// Kinds of event.
const (
	KindDecision = "decision" // a request accepted or refused
	KindRunEnd   = "run_end"  // a run ended (Status, BundleDigest)
	KindSession  = "session"  // a session was created, changed or ended (Session)
	// KindToolCall is a sandboxed program's call of a tool (Tool,
	// ArgumentsDigest, Status the outcome, Code the gate that refused).
	KindToolCall = "tool_call"
)

// Decisions of a KindDecision event.
const (
	Accepted = "accepted"
	Refused  = "refused"
)

// Event is one entry of the log. Environment variables are named, never
// valued: a line must not carry a secret a caller passed.
type Event struct {
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	// Tenant is who asked, as the edge that took the call knows them;
	// Peer the client's address; Method the API call.
	Tenant string `json:"tenant"`
	Peer   string `json:"peer,omitempty"`
	Method string `json:"method,omitempty"`

	// Decision is Accepted or Refused; Code and Reason say why a request
	// was refused, in the API's terms.
	Decision string `json:"decision,omitempty"`
	Code     string `json:"code,omitempty"`
	Reason   string `json:"reason,omitempty"`

	// RequestDigest is the SHA-256 of the request as the service read it.
	RequestDigest string `json:"request_digest,omitempty"`
	RunID         string `json:"run_id,omitempty"`
	SessionID     string `json:"session_id,omitempty"`
	Image         string `json:"image,omitempty"`
	ImageDigest   string `json:"image_digest,omitempty"`
	Runtime       string `json:"runtime,omitempty"`
	// Limits are the run's, once resolved.
	Limits *limits.Limits `json:"limits,omitempty"`
	// Network is the request's network mode and its rules.
	Network      string   `json:"network,omitempty"`
	NetworkRules []string `json:"network_rules,omitempty"`
	EnvNames     []string `json:"env_names,omitempty"`

	// Status and BundleDigest are how a run ended.
	Status       string `json:"status,omitempty"`
	BundleDigest string `json:"bundle_digest,omitempty"`
	// Session is what happened to a session: created, "network
	// changed", deleted, expired, failed or lost.
	Session string `json:"session,omitempty"`
	// Tool and ArgumentsDigest name a tool call, and DurationMillis
	// times it; its arguments are never written.
	Tool            string  `json:"tool,omitempty"`
	ArgumentsDigest string  `json:"arguments_digest,omitempty"`
	DurationMillis  float64 `json:"duration_ms,omitempty"`
	// RecordedFrom, in a replay, names the bundle whose record answered
	// the tool call: no tool was called.
	RecordedFrom string `json:"recorded_from,omitempty"`
}

// line is an event as written: its place in the chain first.
type line struct {
	Seq  uint64 `json:"seq"`
	Prev string `json:"prev"`
	Event
}

// genesis is the Prev of the first line of a log.
var genesis = hex.EncodeToString(make([]byte, sha256.Size))

// Options bound a log's files.
type Options struct {
	// MaxBytes is the size past which the file is rotated: renamed to
	// FILE.1 (FILE.1 to FILE.2, and so on), and a new FILE goes on with
	// the chain. 0 never rotates.
	MaxBytes int64
	// Keep is how many rotated files are kept; older ones are removed.
	Keep int
}

// Log is an open audit log.
type Log struct {
	path string
	opts Options

	mu   sync.Mutex
	f    *os.File
	size int64
	seq  uint64 // of the last line written
	prev string // the SHA-256 of the last line written
	err  error  // the first write that failed, refused from then on
}

// Open opens the log at path, creating it and its folders (root's alone:
// the log names callers and their requests), and goes on with the chain
// of what it holds, or of the newest rotated file when it is empty. A
// last line cut short (a daemon killed while writing it) is cut away.
func Open(path string, opts Options) (*Log, error) {
	l := &Log{path: path, opts: opts, prev: genesis}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("the audit log's folder: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the audit log: %w", err)
	}
	end, err := l.resume(f)
	if err == nil && end == 0 {
		err = l.resumeFrom(rotated(path, 1))
	}
	if err == nil {
		err = f.Truncate(end)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("the audit log %s: %w", path, err)
	}
	f.Close()
	// Appending: each write lands at the end whatever else holds the file.
	if l.f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return nil, fmt.Errorf("open the audit log: %w", err)
	}
	l.size = end
	return l, nil
}

// resume reads the chain's last whole line in f and returns where it ends.
func (l *Log) resume(f *os.File) (int64, error) {
	var end int64
	r := bufio.NewReader(f)
	for {
		b, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return end, nil // what follows the last newline, if anything, was cut short
		}
		if err != nil {
			return 0, err
		}
		if err := l.follow(bytes.TrimSuffix(b, []byte("\n"))); err != nil {
			return 0, fmt.Errorf("line at byte %d: %w", end, err)
		}
		end += int64(len(b))
	}
}

// resumeFrom goes on with the chain of a rotated file, if there is one.
func (l *Log) resumeFrom(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = l.resume(f)
	return err
}

// follow takes b, a line of the log, as the chain's last.
func (l *Log) follow(b []byte) error {
	var ln line
	if err := json.Unmarshal(b, &ln); err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	l.seq, l.prev = ln.Seq, hex.EncodeToString(sum[:])
	return nil
}

// Record appends e to the log. An error means the line may not be there;
// every later Record fails too, since the chain cannot go on past a gap.
func (l *Log) Record(e Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.UTC()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if l.f == nil {
		return errors.New("the audit log is closed")
	}
	b, err := json.Marshal(line{Seq: l.seq + 1, Prev: l.prev, Event: e})
	if err != nil {
		return err
	}
	if l.opts.MaxBytes > 0 && l.size > 0 && l.size+int64(len(b))+1 > l.opts.MaxBytes {
		if err := l.rotate(); err != nil {
			l.err = fmt.Errorf("rotate the audit log: %w", err)
			return l.err
		}
	}
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		l.err = fmt.Errorf("write the audit log: %w", err)
		return l.err
	}
	sum := sha256.Sum256(b)
	l.seq, l.prev = l.seq+1, hex.EncodeToString(sum[:])
	l.size += int64(len(b)) + 1
	return nil
}

// rotate moves the file to FILE.1, and older ones up, and starts a new one.
func (l *Log) rotate() error {
	if err := l.f.Sync(); err != nil {
		return err
	}
	if err := l.f.Close(); err != nil {
		return err
	}
	l.f = nil
	keep := max(l.opts.Keep, 1)
	_ = os.Remove(rotated(l.path, keep))
	for i := keep - 1; i >= 1; i-- {
		if err := os.Rename(rotated(l.path, i), rotated(l.path, i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Rename(l.path, rotated(l.path, 1)); err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	l.f, l.size = f, 0
	return nil
}

// Close flushes the log to disk and closes it.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := errors.Join(l.f.Sync(), l.f.Close())
	l.f = nil
	return err
}

// rotated is the name of the n-th rotated file of path.
func rotated(path string, n int) string { return fmt.Sprintf("%s.%d", path, n) }

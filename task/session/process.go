package session

import (
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/task/run"
)

// ProcessRequest starts a background process in a session: a command (argv,
// or a line for /bin/sh -c), its own variables over the session's, and its
// working directory (the session's when empty).
type ProcessRequest struct {
	SessionID string
	Command   run.Command
	Env       map[string]string
	Workdir   string
	// Terminal, when set, gives the process a terminal (see Terminal).
	Terminal *Terminal
}

// Terminal is a process's pseudo-terminal: its size (24 by 80 when
// zero) and TERM (xterm-256color when empty). The process's output then
// all comes on stdout, and the end of its stdin is a Ctrl-D.
type Terminal struct {
	Rows, Cols uint16
	Term       string
}

// ProcessState is where a background process is in its life.
type ProcessState string

// The states of a background process.
const (
	Running ProcessState = "RUNNING"
	Exited  ProcessState = "EXITED"
	// Killed says it ended with its session, or was never seen to exit.
	Killed ProcessState = "KILLED"
)

// ProcessInfo describes a background process.
type ProcessInfo struct {
	ID        string       `json:"id"`
	SessionID string       `json:"session_id"`
	Argv      []string     `json:"argv"`
	Workdir   string       `json:"workdir"`
	Terminal  bool         `json:"terminal,omitempty"`
	State     ProcessState `json:"state"`
	// ExitCode is a shell's (128+N for signal N), once it ended.
	ExitCode  int       `json:"exit_code"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// StdoutBytes and StderrBytes count what it wrote, kept or not.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
}

// Offsets are positions in a process's two streams, counted from the
// first byte it wrote.
type Offsets struct{ Stdout, Stderr int64 }

// Output is a read of a process's streams from offsets: the bytes from
// Start, up to Next; when the log no longer held the bytes asked for,
// Start is past them, and the bytes between were dropped.
type Output struct {
	Stdout, Stderr []byte
	Start, Next    Offsets
	Info           ProcessInfo
}

// Log keeps the last bytes of a stream, up to its cap, and counts all of
// them, so that a reader who comes back with an offset gets what came
// since, or learns what it missed. It is safe for one writer and many
// readers.
type Log struct {
	mu    sync.Mutex
	max   int
	buf   []byte // the kept bytes, the last of those written
	total int64  // bytes written
	wake  chan struct{}
}

// NewLog keeps the last max bytes; wake, when not nil, gets a token at
// every write (it must be buffered).
func NewLog(max int, wake chan struct{}) *Log {
	return &Log{max: max, wake: wake}
}

// Write keeps p, dropping the oldest bytes past the cap.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.total += int64(len(p))
	if len(p) >= l.max {
		l.buf = append(l.buf[:0], p[len(p)-l.max:]...)
	} else {
		if over := len(l.buf) + len(p) - l.max; over > 0 {
			l.buf = append(l.buf[:0], l.buf[over:]...)
		}
		l.buf = append(l.buf, p...)
	}
	l.mu.Unlock()
	if l.wake != nil {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// Read returns at most limit bytes from offset from (or from the first
// byte kept, when from is older), where they start, and the offset after
// them.
func (l *Log) Read(from int64, limit int) (data []byte, start, next int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := l.total - int64(len(l.buf))
	start = min(max(from, first), l.total)
	data = l.buf[start-first:]
	if len(data) > limit {
		data = data[:limit]
	}
	return append([]byte(nil), data...), start, start + int64(len(data))
}

// Total is how many bytes were written.
func (l *Log) Total() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Port is a port of a session opened to sandboxd's inbound proxy: HTTP
// and WebSocket reach what listens on it in the session at URL, which
// carries Token, a secret of this session and port alone.
type Port struct {
	SessionID string    `json:"session_id"`
	Port      int       `json:"port"`
	URL       string    `json:"url"`
	Token     string    `json:"token"`
	OpenedAt  time.Time `json:"opened_at"`
}

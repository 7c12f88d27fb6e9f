package sandboxinit

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
)

func TestRunRefusesAnotherCommandLine(t *testing.T) {
	for _, args := range [][]string{nil, {"--wait", "extra"}, {"--run"}} {
		if code := Run(args); code != exitUsage {
			t.Errorf("Run(%q) = %d, want %d", args, code, exitUsage)
		}
	}
}

func TestExitCodeIsTheShells(t *testing.T) {
	for _, tt := range []struct {
		st   unix.WaitStatus
		want int
	}{
		{0, 0},
		{3 << 8, 3},
		{unix.WaitStatus(unix.SIGKILL), 137},
		{unix.WaitStatus(unix.SIGTERM), 143},
	} {
		if got := exitCode(tt.st); got != tt.want {
			t.Errorf("exitCode(%#x) = %d, want %d", uint32(tt.st), got, tt.want)
		}
	}
}

func TestSetEnvKeepsValuesWithEquals(t *testing.T) {
	saved := os.Environ()
	t.Cleanup(func() { setEnv(saved) })
	if err := setEnv([]string{"PATH=/usr/bin", "EQ=a=b", "EMPTY=", "NOEQUALS"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(os.Environ(), " "); got != "PATH=/usr/bin EQ=a=b EMPTY=" {
		t.Fatalf("environment %q", got)
	}
}

func TestLookPathLeavesPathsToTheKernel(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prog"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if got, err := lookPath("prog"); err != nil || got != filepath.Join(dir, "prog") {
		t.Errorf("lookPath(prog) = %q, %v", got, err)
	}
	if got, err := lookPath("./not/checked"); err != nil || got != "./not/checked" {
		t.Errorf("lookPath of a path = %q, %v; want it as given", got, err)
	}
	if _, err := lookPath("missing"); err == nil {
		t.Error("lookPath(missing) succeeded")
	}
}

// TestLineBufferKeepsOneBoundedLine: a kernel's reply is one line of at
// most launch.MaxDataBytes; a longer one is dropped, not cut.
func TestLineBufferKeepsOneBoundedLine(t *testing.T) {
	var l lineBuffer
	l.Write([]byte(`{"a":`))
	if l.complete() || l.line() != nil {
		t.Fatal("half a line counted as a reply")
	}
	l.Write([]byte("1}\n"))
	if got := string(l.line()); got != `{"a":1}` {
		t.Fatalf("line() = %q", got)
	}
	l.reset()
	l.Write(bytes.Repeat([]byte("x"), launch.MaxDataBytes))
	l.Write([]byte("y\n"))
	if l.line() != nil {
		t.Fatal("a reply past MaxDataBytes was kept")
	}
	l.reset()
	l.Write([]byte("ok\n"))
	if string(l.line()) != "ok" {
		t.Fatal("reset did not clear an oversized reply")
	}
}

// TestCallPipesCarryInputAndOutput writes a call's stdin through the
// init's end without blocking, and copies what a program wrote to its
// stdout until the stream's end.
func TestCallPipesCarryInputAndOutput(t *testing.T) {
	var stdout, stderr bytes.Buffer
	in, out, errOut, closeAll, err := callPipes(&stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if err := in.feed([]byte("input"), true); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := in.child.Read(got); err != nil || string(got) != "input" {
		t.Fatalf("the program read %q, %v", got, err)
	}
	out.child.Write([]byte("printed"))
	out.closeChild()
	buf := make([]byte, 64)
	for deadline := time.Now().Add(5 * time.Second); out.parent != nil && time.Now().Before(deadline); {
		out.copyAvailable(buf)
	}
	if stdout.String() != "printed" || out.parent != nil {
		t.Fatalf("copied %q (pipe open: %v)", stdout.String(), out.parent != nil)
	}
	if errOut.child == nil || stderr.Len() != 0 {
		t.Fatal("stderr's pipe")
	}
}

// TestReaperPassesOnTheStatusOfWatchedChildren starts real processes: the
// reaper hands each watched one's status on, and says so on its notify
// file.
func TestReaperPassesOnTheStatusOfWatchedChildren(t *testing.T) {
	sh, err := lookPath("sh")
	if err != nil {
		t.Skipf("no sh: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	rp := &reaper{waiting: map[int]chan unix.WaitStatus{}, notify: w}
	attr := &os.ProcAttr{Files: []*os.File{nil, nil, nil}}
	_, ok, err := rp.start(sh, []string{"sh", "-c", "exit 0"}, attr)
	if err != nil {
		t.Fatal(err)
	}
	_, bad, err := rp.start(sh, []string{"sh", "-c", "exit 7"}, attr)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]bool{}
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case st := <-ok:
			got[exitCode(st)] = true
		case st := <-bad:
			got[exitCode(st)] = true
		case <-deadline:
			t.Fatalf("statuses so far %v", got)
		case <-time.After(10 * time.Millisecond):
			rp.reap()
		}
	}
	if !got[0] || !got[7] {
		t.Fatalf("statuses %v, want 0 and 7", got)
	}
	event := make([]byte, 1)
	if _, err := r.Read(event); err != nil || event[0] != eventExit {
		t.Fatalf("notify %v %v", event, err)
	}
}

// signalWriter keeps what is written, and says so on wrote.
type signalWriter struct {
	mu    sync.Mutex
	b     []byte
	wrote chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.b = append(w.b, p...)
	w.mu.Unlock()
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

// TestSessionRelaysACallsToolChannel runs a call's loop with a tool
// channel: the program's request goes out to the requests writer, the
// answer that comes for it goes in, and an answer left from an earlier
// call is dropped rather than given to this program.
func TestSessionRelaysACallsToolChannel(t *testing.T) {
	events, notify, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	defer notify.Close()
	requests := &signalWriter{wrote: make(chan struct{}, 1)}
	s := &session{events: events, notify: notify, tools: true, requests: requests,
		reaper: &reaper{waiting: map[int]chan unix.WaitStatus{}, notify: notify}}
	ch, err := s.toolChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.closeParent()
	program := ch.child
	defer program.Close()
	s.answers = []byte(`{"id":7,"result":"stale"}` + "\n")

	go func() {
		program.Write([]byte(`{"id":1,"op":"list"}` + "\n"))
		<-requests.wrote
		s.answersMu.Lock()
		s.answers = append(s.answers, `{"id":1,"tools":[]}`+"\n"...)
		s.answersMu.Unlock()
		notify.Write([]byte{eventAnswer})
	}()
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(program).ReadString('\n')
		got <- line
	}()
	var answer string
	timeout := time.After(10 * time.Second)
	s.pump(launch.Spec{}, nil, nil, ch, func() bool {
		select {
		case answer = <-got:
			return true
		case <-timeout:
			return true
		default:
			return false
		}
	}, func(bool) {}, nil)
	if answer != `{"id":1,"tools":[]}`+"\n" {
		t.Fatalf("the program read %q, want its own answer and not the stale one", answer)
	}
	requests.mu.Lock()
	defer requests.mu.Unlock()
	if string(requests.b) != `{"id":1,"op":"list"}`+"\n" {
		t.Fatalf("relayed %q", requests.b)
	}
}

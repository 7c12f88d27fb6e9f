// Package runtimetest is the contract suite of runtime.Runtime: what every
// backend, the fake included, must do with the containers it starts,
// whatever it runs on. It checks the contract through the interface only:
// Info and Image, a refused spec, output and stdin and exit codes, the
// spec's environment, working folder and user, Kill, Remove, Reap by
// labels, a cancelled start, (for a Preparer) Prepare and Launch, and (for
// a SessionHost) a session's calls, their timeouts and interruptions, and
// its end with its container, and a task's compile step. The isolation of the containers and a
// session's Python kernel are the engine suite's
// (conformance), which runs real programs in the sandbox images.
//
// Programs are steps of internal/testprog: real backends run it as a static
// binary that the suite binds into each container, the fake runs the same
// code in its process.
package runtimetest

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/runtime"
)

// Target is a Runtime under test.
type Target struct {
	Runtime runtime.Runtime
	// Image names an image the Runtime has.
	Image string
	// OCIRuntime is what every spec asks for ("" for the default).
	OCIRuntime string
	// Program is the host path of cmd/testprog, bound into each container
	// at ProgramTarget; empty for a runtime that runs it in-process.
	Program string
	// Leftovers lists the backend's containers that carry all of labels,
	// running or not.
	Leftovers func(ctx context.Context, labels map[string]string) ([]string, error)
	// Checkpoints says the target's sessions can be checkpointed and
	// restored; without it a checkpoint must be refused.
	Checkpoints bool
}

// ProgramTarget is where the program is in a container.
const ProgramTarget = "/.sandboxd/testprog"

// Run runs the contract suite on target.
func Run(t *testing.T, target Target) {
	s := &suite{target: target, instance: fmt.Sprintf("contract-%d", time.Now().UnixNano()%1e9)}
	t.Cleanup(func() {
		if _, err := target.Runtime.Reap(context.Background(), map[string]string{labelSuite: s.instance}); err != nil {
			t.Errorf("reap: %v", err)
		}
	})
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *suite)
	}{
		{"InfoNamesTheRuntimes", testInfo},
		{"ImageByNameAndByID", testImage},
		{"InvalidSpecIsRefusedAndCreatesNothing", testInvalidSpec},
		{"OutputStdinAndExitCode", testOutputStdinExit},
		{"SpecReachesTheProgram", testSpecReachesProgram},
		{"CompileStepRunsFirst", testCompileStep},
		{"ToolChannelBesideTheStreams", testToolChannel},
		{"ExitBySignal", testSignal},
		{"KillEndsTheProgram", testKill},
		{"RemoveKillsAndIsIdempotent", testRemove},
		{"CancelledStartLeavesNothing", testCancelledStart},
		{"PrepareThenLaunch", testPrepareLaunch},
		{"SessionCallsOneAfterAnother", testSessionCalls},
		{"SessionCallTimeoutAndInterrupt", testSessionInterrupts},
		{"SessionCallsHaveTheirOwnTools", testSessionTools},
		{"SessionEndsWithItsContainer", testSessionEnds},
		{"SessionProcessesBesideCalls", testSessionProcesses},
		{"SessionProcessTerminal", testSessionTerminal},
		{"SessionPortThroughTheInit", testSessionPort},
		{"SessionCheckpointAndRestores", testSessionCheckpoint},
		{"ReapTakesOnlyTheLabelled", testReap},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, s) })
	}
}

const (
	labelSuite = "io.sandboxd.contract"
	labelCase  = "io.sandboxd.contract.case"
)

type suite struct {
	target   Target
	instance string
	imageID  string
	n        int
	mu       sync.Mutex
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// spec is a container of the target running the program's steps, with
// its output going to out and errOut.
func (s *suite) spec(t *testing.T, out, errOut io.Writer, steps ...string) runtime.Spec {
	t.Helper()
	if s.imageID == "" {
		img, err := s.target.Runtime.Image(ctx(t), s.target.Image)
		if err != nil {
			t.Fatalf("Image(%s) = %v", s.target.Image, err)
		}
		s.imageID = img.ID
	}
	s.mu.Lock()
	s.n++
	id := fmt.Sprintf("%s-%d", s.instance, s.n)
	s.mu.Unlock()
	spec := runtime.Spec{
		ID: id, Image: s.imageID, Runtime: s.target.OCIRuntime,
		Argv:       append([]string{ProgramTarget}, steps...),
		Env:        []string{"PATH=/usr/bin:/bin", "GREETING=hello"},
		WorkingDir: "/tmp", User: "65534:65534", Hostname: "contract",
		Labels:    map[string]string{labelSuite: s.instance, labelCase: id},
		Tmpfs:     []runtime.Tmpfs{{Target: "/tmp", SizeBytes: 1 << 20}},
		Resources: runtime.Resources{MemoryBytes: 64 << 20, CPUMillis: 500, Pids: 32, NoFile: 64},
		Stdout:    out, Stderr: errOut,
	}
	if s.target.Program != "" {
		spec.Mounts = []runtime.Mount{{Source: s.target.Program, Target: ProgramTarget, ReadOnly: true}}
	}
	return spec
}

// start starts spec and removes its container when the test ends.
func (s *suite) start(t *testing.T, spec runtime.Spec) runtime.Container {
	t.Helper()
	c, err := s.target.Runtime.Start(ctx(t), spec)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	t.Cleanup(func() { c.Remove(context.Background()) })
	return c
}

// wait waits for c and checks the exit's times.
func wait(t *testing.T, c runtime.Container) runtime.Exit {
	t.Helper()
	exit, err := c.Wait(ctx(t))
	if err != nil {
		t.Fatalf("Wait() = %v", err)
	}
	if exit.StartedAt.IsZero() || exit.FinishedAt.Before(exit.StartedAt) {
		t.Errorf("exit started %v and finished %v", exit.StartedAt, exit.FinishedAt)
	}
	return exit
}

// assertGone checks that no container of the case labels is left.
func (s *suite) assertGone(t *testing.T, labels map[string]string) {
	t.Helper()
	var left []string
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left, err = s.target.Leftovers(ctx(t), labels)
		if err != nil || len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("leftovers: %v", err)
	}
	if len(left) > 0 {
		t.Fatalf("containers left: %v", left)
	}
}

func testInfo(t *testing.T, s *suite) {
	info, err := s.target.Runtime.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(info.Runtimes))
	for _, r := range info.Runtimes {
		names = append(names, r.Name)
	}
	if info.Backend == "" || info.Version == "" || !slices.Contains(names, info.DefaultRuntime) {
		t.Fatalf("Info() = %+v: want a backend, a version and a default among the runtimes", info)
	}
	if want := s.target.OCIRuntime; want != "" && !slices.Contains(names, want) {
		t.Fatalf("Info() runtimes %q lack %s", names, want)
	}
}

func testImage(t *testing.T, s *suite) {
	rt := s.target.Runtime
	img, err := rt.Image(ctx(t), s.target.Image)
	if err != nil || !strings.HasPrefix(img.ID, "sha256:") {
		t.Fatalf("Image(%s) = %+v, %v; want its sha256 ID", s.target.Image, img, err)
	}
	byID, err := rt.Image(ctx(t), img.ID)
	if err != nil || byID.ID != img.ID {
		t.Fatalf("Image(%s) = %+v, %v; want the same image by its ID", img.ID, byID, err)
	}
	if _, err := rt.Image(ctx(t), "sandboxd/no-such-image"); !errdefs.IsNotFound(err) {
		t.Fatalf("Image(no such) = %v, want not found", err)
	}
}

func testInvalidSpec(t *testing.T, s *suite) {
	for name, mutate := range map[string]func(*runtime.Spec){
		"root user":         func(sp *runtime.Spec) { sp.User = "0:0" },
		"no memory limit":   func(sp *runtime.Spec) { sp.Resources.MemoryBytes = 0 },
		"relative workdir":  func(sp *runtime.Spec) { sp.WorkingDir = "tmp" },
		"no output writers": func(sp *runtime.Spec) { sp.Stdout = nil },
		"argv not UTF-8":    func(sp *runtime.Spec) { sp.Argv = append(sp.Argv, "\xff") },
		"unknown pre-started language": func(sp *runtime.Spec) {
			sp.Prestart = &runtime.Prestart{Language: "cobol", Interpreter: "cobc"}
		},
	} {
		t.Run(name, func(t *testing.T) {
			spec := s.spec(t, io.Discard, io.Discard, "exit", "0")
			mutate(&spec)
			if c, err := s.target.Runtime.Start(ctx(t), spec); !errdefs.IsInvalidArgument(err) {
				if c != nil {
					c.Remove(context.Background())
				}
				t.Fatalf("Start() = %v, want invalid argument", err)
			}
			s.assertGone(t, map[string]string{labelCase: spec.ID})
		})
	}
}

func testOutputStdinExit(t *testing.T, s *suite) {
	var out, errOut testutil.Buffer
	spec := s.spec(t, &out, &errOut, "out", "to stdout\n", "err", "to stderr\n", "cat", "out", "\u00e9\u00ff end", "exit", "3")
	stdin := bytes.Repeat([]byte("stdin line\n"), 10000)
	spec.Stdin = bytes.NewReader(stdin)
	c := s.start(t, spec)
	exit := wait(t, c)
	if exit.Code != 3 {
		t.Errorf("exit code %d, want 3", exit.Code)
	}
	if want := "to stdout\n" + string(stdin) + "\u00e9\u00ff end"; out.String() != want {
		t.Errorf("stdout is %d bytes, want the %d written, stdin included", len(out.String()), len(want))
	}
	if errOut.String() != "to stderr\n" {
		t.Errorf("stderr = %q", errOut.String())
	}
	again, err := c.Wait(ctx(t))
	if err != nil || again.Code != exit.Code {
		t.Errorf("a second Wait() = %+v, %v; want the same exit", again, err)
	}
}

func testSpecReachesProgram(t *testing.T, s *suite) {
	var out testutil.Buffer
	c := s.start(t, s.spec(t, &out, io.Discard, "env", "GREETING", "pwd", "id"))
	if exit := wait(t, c); exit.Code != 0 {
		t.Fatalf("exit code %d", exit.Code)
	}
	if want := "hello\n/tmp\n65534:65534\n"; out.String() != want {
		t.Fatalf("stdout %q, want %q: the spec's environment, working folder and user", out.String(), want)
	}
}

// echoTools answers each line of a tool channel with "ok " and the line,
// and says when its channel ended.
// echoTools answers each request line with prefix ("ok " when empty) and
// the line.
type echoTools struct {
	prefix string
	mu     sync.Mutex
	lines  []string
	ended  chan struct{}
}

func (e *echoTools) Serve(requests io.Reader, answers io.Writer) {
	defer close(e.ended)
	sc := bufio.NewScanner(requests)
	for sc.Scan() {
		e.mu.Lock()
		e.lines = append(e.lines, sc.Text())
		e.mu.Unlock()
		answers.Write([]byte(cmp.Or(e.prefix, "ok ") + sc.Text() + "\n"))
	}
}

// testToolChannel is a program that calls tools while its stdin, stdout
// and stderr go on as without: each request reaches Serve, each answer
// the program, and the channel ends with the program.
func testToolChannel(t *testing.T, s *suite) {
	var out, errOut testutil.Buffer
	tools := &echoTools{ended: make(chan struct{})}
	spec := s.spec(t, &out, &errOut, "out", "first\n", "call", `{"n":1}`, "err", "to stderr\n", "cat", "call", `{"n":2}`, "exit", "4")
	stdin := bytes.Repeat([]byte("stdin line\n"), 20000)
	spec.Stdin, spec.Tools = bytes.NewReader(stdin), tools
	exit := wait(t, s.start(t, spec))
	if exit.Code != 4 {
		t.Errorf("exit code %d, want 4", exit.Code)
	}
	if want := "first\nok {\"n\":1}\n" + string(stdin) + "ok {\"n\":2}\n"; out.String() != want {
		t.Errorf("stdout is %d bytes %.80q..., want %d: the answers between the output and stdin", len(out.String()), out.String(), len(want))
	}
	if errOut.String() != "to stderr\n" {
		t.Errorf("stderr = %q", errOut.String())
	}
	select {
	case <-tools.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the program ended")
	}
	if want := []string{`{"n":1}`, `{"n":2}`}; !slices.Equal(tools.lines, want) {
		t.Errorf("Serve read %q, want %q", tools.lines, want)
	}
}

// testCompileStep is a compiled language's task: the compile step runs
// first, as the program's user, with no stdin and its output on stderr;
// when it fails the program never runs, and the exit says so.
func testCompileStep(t *testing.T, s *suite) {
	for _, tc := range []struct {
		name           string
		compile        []string
		code           int
		failed         bool
		stdout, stderr string
	}{
		{"Builds", []string{"out", "built as ", "id", "cat"}, 0, false, "ran\ninput", "built as 65534:65534\n"},
		{"Fails", []string{"err", "main.c:1: error\n", "exit", "1"}, 1, true, "", "main.c:1: error\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut testutil.Buffer
			spec := s.spec(t, &out, &errOut, "out", "ran\n", "cat")
			spec.Compile = append([]string{ProgramTarget}, tc.compile...)
			spec.Stdin = strings.NewReader("input")
			exit := wait(t, s.start(t, spec))
			if exit.Code != tc.code || exit.CompileFailed != tc.failed {
				t.Errorf("exit code %d, compile failed %v; want %d, %v", exit.Code, exit.CompileFailed, tc.code, tc.failed)
			}
			if out.String() != tc.stdout || errOut.String() != tc.stderr {
				t.Errorf("stdout %q, stderr %q; want %q, %q", out.String(), errOut.String(), tc.stdout, tc.stderr)
			}
		})
	}
}

func testSignal(t *testing.T, s *suite) {
	c := s.start(t, s.spec(t, io.Discard, io.Discard, "signal", "15"))
	if exit := wait(t, c); exit.Code != 128+15 {
		t.Fatalf("exit code %d, want %d for SIGTERM", exit.Code, 128+15)
	}
}

func testKill(t *testing.T, s *suite) {
	var out testutil.Buffer
	c := s.start(t, s.spec(t, &out, io.Discard, "out", "ready\n", "block"))
	for deadline := time.Now().Add(30 * time.Second); out.String() == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the program never said ready")
		}
	}
	if err := c.Kill(ctx(t)); err != nil {
		t.Fatalf("Kill() = %v", err)
	}
	killed := time.Now()
	exit := wait(t, c)
	if exit.Code != 137 {
		t.Errorf("exit code %d, want 137 after a kill", exit.Code)
	}
	if took := time.Since(killed); took > 5*time.Second {
		t.Errorf("Wait returned %v after the kill", took)
	}
	if err := c.Kill(ctx(t)); err != nil {
		t.Errorf("Kill() of an exited container = %v", err)
	}
}

func testRemove(t *testing.T, s *suite) {
	spec := s.spec(t, io.Discard, io.Discard, "block")
	c, err := s.target.Runtime.Start(ctx(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx(t)); err != nil {
		t.Fatalf("Remove() of a running container = %v", err)
	}
	s.assertGone(t, map[string]string{labelCase: spec.ID})
	if err := c.Remove(ctx(t)); err != nil {
		t.Fatalf("a second Remove() = %v", err)
	}
}

func testCancelledStart(t *testing.T, s *suite) {
	spec := s.spec(t, io.Discard, io.Discard, "exit", "0")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	c, err := s.target.Runtime.Start(cancelled, spec)
	if !errors.Is(err, context.Canceled) {
		if c != nil {
			c.Remove(context.Background())
		}
		t.Fatalf("Start() with a cancelled context = %v, want context.Canceled", err)
	}
	s.assertGone(t, map[string]string{labelCase: spec.ID})
}

func testPrepareLaunch(t *testing.T, s *suite) {
	p, ok := s.target.Runtime.(runtime.Preparer)
	if !ok {
		t.Skip("the runtime cannot prepare containers")
	}
	var out testutil.Buffer
	spec := s.spec(t, nil, nil)
	spec.Argv = nil
	prepared, err := p.Prepare(ctx(t), spec)
	if err != nil {
		t.Fatalf("Prepare() = %v", err)
	}
	t.Cleanup(func() { prepared.Remove(context.Background()) })
	task := s.spec(t, &out, io.Discard, "cat", "pwd").Task()
	task.WorkingDir = "/"
	task.Stdin = strings.NewReader("launched\n")
	task.Resources.MemoryBytes *= 2
	if err := prepared.Launch(ctx(t), task); err != nil {
		t.Fatalf("Launch() = %v", err)
	}
	if exit := wait(t, prepared); exit.Code != 0 || out.String() != "launched\n/\n" {
		t.Fatalf("exit %d, stdout %q; want 0 and the launched task's output", exit.Code, out.String())
	}
	if err := prepared.Launch(ctx(t), task); err == nil {
		t.Fatal("a second Launch() succeeded: a container must serve one task")
	}
	// No interpreter waits in it for a task that asks to run in one.
	plain, err := p.Prepare(ctx(t), idleSpec(s, t))
	if err != nil {
		t.Fatalf("Prepare() = %v", err)
	}
	t.Cleanup(func() { plain.Remove(context.Background()) })
	task.Prestarted = true
	if err := plain.Launch(ctx(t), task); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("Launch() of a pre-started task where none was pre-started = %v, want failed precondition", err)
	}
	if err := prepared.Remove(ctx(t)); err != nil {
		t.Fatal(err)
	}
	s.assertGone(t, map[string]string{labelCase: spec.ID})

	// A prepared container that never gets its task is removed whole.
	idle := s.spec(t, nil, nil)
	idle.Argv = nil
	unused, err := p.Prepare(ctx(t), idle)
	if err != nil {
		t.Fatalf("Prepare() = %v", err)
	}
	if err := unused.Remove(ctx(t)); err != nil {
		t.Fatalf("Remove() of an idle prepared container = %v", err)
	}
	s.assertGone(t, map[string]string{labelCase: idle.ID})
}

// idleSpec is a container to prepare, with no task.
func idleSpec(s *suite, t *testing.T) runtime.Spec {
	spec := s.spec(t, nil, nil)
	spec.Argv = nil
	return spec
}

func testReap(t *testing.T, s *suite) {
	group := fmt.Sprintf("%s-reap", s.instance)
	var keep runtime.Container
	for i := range 3 {
		spec := s.spec(t, io.Discard, io.Discard, "block")
		if i < 2 {
			spec.Labels["io.sandboxd.contract.group"] = group
		}
		c := s.start(t, spec)
		if i == 2 {
			keep = c
		}
	}
	n, err := s.target.Runtime.Reap(ctx(t), map[string]string{"io.sandboxd.contract.group": group})
	if err != nil || n != 2 {
		t.Fatalf("Reap() = %d, %v; want the 2 labelled", n, err)
	}
	s.assertGone(t, map[string]string{"io.sandboxd.contract.group": group})
	left, err := s.target.Leftovers(ctx(t), map[string]string{labelSuite: s.instance})
	if err != nil || len(left) != 1 {
		t.Fatalf("after the reap %v are left (%v), want the unlabelled one", left, err)
	}
	if err := keep.Kill(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// openSession prepares a container and makes it a session's, or skips a
// runtime without the ability.
func (s *suite) openSession(t *testing.T) (runtime.Prepared, runtime.Session) {
	t.Helper()
	prepared, sess, _ := s.openSessionOf(t)
	return prepared, sess
}

// openSessionOf is openSession, with the spec of the session's container
// as it is once open (its limits the session's).
func (s *suite) openSessionOf(t *testing.T) (runtime.Prepared, runtime.Session, runtime.Spec) {
	t.Helper()
	p, ok := s.target.Runtime.(runtime.Preparer)
	if !ok {
		t.Skip("the runtime cannot prepare containers")
	}
	spec := s.spec(t, nil, nil)
	spec.Argv = nil
	prepared, err := p.Prepare(ctx(t), spec)
	if err != nil {
		t.Fatalf("Prepare() = %v", err)
	}
	t.Cleanup(func() {
		prepared.Remove(context.Background())
		s.assertGone(t, map[string]string{labelCase: spec.ID})
	})
	host, ok := prepared.(runtime.SessionHost)
	if !ok {
		t.Skip("the runtime's containers cannot hold sessions")
	}
	r := spec.Resources
	r.MemoryBytes *= 2
	sess, err := host.OpenSession(ctx(t), r)
	if err != nil {
		t.Fatalf("OpenSession() = %v", err)
	}
	spec.Resources = r
	return prepared, sess, spec
}

// call runs the program's steps as a call of sess.
func (s *suite) call(t *testing.T, c context.Context, sess runtime.Session, call runtime.Call, steps ...string) (runtime.CallExit, string, error) {
	t.Helper()
	var out testutil.Buffer
	call.Argv = append([]string{ProgramTarget}, steps...)
	if call.Env == nil {
		call.Env = []string{"PATH=/usr/bin:/bin"}
	}
	if call.WorkingDir == "" {
		call.WorkingDir = "/tmp"
	}
	call.Stdout, call.Stderr = &out, io.Discard
	exit, err := sess.Call(c, call)
	return exit, out.String(), err
}

// testSessionCalls runs calls one after another in one container: each
// with its own argv, environment, working folder and stdin, as the
// prepared spec's user, each with its own exit code; a failing call does
// not end the session.
func testSessionCalls(t *testing.T, s *suite) {
	_, sess := s.openSession(t)
	for _, tt := range []struct {
		name  string
		call  runtime.Call
		steps []string
		code  int
		out   string
	}{
		{"output", runtime.Call{}, []string{"out", "one"}, 0, "one"},
		{"env, stdin and an exit code", runtime.Call{Env: []string{"CALL=2"}, Stdin: []byte("in")}, []string{"env", "CALL", "cat", "exit", "3"}, 3, "2\nin"},
		{"working folder", runtime.Call{WorkingDir: "/"}, []string{"pwd"}, 0, "/\n"},
		{"user", runtime.Call{}, []string{"id"}, 0, "65534:65534\n"},
		{"after a failed call", runtime.Call{}, []string{"out", "still here"}, 0, "still here"},
	} {
		exit, out, err := s.call(t, ctx(t), sess, tt.call, tt.steps...)
		if err != nil || exit.Code != tt.code || out != tt.out || exit.TimedOut || exit.Interrupted {
			t.Fatalf("%s: %+v, %q, %v; want exit %d and %q", tt.name, exit, out, err, tt.code, tt.out)
		}
		if exit.StartedAt.IsZero() || exit.FinishedAt.Before(exit.StartedAt) {
			t.Errorf("%s: times %v to %v", tt.name, exit.StartedAt, exit.FinishedAt)
		}
	}
}

// testSessionInterrupts cuts calls short by their timeout and by their
// context: each says which, ends within seconds, and the session serves
// the next call.
func testSessionInterrupts(t *testing.T, s *suite) {
	_, sess := s.openSession(t)
	began := time.Now()
	exit, _, err := s.call(t, ctx(t), sess, runtime.Call{Timeout: 300 * time.Millisecond}, "block")
	if err != nil || !exit.TimedOut || exit.Interrupted || time.Since(began) > 30*time.Second {
		t.Fatalf("a call past its timeout: %+v, %v after %v; want TimedOut", exit, err, time.Since(began))
	}
	c, cancel := context.WithCancel(ctx(t))
	time.AfterFunc(300*time.Millisecond, cancel)
	exit, _, err = s.call(t, c, sess, runtime.Call{}, "block")
	if err != nil || !exit.Interrupted || exit.TimedOut {
		t.Fatalf("a call whose context ended: %+v, %v; want Interrupted", exit, err)
	}
	if exit, out, err := s.call(t, ctx(t), sess, runtime.Call{}, "out", "next"); err != nil || exit.Code != 0 || out != "next" {
		t.Fatalf("the call after: %+v, %q, %v", exit, out, err)
	}
}

// testSessionTools gives each call of a session its own tools: a call's
// requests reach the Tools it came with and no other, its output and
// stdin go on around them, and Serve ends with the call.
func testSessionTools(t *testing.T, s *suite) {
	_, sess := s.openSession(t)
	for i, prefix := range []string{"first ", "second "} {
		tools := &echoTools{prefix: prefix, ended: make(chan struct{})}
		req := fmt.Sprintf(`{"n":%d}`, i)
		exit, out, err := s.call(t, ctx(t), sess, runtime.Call{Tools: tools, Stdin: []byte("in\n")}, "out", "before\n", "call", req, "cat", "exit", "3")
		if want := "before\n" + prefix + req + "\nin\n"; err != nil || exit.Code != 3 || out != want {
			t.Fatalf("call %d: %+v, %q, %v; want exit 3 and %q", i, exit, out, err, want)
		}
		select {
		case <-tools.ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("call %d: Serve did not return after the call ended", i)
		}
		if !slices.Equal(tools.lines, []string{req}) {
			t.Errorf("call %d: Serve read %q, want %q", i, tools.lines, req)
		}
	}
}

// testSessionEnds kills a session's container: its next call fails, as a
// broken session's must, rather than hang or seem to run.
func testSessionEnds(t *testing.T, s *suite) {
	prepared, sess := s.openSession(t)
	if _, _, err := s.call(t, ctx(t), sess, runtime.Call{}, "out", "x"); err != nil {
		t.Fatal(err)
	}
	// The container ends during a call (under gVisor the host's OOM killer
	// ends the whole sandbox): an outcome of the call, not an error.
	// Wait is not a session's: a session's container never gets a task.
	go func() {
		time.Sleep(500 * time.Millisecond)
		prepared.Kill(context.Background())
	}()
	c, cancel := context.WithTimeout(ctx(t), 30*time.Second)
	defer cancel()
	exit, _, err := s.call(t, c, sess, runtime.Call{}, "block")
	if err != nil || !exit.ContainerExited {
		t.Fatalf("a call whose container was killed = %+v, %v; want ContainerExited and no error", exit, err)
	}
	if c.Err() != nil {
		t.Fatal("the call in a killed container hung until its deadline")
	}
	if exit, out, err := s.call(t, c, sess, runtime.Call{}, "out", "x"); err == nil {
		t.Fatalf("a call in a killed container: %+v %q, want an error", exit, out)
	}
}

// testSessionProcesses runs background processes beside a session's
// calls: each with its own stdin, output and exit code, none of it in a
// call's output; a signal ends one, a command not found is refused, and
// the end of the container ends those left.
func testSessionProcesses(t *testing.T, s *suite) {
	prepared, sess := s.openSession(t)
	host, ok := sess.(runtime.ProcessHost)
	if !ok {
		t.Skip("the runtime's sessions cannot run background processes")
	}
	spawn := func(steps ...string) (runtime.Process, *testutil.Buffer, *testutil.Buffer) {
		t.Helper()
		var out, errOut testutil.Buffer
		p, err := host.Spawn(ctx(t), runtime.ProcessSpec{Argv: append([]string{ProgramTarget}, steps...),
			Env: []string{"PATH=/usr/bin:/bin"}, WorkingDir: "/tmp", Stdout: &out, Stderr: &errOut})
		if err != nil {
			t.Fatalf("Spawn(%q) = %v", steps, err)
		}
		return p, &out, &errOut
	}
	exit := func(p runtime.Process) runtime.ProcessExit {
		t.Helper()
		select {
		case <-p.Done():
			return p.Exit()
		case <-time.After(30 * time.Second):
			t.Fatal("a background process did not end")
		}
		return runtime.ProcessExit{}
	}
	// Started first, so that a session may begin with one.
	echo, echoed, _ := spawn("cat")
	if err := echo.WriteStdin([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the background cat's echo of its stdin", func() bool { return echoed.String() == "hello\n" })
	if exit, out, err := s.call(t, ctx(t), sess, runtime.Call{}, "out", "call"); err != nil || exit.Code != 0 || out != "call" {
		t.Fatalf("a call beside a background process: %+v, %q, %v", exit, out, err)
	}
	done, out, errOut := spawn("out", "bg", "err", "E", "exit", "3")
	if e := exit(done); e.Code != 3 || e.SessionEnded || out.String() != "bg" || errOut.String() != "E" {
		t.Fatalf("a background process that exits: %+v, stdout %q, stderr %q", e, out, errOut)
	}
	closed, out, _ := spawn("cat", "out", "!")
	closed.WriteStdin([]byte("in"))
	closed.CloseStdin()
	if e := exit(closed); e.Code != 0 || out.String() != "in!" {
		t.Fatalf("a background process whose stdin closed: %+v, %q", e, out)
	}
	// A runtime that runs the program in-process has no commands to
	// look up.
	if _, err := host.Spawn(ctx(t), runtime.ProcessSpec{Argv: []string{"no-such-command"}, Env: []string{"PATH=/usr/bin:/bin"}, WorkingDir: "/tmp"}); s.target.Program != "" && !errdefs.IsInvalidArgument(err) {
		t.Fatalf("Spawn of a missing command = %v, want an invalid argument", err)
	}
	if err := echo.Signal(15); err != nil {
		t.Fatal(err)
	}
	if e := exit(echo); e.Code != 128+15 || e.SessionEnded {
		t.Fatalf("a background process ended by SIGTERM: %+v", e)
	}
	if echoed.String() != "hello\n" {
		t.Errorf("the cat's output grew to %q", echoed)
	}
	left, _, _ := spawn("block")
	prepared.Kill(context.Background())
	if e := exit(left); !e.SessionEnded {
		t.Fatalf("a background process when its container was killed: %+v, want SessionEnded", e)
	}
}

// testSessionTerminal gives a background process a terminal: the program
// sees its size, the terminal echoes what is typed, a resize reaches it,
// and a Ctrl-D ends a read.
func testSessionTerminal(t *testing.T, s *suite) {
	if s.target.Program == "" {
		t.Skip("the runtime runs its programs in-process, with no terminal")
	}
	_, sess := s.openSession(t)
	host, ok := sess.(runtime.ProcessHost)
	if !ok {
		t.Skip("the runtime's sessions cannot run background processes")
	}
	var out testutil.Buffer
	p, err := host.Spawn(ctx(t), runtime.ProcessSpec{
		Argv: []string{"/bin/sh", "-c", `stty size; read line; echo "read $line"; stty size; cat; echo eof`},
		Env:  []string{"PATH=/usr/bin:/bin", "TERM=xterm"}, WorkingDir: "/tmp", Stdout: &out,
		Terminal: &runtime.WindowSize{Rows: 24, Cols: 80},
	})
	if err != nil {
		t.Fatalf("Spawn() = %v", err)
	}
	testutil.WaitFor(t, "the terminal's size", func() bool { return strings.Contains(out.String(), "24 80\r\n") })
	if err := p.Resize(runtime.WindowSize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin([]byte("typed\n")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the resized terminal", func() bool { return strings.Contains(out.String(), "30 100\r\n") })
	p.CloseStdin() // a Ctrl-D: cat ends
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the process did not end at a Ctrl-D; it wrote %q", out.String())
	}
	// The terminal echoes the line typed, then the program reads it.
	if e := p.Exit(); e.Code != 0 || !strings.Contains(out.String(), "typed\r\nread typed\r\n") || !strings.HasSuffix(out.String(), "eof\r\n") {
		t.Fatalf("exit %+v, output %q", e, out.String())
	}
}

// testSessionPort reaches a server listening in a session's container
// through DialPort: both ways, with a half-close; a port nothing listens
// on is refused by name.
func testSessionPort(t *testing.T, s *suite) {
	_, sess := s.openSession(t)
	dialer, ok := sess.(runtime.PortDialer)
	host, _ := sess.(runtime.ProcessHost)
	if !ok || host == nil {
		t.Skip("the runtime's sessions cannot reach their ports")
	}
	// The fake's programs listen on the host's loopback: a port of its own.
	port := uint16(20000 + time.Now().UnixNano()%30000)
	var out testutil.Buffer
	server, err := host.Spawn(ctx(t), runtime.ProcessSpec{Argv: []string{ProgramTarget, "serve", strconv.Itoa(int(port))},
		Env: []string{"PATH=/usr/bin:/bin"}, WorkingDir: "/tmp", Stdout: &out, Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the server's listening", func() bool { return out.String() == "listening\n" })
	if _, err := dialer.DialPort(ctx(t), port+1); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), strconv.Itoa(int(port+1))) {
		t.Fatalf("DialPort() of a port nothing listens on = %v, want unavailable naming it", err)
	}
	conn, err := dialer.DialPort(ctx(t), port)
	if err != nil {
		t.Fatalf("DialPort() = %v", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != "hello\nping" {
		t.Fatalf("the server answered %q, %v", got, err)
	}
	select {
	case <-server.Done():
		if e := server.Exit(); e.Code != 0 {
			t.Fatalf("the server exited %+v", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not end after its connection")
	}
}

// testSessionCheckpoint saves a session between calls, with a file in
// its memory-backed /tmp and a background cat: once left running (a
// fork's source), which goes on as it was, then ended (a pause), whose
// cat ends Saved and whose calls fail. Each restore has the file and the
// cat, whose stdin and output carry on, on the restore's writers; what
// one restore writes another does not see. A session that had no call
// yet is checkpointed and restored too, and a restore once returned does
// not need its checkpoint. A runtime that cannot
// checkpoint refuses as a failed precondition and leaves the session as
// it was.
func testSessionCheckpoint(t *testing.T, s *suite) {
	_, sess, spec := s.openSessionOf(t)
	cp, ok := sess.(runtime.Checkpointer)
	restorer, rok := s.target.Runtime.(runtime.Restorer)
	if !ok || !rok {
		t.Skip("the runtime's sessions cannot be checkpointed")
	}
	host := sess.(runtime.ProcessHost)
	shell := func(t *testing.T, sess runtime.Session, script string) string {
		t.Helper()
		var out testutil.Buffer
		exit, err := sess.Call(ctx(t), runtime.Call{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"},
			WorkingDir: "/tmp", Stdout: &out, Stderr: &out})
		if err != nil || exit.Code != 0 {
			t.Fatalf("call %q: %+v, %v: %s", script, exit, err, out.String())
		}
		return out.String()
	}
	echo := func(t *testing.T, cat runtime.Process, out *testutil.Buffer, line string) {
		t.Helper()
		want := out.String() + line
		if err := cat.WriteStdin([]byte(line)); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "the cat's echo of "+strings.TrimSpace(line), func() bool { return out.String() == want })
	}
	shell(t, sess, "echo before > /tmp/kept")
	var echoed testutil.Buffer
	cat, err := host.Spawn(ctx(t), runtime.ProcessSpec{Argv: []string{ProgramTarget, "cat"}, Env: []string{"PATH=/usr/bin:/bin"},
		WorkingDir: "/tmp", Stdout: &echoed, Stderr: io.Discard})
	if err != nil {
		t.Fatalf("Spawn(cat) = %v", err)
	}
	echo(t, cat, &echoed, "a\n")

	forkDir := t.TempDir()
	saved, err := cp.Checkpoint(ctx(t), forkDir, true)
	if !s.target.Checkpoints {
		if !errdefs.IsFailedPrecondition(err) {
			t.Fatalf("Checkpoint() of a target that cannot = %v, want a failed precondition saying why", err)
		}
		if got := shell(t, sess, "cat /tmp/kept"); got != "before\n" {
			t.Fatalf("after a refused checkpoint the session reads %q", got)
		}
		echo(t, cat, &echoed, "b\n")
		return
	}
	if err != nil {
		t.Fatalf("Checkpoint(leave) = %v", err)
	}
	if len(saved) != 1 || saved[0].Process != cat {
		t.Fatalf("Checkpoint(leave) saved %+v, want the cat", saved)
	}
	echo(t, cat, &echoed, "b\n")
	shell(t, sess, "echo after > /tmp/kept")

	pauseDir := t.TempDir()
	if saved, err = cp.Checkpoint(ctx(t), pauseDir, false); err != nil || len(saved) != 1 {
		t.Fatalf("Checkpoint() = %+v, %v; want the cat", saved, err)
	}
	select {
	case <-cat.Done():
		if e := cat.Exit(); !e.Saved {
			t.Errorf("the paused session's cat ended %+v, want Saved", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the paused session's cat did not end with its container")
	}
	if _, err := sess.Call(ctx(t), runtime.Call{Argv: []string{"/bin/true"}, WorkingDir: "/tmp", Stdout: io.Discard, Stderr: io.Discard}); err == nil {
		t.Error("a call in the paused session ran")
	}

	restore := func(t *testing.T, dir string) (runtime.Session, runtime.Process, *testutil.Buffer) {
		t.Helper()
		rspec := s.spec(t, nil, nil)
		rspec.Argv, rspec.Resources = nil, spec.Resources
		var out testutil.Buffer
		r, err := restorer.Restore(ctx(t), rspec, dir, map[uint32]runtime.ProcessSpec{saved[0].ID: {Stdout: &out, Stderr: io.Discard}})
		if err != nil {
			t.Fatalf("Restore() = %v", err)
		}
		t.Cleanup(func() {
			r.Container.Remove(context.Background())
			s.assertGone(t, map[string]string{labelCase: rspec.ID})
		})
		return r.Session, r.Processes[saved[0].ID], &out
	}
	resumed, resumedCat, resumedOut := restore(t, pauseDir)
	if got := shell(t, resumed, "cat /tmp/kept"); got != "after\n" {
		t.Errorf("the resumed session reads %q from its /tmp, want what it held at the pause", got)
	}
	echo(t, resumedCat, resumedOut, "resumed\n")
	var forks []runtime.Session
	for i := range 2 {
		fork, forkCat, forkOut := restore(t, forkDir)
		if got := shell(t, fork, "cat /tmp/kept"); got != "before\n" {
			t.Errorf("fork %d reads %q from its /tmp, want what it held at the checkpoint", i, got)
		}
		echo(t, forkCat, forkOut, fmt.Sprintf("fork %d\n", i))
		forks = append(forks, fork)
	}
	shell(t, forks[0], "echo first > /tmp/mine")
	if got := shell(t, forks[1], "cat /tmp/mine 2>/dev/null || echo none"); got != "none\n" {
		t.Errorf("the second fork sees the first's file: %q", got)
	}
	if echoed.String() != "a\nb\n" {
		t.Errorf("the checkpointed session's cat got the restores' output: %q", echoed.String())
	}

	// A session that no call opened yet is checkpointed too, and its
	// restore, once returned, no longer needs the checkpoint.
	_, fresh, freshSpec := s.openSessionOf(t)
	freshDir := t.TempDir()
	if _, err := fresh.(runtime.Checkpointer).Checkpoint(ctx(t), freshDir, false); err != nil {
		t.Fatalf("Checkpoint() of a session with no call yet = %v", err)
	}
	rspec := s.spec(t, nil, nil)
	rspec.Argv, rspec.Resources = nil, freshSpec.Resources
	r, err := restorer.Restore(ctx(t), rspec, freshDir, nil)
	if err != nil {
		t.Fatalf("Restore() of a session with no call yet = %v", err)
	}
	t.Cleanup(func() {
		r.Container.Remove(context.Background())
		s.assertGone(t, map[string]string{labelCase: rspec.ID})
	})
	if err := os.RemoveAll(freshDir); err != nil {
		t.Fatal(err)
	}
	if got := shell(t, r.Session, "echo restored"); got != "restored\n" {
		t.Errorf("the restore of a session with no call yet printed %q", got)
	}
}

//go:build integration

package conformance

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task/run"
)

func testIsolation(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	code := `import json, os
def write(path):
    try:
        with open(path, 'w') as f: f.write('x')
        return 'ok'
    except OSError as e:
        return e.strerror
status = dict(l.split(':\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\t' in l)
print(json.dumps({
    'root': write('/evil'), 'usr': write('/usr/evil'), 'input_new': write('/input/evil'),
    'input_file': write('/input/data.txt'), 'code': write('/code/main.py'),
    'workspace': write('/workspace/ok'), 'tmp': write('/tmp/ok'),
    'uid': os.getuid(), 'gid': os.getgid(), 'cap_eff': status['CapEff'].strip(),
    'cap_bnd': status['CapBnd'].strip(), 'no_new_privs': status['NoNewPrivs'].strip(),
    'seccomp': status['Seccomp'].strip(), 'net': sorted(name for _, name in __import__('socket').if_nameindex()),
    'hostname': os.uname().nodename, 'nofile': __import__('resource').getrlimit(__import__('resource').RLIMIT_NOFILE),
    'core': __import__('resource').getrlimit(__import__('resource').RLIMIT_CORE),
}))

`
	req := python(code, limits.Limits{})
	req.Options.Files = []run.File{{Path: "data.txt", Content: []byte("input")}}
	res := s.run(t, svc, req, obs)
	defer s.noContainerOfRun(t, res.RunID)
	var got struct {
		Root       string   `json:"root"`
		Usr        string   `json:"usr"`
		InputNew   string   `json:"input_new"`
		InputFile  string   `json:"input_file"`
		Code       string   `json:"code"`
		Workspace  string   `json:"workspace"`
		Tmp        string   `json:"tmp"`
		UID        int      `json:"uid"`
		GID        int      `json:"gid"`
		CapEff     string   `json:"cap_eff"`
		CapBnd     string   `json:"cap_bnd"`
		NoNewPrivs string   `json:"no_new_privs"`
		Seccomp    string   `json:"seccomp"`
		Net        []string `json:"net"`
		Hostname   string   `json:"hostname"`
		NoFile     []int64  `json:"nofile"`
		Core       []int64  `json:"core"`
	}
	out := obs.output(run.Stdout)
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("stdout %q (stderr %q): %v", out, obs.output(run.Stderr), err)
	}
	for name, v := range map[string]string{"/": got.Root, "/usr": got.Usr, "/input (new file)": got.InputNew,
		"/input (given file)": got.InputFile, "/code": got.Code} {
		if v == "ok" {
			t.Errorf("writing to %s succeeded", name)
		}
	}
	if got.Workspace != "ok" || got.Tmp != "ok" {
		t.Errorf("writing to /workspace: %s, /tmp: %s; want both ok", got.Workspace, got.Tmp)
	}
	if got.UID == 0 || got.GID == 0 {
		t.Errorf("uid %d gid %d, want not root", got.UID, got.GID)
	}
	if got.CapEff != "0000000000000000" || got.CapBnd != "0000000000000000" {
		t.Errorf("CapEff %s CapBnd %s, want none", got.CapEff, got.CapBnd)
	}
	if got.NoNewPrivs != "1" {
		t.Errorf("NoNewPrivs = %s, want 1", got.NoNewPrivs)
	}
	if len(got.Net) != 1 || got.Net[0] != "lo" {
		t.Errorf("network interfaces %v, want only lo", got.Net)
	}
	if got.Hostname != "sandbox" {
		t.Errorf("hostname %q", got.Hostname)
	}
	if len(got.Core) != 2 || got.Core[0] != 0 || got.Core[1] != 0 || len(got.NoFile) != 2 || got.NoFile[1] != 1024 {
		t.Errorf("rlimits core %v nofile %v, want core 0 and nofile 1024", got.Core, got.NoFile)
	}
	t.Logf("seccomp mode %s", got.Seccomp)
}

func testEgressBlocked(t *testing.T, s *suite) {
	outside := testutil.NewHost(t)
	lis := outside.Listen(t, 0)
	var accepts atomic.Int32
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			c.Close()
		}
	}()
	// The outside host answers the host itself, so it is reachable: a
	// connection refused from the sandbox proves isolation, not a dead host.
	if c, err := net.DialTimeout("tcp", lis.Addr().String(), 3*time.Second); err != nil {
		t.Fatalf("the outside host does not answer the host: %v", err)
	} else {
		c.Close()
	}
	svc := s.service(t, nil)
	obs := &observer{}
	host, port, _ := net.SplitHostPort(lis.Addr().String())
	code := fmt.Sprintf(`import socket
s = socket.socket()
s.settimeout(3)
try:
    s.connect((%q, %s))
    print('connected')
except OSError as e:
    print('blocked', e.errno)
`, host, port)
	res := s.run(t, svc, python(code, limits.Limits{}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	got := string(obs.output(run.Stdout))
	if !strings.HasPrefix(got, "blocked") {
		t.Fatalf("the sandbox reached the outside host: %q", got)
	}
	if n := accepts.Load(); n > 1 {
		t.Fatalf("the outside host accepted %d connections; only the host's check was expected", n)
	}
}

// testLoopbackWorks serves and connects on 127.0.0.1 inside the sandbox:
// no network must not mean no loopback, which test suites rely on.
func testLoopbackWorks(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import socket, threading
srv = socket.socket()
srv.bind(('127.0.0.1', 0))
srv.listen()
def serve():
    c, _ = srv.accept()
    c.sendall(b'pong')
    c.close()
threading.Thread(target=serve).start()
c = socket.create_connection(srv.getsockname(), timeout=5)
print(c.recv(4).decode())
`
	obs := &observer{}
	res := s.run(t, svc, python(code, limits.Limits{}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	if got := string(obs.output(run.Stdout)); got != "pong\n" {
		t.Fatalf("stdout %q (stderr %q), want pong over loopback", got, obs.output(run.Stderr))
	}
}

// testKernelIdentity proves which kernel the program talks to: gVisor's
// when runsc was asked for, the host's when runc was.
func testKernelIdentity(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	res := s.run(t, svc, run.Request{Command: &run.Command{Shell: "cat /proc/version"}}, obs)
	defer s.noContainerOfRun(t, res.RunID)
	host, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	got := string(obs.output(run.Stdout))
	if obs.started == nil || obs.started.Runtime != s.target.OCIRuntime || obs.started.RuntimeVersion == "" {
		t.Errorf("started = %+v, want the runtime asked for and its version", obs.started)
	}
	if s.gvisor() {
		if !strings.Contains(got, "gvisor") || strings.Contains(got, string(host)) {
			t.Fatalf("asked for runsc, the program sees %q", got)
		}
		return
	}
	if !strings.HasPrefix(got, string(host)) {
		t.Fatalf("asked for runc, the program sees %q, not the host's %q", got, host)
	}
}

// testInitIsClosed tries every way a program under the init's user could
// learn the token of the exit report (see internal/sandbox/launch): the init's
// memory, environment, the stdin it read the token from, or tracing it.
// All must be closed. (gVisor lets the program list the init's file
// descriptor numbers, which tell nothing.)
func testInitIsClosed(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import ctypes, os
def attempt(name, fn):
    try:
        fn()
        print(name, "open")
    except OSError as e:
        print(name, "closed", e.errno)
attempt("mem", lambda: os.pread(os.open("/proc/1/mem", os.O_RDONLY), 16, 0x400000))
attempt("environ", lambda: open("/proc/1/environ", "rb").read())
attempt("stdin", lambda: os.open("/proc/1/fd/0", os.O_RDONLY))
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH = 16
def ptrace():
    if libc.ptrace(PTRACE_ATTACH, 1, None, None) != 0:
        raise OSError(ctypes.get_errno(), "ptrace")
attempt("ptrace", ptrace)
`
	obs := &observer{}
	res := s.run(t, svc, python(code, limits.Limits{}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	out := string(obs.output(run.Stdout))
	if res.Status != run.StatusOK {
		t.Fatalf("status = %s (%s), stdout %q, stderr %q", res.Status, res.Message, out, obs.output(run.Stderr))
	}
	for _, what := range []string{"mem", "environ", "stdin", "ptrace"} {
		if !strings.Contains(out, what+" closed") {
			t.Errorf("the program could reach the init's %s:\n%s", what, out)
		}
	}
}

func testStdinInputsMounts(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	code := `import os, sys
print(sys.stdin.read().upper(), end='')
print(open('/input/dir/data.txt').read(), end='')
print(open('/mnt/data/dataset.txt').read(), end='')
try:
    open('/mnt/data/evil', 'w')
    print('mount writable')
except OSError as e:
    print('mount', e.strerror)
print(os.getcwd())
open('note.txt', 'w').write('x')
`
	req := python(code, limits.Limits{})
	req.Options.Stdin = []byte("from stdin\n")
	req.Options.Files = []run.File{{Path: "dir/data.txt", Content: []byte("from input\n")}}
	req.Options.Mounts = []string{"data"}
	req.Options.Workdir = "out"
	res := s.run(t, svc, req, obs)
	defer s.noContainerOfRun(t, res.RunID)
	refusal := "Read-only file system"
	if s.gvisor() {
		refusal = "Permission denied"
	}
	want := "FROM STDIN\nfrom input\noperator data\nmount " + refusal + "\n/workspace/out\n"
	if got := string(obs.output(run.Stdout)); got != want {
		t.Fatalf("stdout = %q (stderr %q), want %q", got, obs.output(run.Stderr), want)
	}
}

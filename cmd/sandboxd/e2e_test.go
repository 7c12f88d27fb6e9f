//go:build integration

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/internal/edge/tlsconf"
	"github.com/sandboxd/sandboxd/internal/sandbox/cgroup"
	"github.com/sandboxd/sandboxd/internal/testutil"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/runtime/direct"
	"github.com/sandboxd/sandboxd/task/hostuid"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandboxd-e2e-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "sandboxd")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		panic(fmt.Sprintf("build: %v\n%s", err, out))
	}
	// The daemon finds its init next to itself.
	initBuild := exec.Command("go", "build", "-o", filepath.Join(dir, "sandboxd-init"), "../sandboxd-init")
	initBuild.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := initBuild.CombinedOutput(); err != nil {
		panic(fmt.Sprintf("build the init: %v\n%s", err, out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemon is a `sandboxd serve` process of the test's own.
type daemon struct {
	t        *testing.T
	cmd      *exec.Cmd
	socket   string
	state    string
	instance string
	log      *testutil.Buffer
	exited   chan error
}

func requireDocker(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	if err := exec.Command("docker", "info").Run(); err != nil {
		testutil.SkipOrFail(t, "no dockerd (scripts/setup.sh starts one)")
	}
}

func startDaemon(t *testing.T, state, instance string, extra ...string) *daemon {
	t.Helper()
	return startDaemonUnder(t, nil, state, instance, extra...)
}

// startDaemonUnder starts the daemon as startDaemon does, through the
// command wrap (unshare ...), which execs it.
func startDaemonUnder(t *testing.T, wrap []string, state, instance string, extra ...string) *daemon {
	t.Helper()
	t.Cleanup(func() { scrub(t, state, instance) })
	d := &daemon{t: t, socket: filepath.Join(t.TempDir(), "sandboxd.sock"), state: state, instance: instance,
		log: &testutil.Buffer{}, exited: make(chan error, 1)}
	// The pool is off unless a test asks for it: most count containers.
	args := append([]string{"serve", "--socket", d.socket, "--state-dir", state, "--instance", instance,
		"--artifacts-dir", filepath.Join(state, "artifacts"), "--pool-size", "0",
		"--cgroup-root", "/sys/fs/cgroup"}, extra...)
	argv := append(append(append([]string{}, wrap...), binary), args...)
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Stderr = d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.stop()
		removeContainers(t, instance)
	})
	d.waitHealthy()
	return d
}

// scrub removes what a daemon killed in a failing test may have left, as its
// next start would: mounts below its state folder and its cgroups. It runs
// after every other cleanup of the test.
func scrub(t *testing.T, state, instance string) {
	mounts, _ := os.ReadFile("/proc/mounts")
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], state+"/") {
			syscall.Unmount(f[1], syscall.MNT_DETACH)
		}
	}
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + cgroup.InstanceParent(instance))
	for _, dir := range dirs {
		var all []string
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				all = append(all, p)
			}
			return nil
		})
		for i := len(all) - 1; i >= 0; i-- {
			os.Remove(all[i])
		}
	}
}

// stop ends the daemon as an operator would, with SIGTERM, so that it
// cleans up after itself; SIGKILL only if it does not exit in time.
func (d *daemon) stop() {
	if d.cmd == nil || d.cmd.ProcessState != nil {
		return
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		d.t.Errorf("the daemon did not stop on SIGTERM\n%s", d.log)
		d.cmd.Process.Kill()
		<-d.exited
	}
}

func (d *daemon) waitHealthy() {
	d.t.Helper()
	conn := d.conn()
	defer conn.Close()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		select {
		case err := <-d.exited:
			d.t.Fatalf("the daemon exited: %v\n%s", err, d.log)
		case <-time.After(100 * time.Millisecond):
		}
	}
	d.t.Fatalf("the daemon did not become healthy\n%s", d.log)
}

func (d *daemon) conn() *grpc.ClientConn {
	d.t.Helper()
	conn, err := grpc.NewClient("unix://"+d.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		d.t.Fatal(err)
	}
	return conn
}

// containers lists the containers of an instance, running or not: the
// direct backend's (the default), by their folders, and Docker's.
func containers(t *testing.T, instance string) []string {
	t.Helper()
	var names []string
	entries, err := os.ReadDir(filepath.Join(DirectStateDir(instance), "containers"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if exec.Command("docker", "info").Run() != nil {
		return names
	}
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=io.sandboxd.instance="+instance).Output()
	if err != nil {
		t.Fatal(err)
	}
	return append(names, strings.Fields(string(out))...)
}

// waitContainers waits, a little, until the instance has n containers: a
// run's container goes just after its result.
func waitContainers(t *testing.T, instance string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := containers(t, instance)
		if len(c) == n || time.Now().After(deadline) {
			return c
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeContainers removes what a daemon of instance left, as its next
// start would: the direct backend's containers, reaped, and Docker's.
func removeContainers(t *testing.T, instance string) {
	if _, err := os.Stat(DirectStateDir(instance)); err == nil {
		rt, err := direct.New(direct.Options{StateDir: DirectStateDir(instance), InitPath: testutil.BuildInit(t),
			RunscPath: DefaultConfig().RunscPath, CgroupRoot: "/sys/fs/cgroup", CgroupParent: cgroup.InstanceParent(instance)})
		if err == nil {
			if _, err := rt.Reap(context.Background(), nil); err != nil {
				t.Errorf("reap what %s left: %v", instance, err)
			}
			rt.Close()
		}
	}
	if exec.Command("docker", "info").Run() != nil {
		return
	}
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=io.sandboxd.instance="+instance).Output()
	for _, id := range strings.Fields(string(out)) {
		exec.Command("docker", "rm", "-f", id).Run()
	}
}

func instanceName(t *testing.T) string {
	return fmt.Sprintf("e2e-%d", time.Now().UnixNano()%1e9)
}

// runCLI runs `sandboxd run` against d and returns stdout, stderr and the
// exit code.
func runCLI(t *testing.T, d *daemon, args ...string) (string, string, int) {
	t.Helper()
	return daemonCLI(t, d, "run", args...)
}

// daemonCLI runs a command of sandboxd against d and returns stdout,
// stderr and the exit code.
func daemonCLI(t *testing.T, d *daemon, command string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{command, "--socket", d.socket}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	}
	t.Fatal(err)
	return "", "", 0
}

func TestServeAndRunCLI(t *testing.T) {
	requireDocker(t)
	d := startDaemon(t, t.TempDir(), instanceName(t))
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantStdout string
		wantStderr string
		wantExit   int
	}{
		{"code", []string{"--lang", "python", "-c", "print(6*7)"}, "", "42\n", "sandboxd: OK", 0},
		{"argv", []string{"--", "sh", "-c", "echo out; echo err >&2; exit 3"}, "", "out\n", "err\nsandboxd: NONZERO_EXIT", 3},
		{"shell", []string{"--sh", "echo a b | wc -w"}, "", "2\n", "sandboxd: OK", 0},
		{"timeout", []string{"--timeout", "1s", "--lang", "python", "-c", "while True: pass"}, "", "", "sandboxd: TIMEOUT", 137},
		{"bad input", []string{"--lang", "cobol", "-c", "x"}, "", "", "language: \"cobol\" is not one of", 125},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, d, tt.args...)
			if stdout != tt.wantStdout || !strings.Contains(stderr, tt.wantStderr) || code != tt.wantExit {
				t.Fatalf("got stdout %q stderr %q exit %d; want %q, %q, %d", stdout, stderr, code, tt.wantStdout, tt.wantStderr, tt.wantExit)
			}
		})
	}
	file := filepath.Join(t.TempDir(), "script.py")
	os.WriteFile(file, []byte("import sys\nprint(sys.argv[0])\n"), 0o644)
	if stdout, stderr, code := runCLI(t, d, "--lang", "python", file); stdout != "/code/main.py\n" || code != 0 {
		t.Fatalf("run FILE: %q %q %d", stdout, stderr, code)
	}
	// The binary's version and the daemon's, with its backend's.
	if out, code := cli(t, "version", "--socket", d.socket); code != 0 || !regexp.MustCompile(`(?m)^client: sandboxd .*\ndaemon: sandboxd \S+ on direct \S+`).MatchString(out) {
		t.Fatalf("version: %d %q", code, out)
	}
	if left := waitContainers(t, d.instance, 0); len(left) != 0 {
		t.Fatalf("containers left: %v", left)
	}
}

// startLongTask starts a task that runs until killed and waits until its
// container runs.
func startLongTask(t *testing.T, d *daemon) (grpc.ServerStreamingClient[pb.RunEvent], *grpc.ClientConn) {
	t.Helper()
	conn := d.conn()
	stream, err := pb.NewSandboxServiceClient(conn).RunCode(context.Background(),
		&pb.RunCodeRequest{Language: "python", Code: "import time\nprint('up', flush=True)\ntime.sleep(300)"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("stream: %v\n%s", err, d.log)
		}
		if strings.Contains(string(ev.GetStdout()), "up") {
			return stream, conn
		}
	}
}

func TestSIGTERMCancelsRunningTasksAndExitsZero(t *testing.T) {
	requireDocker(t)
	d := startDaemon(t, t.TempDir(), instanceName(t))
	stream, conn := startLongTask(t, d)
	defer conn.Close()
	if n := len(containers(t, d.instance)); n != 1 {
		t.Fatalf("%d containers while the task runs, want 1", n)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var result *pb.Result
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stream ended with %v, want a CANCELLED result", err)
		}
		if r := ev.GetResult(); r != nil {
			result = r
		}
	}
	if result.GetStatus() != pb.Status_CANCELLED {
		t.Fatalf("result = %v, want CANCELLED", result)
	}
	select {
	case err := <-d.exited:
		if err != nil {
			t.Fatalf("the daemon exited with %v, want 0\n%s", err, d.log)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not exit after SIGTERM")
	}
	if left := containers(t, d.instance); len(left) != 0 {
		t.Fatalf("containers left after SIGTERM: %v", left)
	}
	if _, err := os.Stat(d.socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket is still there: %v", err)
	}
}

// TestSIGTERMDrains: with --drain-timeout, SIGTERM makes health say not
// serving and refuses new runs as unavailable with a retry hint, while a
// running task ends on its own, OK; then the daemon exits 0.
func TestSIGTERMDrains(t *testing.T) {
	requireDocker(t)
	probes := freeAddr(t)
	d := startDaemon(t, t.TempDir(), instanceName(t), "--drain-timeout", "60s", "--metrics-listen", probes)
	if code := httpStatus(t, "http://"+probes+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz of a serving daemon: %d", code)
	}
	conn := d.conn()
	defer conn.Close()
	c := pb.NewSandboxServiceClient(conn)
	stream, err := c.RunCode(context.Background(), &pb.RunCodeRequest{Language: "python", Code: "import time\nprint('up', flush=True)\ntime.sleep(3)\nprint('done')"})
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := stream.Recv(); !strings.Contains(string(ev.GetStdout()), "up"); ev, err = stream.Recv() {
		if err != nil {
			t.Fatal(err)
		}
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, 10*time.Second, func() bool {
		_, _, code := daemonCLI(t, d, "health")
		return code == 1
	})
	// Kubernetes stops sending work to a draining pod by its readiness;
	// it is still alive.
	if code := httpStatus(t, "http://"+probes+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while draining: %d, want 503", code)
	}
	if code := httpStatus(t, "http://"+probes+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while draining: %d, want 200", code)
	}
	_, _, err = runToEnd(context.Background(), c, &pb.RunCodeRequest{Language: "python", Code: "print(1)"})
	retry := false
	for _, detail := range status.Convert(err).Details() {
		if _, ok := detail.(*errdetails.RetryInfo); ok {
			retry = true
		}
	}
	if status.Code(err) != codes.Unavailable || !retry {
		t.Fatalf("a new run while draining: %v, want UNAVAILABLE with a RetryInfo", err)
	}
	var result *pb.Result
	for {
		ev, err := stream.Recv()
		if err != nil {
			break
		}
		if r := ev.GetResult(); r != nil {
			result = r
		}
	}
	if result.GetStatus() != pb.Status_OK {
		t.Fatalf("the running task: %v, want it to end OK", result)
	}
	select {
	case err := <-d.exited:
		if err != nil {
			t.Fatalf("the daemon exited with %v\n%s", err, d.log)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not exit after draining")
	}
}

func TestKill9LeavesNothingAfterRestart(t *testing.T) {
	requireDocker(t)
	state, instance := t.TempDir(), instanceName(t)
	d := startDaemon(t, state, instance)
	_, conn := startLongTask(t, d)
	conn.Close()
	d.cmd.Process.Kill()
	<-d.exited
	// The kill leaves the container and the task folder behind ...
	if n := len(containers(t, instance)); n != 1 {
		t.Fatalf("%d containers after kill -9, want the 1 left behind", n)
	}
	if entries, _ := os.ReadDir(filepath.Join(state, "tasks", instance)); len(entries) != 1 {
		t.Fatalf("task folders after kill -9: %v, want 1", entries)
	}
	// ... and the next start of the same instance removes them.
	startDaemon(t, state, instance)
	if left := containers(t, instance); len(left) != 0 {
		t.Fatalf("containers left after restart: %v", left)
	}
	if entries, _ := os.ReadDir(filepath.Join(state, "tasks", instance)); len(entries) != 0 {
		t.Fatalf("task folders left after restart: %v", entries)
	}
}

func TestTCPListener(t *testing.T) {
	requireDocker(t)
	// Every network listener needs a token, loopback ones too: the daemon
	// refuses to start without one.
	socket := filepath.Join(t.TempDir(), "sandboxd.sock")
	for _, listen := range [][]string{
		{"--socket", "", "--listen", "0.0.0.0:0"},
		{"--socket", "", "--listen", "127.0.0.1:0"},
		{"--socket", socket, "--mcp-listen", "127.0.0.1:0"},
	} {
		out, err := exec.Command(binary, append([]string{"serve"}, listen...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--token-file") {
			t.Fatalf("serve %s without a token: %v %s", listen, err, out)
		}
	}

	addr := freeAddr(t)
	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("s3cret-token-0123456789\n"), 0o600)
	// Off loopback, a token is not enough: TLS, or the operator's word.
	out, err := exec.Command(binary, "serve", "--socket", "", "--listen", "0.0.0.0:0", "--token-file", token).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--insecure-listen") {
		t.Fatalf("serve on 0.0.0.0 in the clear: %v %s", err, out)
	}
	auditLog := filepath.Join(t.TempDir(), "audit.log")
	d := startDaemon(t, t.TempDir(), instanceName(t), "--listen", addr, "--token-file", token, "--audit-log", auditLog)
	cmd := exec.Command(binary, "run", "--addr", addr, "--lang", "python", "-c", "print(1)")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Unauthenticated") {
		t.Fatalf("without the token: %v %s", err, out)
	}
	cmd = exec.Command(binary, "run", "--addr", addr, "--token-file", token, "--lang", "python", "-c", "print(1)")
	if out, err := cmd.Output(); err != nil || string(out) != "1\n" {
		t.Fatalf("with the token: %v %q", err, out)
	}
	d.stop()
	// The refusal at the door, of a caller not named, then the run by the
	// token's caller: both from the client's address, by method.
	ev := auditEvents(t, auditLog)
	if len(ev) != 3 || ev[0].Decision != audit.Refused || ev[0].Code != "UNAUTHENTICATED" ||
		ev[1].Decision != audit.Accepted || ev[2].Kind != audit.KindRunEnd || ev[2].Status != "OK" || ev[2].BundleDigest == "" {
		t.Fatalf("audit log: %+v", ev)
	}
	for i, e := range ev {
		tenant := "token"
		if i == 0 {
			tenant = ""
		}
		if e.Tenant != tenant || !strings.HasPrefix(e.Peer, "127.0.0.1:") || e.Method != "/sandboxd.v1.SandboxService/RunCode" {
			t.Errorf("audit line without its caller: %+v", e)
		}
	}
	if out, code := cli(t, "audit", "verify", auditLog); code != 0 || !strings.Contains(out, "sound chain of 3 lines") {
		t.Fatalf("audit verify: %q %d", out, code)
	}
}

// auditEvents reads the audit log at path.
func auditEvents(t *testing.T, path string) []audit.Event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Event
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e audit.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		out = append(out, e)
	}
	return out
}

// TestSocketIsRootsAndItsGroups checks who may use the daemon's socket:
// root, and the socket's group; anyone else is refused by the kernel.
func TestSocketIsRootsAndItsGroups(t *testing.T) {
	requireDocker(t)
	d := startDaemon(t, t.TempDir(), instanceName(t))
	st, err := os.Stat(d.socket)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	g, err := user.LookupGroup("sandboxd")
	if err != nil {
		t.Fatalf("the set-up makes the group sandboxd: %v", err)
	}
	if st.Mode().Perm() != 0o660 || sys.Uid != 0 || fmt.Sprint(sys.Gid) != g.Gid {
		t.Fatalf("socket mode %v owner %d:%d, want 0660 root:sandboxd", st.Mode().Perm(), sys.Uid, sys.Gid)
	}
	// The socket and the binary are in test folders of root's: make the
	// way to them open, so that only the socket's own mode decides.
	for _, p := range []string{d.socket, binary} {
		for dir := filepath.Dir(p); dir != "/"; dir = filepath.Dir(dir) {
			if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o001 == 0 {
				os.Chmod(dir, fi.Mode().Perm()|0o011)
			}
		}
	}
	cmd := exec.Command(binary, "images", "--socket", d.socket)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	// Refused by the kernel, and told how to get in.
	if err == nil || !strings.Contains(string(out), "root's and the sandboxd group's") || !strings.Contains(string(out), "usermod -aG sandboxd") {
		t.Fatalf("nobody used the socket: %v %s", err, out)
	}
}

// TestDaemonImage builds the Dockerfile and runs the daemon in a container
// of the host's Docker, as the README tells operators to.
func TestDaemonImage(t *testing.T) {
	requireDocker(t)
	ctxDir := t.TempDir()
	for pkg, out := range map[string]string{".": "sandboxd-static", "../sandboxd-init": "sandboxd-init"} {
		build := exec.Command("go", "build", "-o", filepath.Join(ctxDir, "bin", out), pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("static build: %v\n%s", err, out)
		}
	}
	for src, dst := range map[string]string{"../../Dockerfile": "Dockerfile", images.DefaultLockPath: "bin/images.lock",
		"/usr/local/lib/sandboxd/runsc": "bin/runsc"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(dst, "bin/") {
			mode = 0o755
		}
		os.MkdirAll(filepath.Dir(filepath.Join(ctxDir, dst)), 0o755)
		os.WriteFile(filepath.Join(ctxDir, dst), b, mode)
	}
	tag := fmt.Sprintf("sandboxd/daemon-test:%d", time.Now().UnixNano())
	if out, err := exec.Command("docker", "build", "-q", "-t", tag, ctxDir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", tag).Run() })

	// The state folder: same path inside and out, a shared mount.
	state, run := t.TempDir(), t.TempDir()
	for _, args := range [][]string{{"--bind", state, state}, {"--make-shared", state}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v %s", args, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("umount", "-l", state).Run() })
	instance, name := instanceName(t), fmt.Sprintf("sandboxd-test-%d", time.Now().UnixNano())
	out, err := exec.Command("docker", "run", "-d", "--name", name,
		"--cap-add", "SYS_ADMIN", "--security-opt", "apparmor=unconfined",
		"-v", "/var/run/docker.sock:/var/run/docker.sock",
		"-v", state+":"+state+":rshared",
		"-v", run+":/run/sandboxd",
		"-v", "/sys/fs/cgroup:/host/sys/fs/cgroup:ro",
		tag, "--backend", "docker", "--state-dir", state, "--instance", instance).CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		// docker stop sends SIGTERM: the daemon cleans up after itself.
		exec.Command("docker", "stop", "-t", "30", name).Run()
		exec.Command("docker", "rm", "-f", name).Run()
		removeContainers(t, instance)
	})
	d := &daemon{t: t, socket: filepath.Join(run, "sandboxd.sock"), log: &testutil.Buffer{}, exited: make(chan error)}
	d.waitHealthy()
	input := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(input, []byte("from the host"), 0o644)
	stdout, stderr, code := runCLI(t, d, "--file", input, "--lang", "python", "-c",
		"open('out.txt', 'w').write('x'); print(open('/input/in.txt').read(), sorted(__import__('os').listdir('.')))")
	if stdout != "from the host ['out.txt']\n" || code != 0 || !strings.Contains(stderr, "peak memory") {
		logs, _ := exec.Command("docker", "logs", name).CombinedOutput()
		t.Fatalf("run through the containerized daemon: %q %q %d\n%s", stdout, stderr, code, logs)
	}

	// In its own PID namespace the daemon cannot enter an allow-listed
	// container's network namespace through its process: it refuses to
	// start with network rules, saying why and what to do, rather than
	// fail every allow-listed run.
	other := t.TempDir()
	refused, err := exec.Command("docker", "run", "--rm",
		"--cap-add", "SYS_ADMIN", "--security-opt", "apparmor=unconfined",
		"-v", "/var/run/docker.sock:/var/run/docker.sock",
		"-v", state+":"+state+":rshared",
		"-v", other+":/run/sandboxd",
		"-v", "/sys/fs/cgroup:/host/sys/fs/cgroup:ro",
		tag, "--backend", "docker", "--state-dir", state, "--instance", instance+"-egress", "--egress-allow", "files.test:8080").CombinedOutput()
	if err == nil || !strings.Contains(string(refused), "another PID namespace than dockerd") || !strings.Contains(string(refused), "--pid=host") {
		t.Errorf("the containerized daemon with network rules: %v, want a refusal naming the PID namespace:\n%s", err, refused)
	}
}

// runDigest runs code through the CLI and returns its bundle's digest.
func runDigest(t *testing.T, d *daemon, args ...string) string {
	t.Helper()
	stdout, stderr, _ := runCLI(t, d, append([]string{"-q", "--json"}, args...)...)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var ev struct {
		Result struct {
			BundleDigest string `json:"bundleDigest"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &ev); err != nil || ev.Result.BundleDigest == "" {
		t.Fatalf("no bundle digest in %q (%s): %v", stdout, stderr, err)
	}
	return ev.Result.BundleDigest
}

// cli runs a sandboxd command and returns its combined output and exit code.
func cli(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

func TestBundleVerifyInspectReplay(t *testing.T) {
	requireDocker(t)
	d := startDaemon(t, t.TempDir(), instanceName(t))
	dir := t.TempDir()

	det := runDigest(t, d, "--lang", "python", "-c", "print(sum(range(10)), hash('x')); open('out.txt', 'w').write('42')")
	detFile := filepath.Join(dir, "det.tar.zst")
	if out, code := cli(t, "bundle", "get", det, "-o", detFile, "--socket", d.socket); code != 0 {
		t.Fatalf("bundle get: %d %s", code, out)
	}
	if out, code := cli(t, "verify", "--digest", det, detFile); code != 0 || !strings.Contains(out, "sound bundle "+det) {
		t.Fatalf("verify: %d %s", code, out)
	}
	if out, code := cli(t, "inspect", detFile); code != 0 || !strings.Contains(out, "output        out.txt: file") || !strings.Contains(out, "PYTHONHASHSEED=0") {
		t.Fatalf("inspect: %d %s", code, out)
	}
	out, code := cli(t, "replay", "--socket", d.socket, detFile)
	if code != 0 || !strings.Contains(out, "reproduced: all 5 checks match") {
		t.Fatalf("replay of a deterministic run: exit %d\n%s", code, out)
	}
	checkBundleSignature(t, d, detFile, det)

	rnd := runDigest(t, d, "--lang", "python", "-c", "import random; print(random.random())")
	rndFile := filepath.Join(dir, "rnd.tar.zst")
	if out, code := cli(t, "bundle", "get", rnd, "-o", rndFile, "--socket", d.socket); code != 0 {
		t.Fatalf("bundle get: %d %s", code, out)
	}
	out, code = cli(t, "replay", "--socket", d.socket, rndFile)
	if code != 1 || !strings.Contains(out, "DIFFERS  stdout") || !strings.Contains(out, "NOT reproduced") {
		t.Fatalf("replay of print(random.random()): exit %d\n%s", code, out)
	}

	// One flipped byte: refused, by verify, inspect and replay alike.
	data, _ := os.ReadFile(detFile)
	data[len(data)/2] ^= 1
	bad := filepath.Join(dir, "bad.tar.zst")
	os.WriteFile(bad, data, 0o644)
	for _, args := range [][]string{{"verify", bad}, {"inspect", bad}, {"replay", "--socket", d.socket, bad}} {
		if out, code := cli(t, args...); code != 1 || !strings.Contains(out, "REFUSED") {
			t.Errorf("%s of a tampered bundle: exit %d %s", args[0], code, out)
		}
	}
}

// TestKill9WhileBundleIsWritten kills the daemon while it writes a large
// bundle; after a restart no partial bundle is visible and every stored one
// verifies.
func TestKill9WhileBundleIsWritten(t *testing.T) {
	requireDocker(t)
	state, instance := t.TempDir(), instanceName(t)
	d := startDaemon(t, state, instance, "--max-output-bytes", "200MiB", "--bundle-max-bytes", "512MiB")
	store := filepath.Join(state, "artifacts", "sha256")
	runDigest(t, d, "--lang", "python", "-c", "print('a small bundle first')")

	// 160 MiB of random output files take the daemon a while to bundle.
	big := exec.Command(binary, "run", "--socket", d.socket, "--disk", "512MiB", "--memory", "1GiB", "--lang", "python", "-c",
		"import os\nfor i in range(10):\n    open(f'big{i}', 'wb').write(os.urandom(16 << 20))")
	if err := big.Start(); err != nil {
		t.Fatal(err)
	}
	defer big.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for {
		tmps, _ := filepath.Glob(filepath.Join(store, ".tmp-*"))
		if len(tmps) > 0 {
			if info, err := os.Stat(tmps[0]); err == nil && info.Size() > 1<<20 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon never wrote a large bundle\n%s", d.log)
		}
		time.Sleep(2 * time.Millisecond)
	}
	d.cmd.Process.Kill()
	<-d.exited

	startDaemon(t, state, instance)
	entries, _ := os.ReadDir(store)
	if len(entries) == 0 {
		t.Fatal("no bundle survived")
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Fatalf("a partial bundle is visible after the restart: %s", e.Name())
		}
		if owner, ok := strings.CutSuffix(e.Name(), ".tenant"); ok {
			if _, err := os.Stat(filepath.Join(store, owner+".tar.zst")); err != nil {
				t.Fatalf("an owner record without its bundle: %s", e.Name())
			}
			continue
		}
		if signed, ok := strings.CutSuffix(e.Name(), artifacts.AttestationSuffix); ok {
			if _, err := os.Stat(filepath.Join(store, signed+".tar.zst")); err != nil {
				t.Fatalf("a signature without its bundle: %s", e.Name())
			}
			continue
		}
		if out, code := cli(t, "verify", filepath.Join(store, e.Name())); code != 0 {
			t.Fatalf("a stored bundle does not verify after the crash: %s", out)
		}
	}
}

// TestContainerdBackend serves on containerd and runs code under runc and
// runsc there; bad backend and runtime names are refused.
func TestContainerdBackend(t *testing.T) {
	requireDocker(t)
	if err := exec.Command("ctr", "--address", "/run/containerd/containerd.sock", "version").Run(); err != nil {
		testutil.SkipOrFail(t, "no standalone containerd (scripts/setup.sh starts one)")
	}
	if out, code := cli(t, "serve", "--backend", "podman"); code == 0 || !strings.Contains(out, "--backend \"podman\"") {
		t.Fatalf("an unknown backend: exit %d %s", code, out)
	}
	instance := instanceName(t)
	d := startDaemon(t, t.TempDir(), instance, "--backend", "containerd")
	for _, rt := range []string{"runc", "runsc"} {
		stdout, stderr, code := runCLI(t, d, "--runtime", rt, "--lang", "python", "-c", "print(open('/proc/version').read().split()[2])")
		if code != 0 || stdout == "" {
			t.Fatalf("%s on containerd: exit %d %q %s", rt, code, stdout, stderr)
		}
		if gvisor := strings.Contains(stdout, "gvisor"); gvisor != (rt == "runsc") {
			t.Errorf("%s on containerd ran on kernel %q", rt, stdout)
		}
	}
	_, stderr, code := runCLI(t, d, "--runtime", "kata", "--lang", "python", "-c", "print(1)")
	if code != 125 || !strings.Contains(stderr, "InvalidArgument") || !strings.Contains(stderr, "runtime") {
		t.Fatalf("an unknown runtime: exit %d %s", code, stderr)
	}
	out, _ := cli(t, "images", "--socket", d.socket)
	if !strings.Contains(out, "backend: containerd") || !strings.Contains(out, "runsc") {
		t.Fatalf("images on containerd:\n%s", out)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left, _ := exec.Command("ctr", "--address", "/run/containerd/containerd.sock", "-n", "sandboxd", "containers", "ls", "-q").Output()
		if !strings.Contains(string(left), instance) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("containers left in containerd: %s", left)
		}
	}
}

// TestRequireRunsc refuses runc with PERMISSION_DENIED, and a daemon that
// requires runsc refuses to start where there is none.
func TestRequireRunsc(t *testing.T) {
	requireDocker(t)
	d := startDaemon(t, t.TempDir(), instanceName(t), "--require-runsc")
	if stdout, _, code := runCLI(t, d, "--lang", "python", "-c", "print(open('/proc/version').read())"); code != 0 || !strings.Contains(stdout, "gvisor") {
		t.Fatalf("the default under --require-runsc: exit %d %q", code, stdout)
	}
	if _, stderr, code := runCLI(t, d, "--runtime", "runc", "--lang", "python", "-c", "print(1)"); code != 125 || !strings.Contains(stderr, "PermissionDenied") {
		t.Fatalf("runc under --require-runsc: exit %d %s", code, stderr)
	}
	// A containerd backend without runsc at the configured path.
	out, code := cli(t, "serve", "--socket", filepath.Join(t.TempDir(), "s.sock"), "--state-dir", t.TempDir(),
		"--artifacts-dir", t.TempDir(), "--instance", instanceName(t), "--backend", "containerd",
		"--runsc-path", "/nonexistent/runsc", "--require-runsc")
	if code == 0 || !strings.Contains(out, "runsc") || !strings.Contains(out, "not installed") {
		t.Fatalf("--require-runsc without runsc: exit %d %s", code, out)
	}
}

// TestPool runs warm through the CLI, then kills the daemon with a full
// pool: after a restart nothing of it is left.
func TestPool(t *testing.T) {
	requireDocker(t)
	state, instance := t.TempDir(), instanceName(t)
	d := startDaemon(t, state, instance, "--pool-size", "2")
	// Two containers of every image of the catalog, and of those whose
	// recipe pre-loads modules two more that loaded them.
	pooled := len(images.Default().Images)
	for _, r := range images.Default().Recipes {
		if len(r.Preimport) > 0 {
			pooled++
		}
	}
	waitPool := func() {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			out, _ := cli(t, "images", "--socket", d.socket)
			if strings.Count(out, "2 of 2") == pooled {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pool did not fill:\n%s", out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitPool()
	if stdout, stderr, code := runCLI(t, d, "--lang", "python", "-c", "print(6*7)"); stdout != "42\n" || code != 0 || !strings.Contains(stderr, "[warm,") {
		t.Fatalf("a warm run: %q %q %d", stdout, stderr, code)
	}
	if _, stderr, _ := runCLI(t, d, "--disk", "8MiB", "--lang", "python", "-c", "print(1)"); !strings.Contains(stderr, "[cold,") {
		t.Fatalf("a run with its own disk size should be cold: %s", stderr)
	}
	waitPool()
	if n := len(waitContainers(t, instance, 2*pooled)); n != 2*pooled {
		t.Fatalf("%d containers with a full pool, want %d", n, 2*pooled)
	}
	d.cmd.Process.Kill()
	<-d.exited
	startDaemon(t, state, instance) // pool off: what is left is the last one's
	if left := containers(t, instance); len(left) != 0 {
		t.Fatalf("containers left after kill -9 and restart: %v", left)
	}
	if entries, _ := os.ReadDir(filepath.Join(state, "tasks", instance)); len(entries) != 0 {
		t.Fatalf("task folders left after kill -9 and restart: %v", entries)
	}
}

// sessionCLI runs `sandboxd session VERB ARGS` against d.
func sessionCLI(t *testing.T, d *daemon, args ...string) (string, int) {
	t.Helper()
	return cli(t, append([]string{"session", args[0], "--socket", d.socket}, args[1:]...)...)
}

// TestSessionThroughTheCLIAndKill9 drives a session with the CLI, kills
// the daemon with -9 in the middle of a call, and checks that the restart
// leaves nothing and reports the session lost.
func TestSessionThroughTheCLIAndKill9(t *testing.T) {
	requireDocker(t)
	state, instance := t.TempDir(), instanceName(t)
	auditLog := filepath.Join(t.TempDir(), "audit.log")
	d := startDaemon(t, state, instance, "--audit-log", auditLog)
	out, code := sessionCLI(t, d, "create", "--lang", "python")
	id := strings.TrimSpace(out)
	if code != 0 || len(id) != 24 {
		t.Fatalf("session create: %q, exit %d", out, code)
	}
	if stdout, stderr, code := runCLI(t, d, "--session", id, "--lang", "python", "-c", "x = 6"); code != 0 {
		t.Fatalf("first call: %q %q %d", stdout, stderr, code)
	}
	if stdout, stderr, code := runCLI(t, d, "--session", id, "--lang", "python", "-c", "x * 7"); stdout != "42\n" || !strings.Contains(stderr, "call 2") || code != 0 {
		t.Fatalf("second call: %q %q %d", stdout, stderr, code)
	}
	local := filepath.Join(t.TempDir(), "data.csv")
	os.WriteFile(local, []byte("a,b\n1,2\n"), 0o644)
	if out, code := sessionCLI(t, d, "upload", id, local); code != 0 || !strings.Contains(out, "uploaded /workspace/data.csv") {
		t.Fatalf("session upload: %q %d", out, code)
	}
	if out, code := sessionCLI(t, d, "download", id, "data.csv"); code != 0 || out != "a,b\n1,2\n" {
		t.Fatalf("session download: %q %d", out, code)
	}
	if out, code := sessionCLI(t, d, "list"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "ACTIVE") {
		t.Fatalf("session list: %q %d", out, code)
	}
	// A call is running when the daemon dies.
	call := exec.Command(binary, "run", "--socket", d.socket, "--session", id, "--lang", "python", "-c", "import time\nprint('running', flush=True)\ntime.sleep(60)")
	stdout, _ := call.StdoutPipe()
	if err := call.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 8)
	io.ReadFull(stdout, line)
	d.cmd.Process.Kill()
	<-d.exited
	call.Wait()
	if n := len(containers(t, instance)); n < 1 {
		t.Fatalf("%d containers after kill -9, want the session's left behind", n)
	}
	d = startDaemon(t, state, instance, "--audit-log", auditLog)
	if left := containers(t, instance); len(left) != 0 {
		t.Fatalf("containers left after restart: %v", left)
	}
	if entries, _ := os.ReadDir(filepath.Join(state, "tasks", instance)); len(entries) != 0 {
		t.Fatalf("task folders left after restart: %v", entries)
	}
	out, code = sessionCLI(t, d, "get", id)
	if code != 0 || !strings.Contains(out, "LOST") || !strings.Contains(out, "restarted") {
		t.Fatalf("session get after the restart: %q %d", out, code)
	}
	if _, stderr, code := runCLI(t, d, "--session", id, "--sh", "true"); code != 125 || !strings.Contains(stderr, "LOST") {
		t.Fatalf("a call in the lost session: %q %d", stderr, code)
	}
	// The audit chain goes on across the kill: the session's creation, its
	// calls and the upload, the call cut by the kill (accepted, never
	// ended), the loss, and the refused call.
	if out, code := cli(t, "audit", "verify", auditLog); code != 0 || !strings.Contains(out, "sound chain") {
		t.Fatalf("audit verify after kill -9: %q %d", out, code)
	}
	var kinds []string
	for _, e := range auditEvents(t, auditLog) {
		if e.SessionID != id {
			t.Errorf("an audit line of another session: %+v", e)
		}
		kind := e.Kind + ":" + e.Decision + e.Session + e.Code
		if strings.HasPrefix(e.Reason, "upload data.csv (8 bytes") {
			kind += "(upload)"
		}
		kinds = append(kinds, kind)
	}
	want := "session:created decision:accepted run_end: decision:accepted run_end: decision:accepted(upload) decision:accepted session:lost decision:refusedFAILED_PRECONDITION"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("audit log:\n got %s\nwant %s", got, want)
	}
}

// TestSessionDataAnalysisOverGRPC is an agent harness's session through
// the generated gRPC client: a CSV in, 20 calls of analysis with state
// kept, a chart out, a file read back, and nothing left at the end.
func TestSessionDataAnalysisOverGRPC(t *testing.T) {
	requireDocker(t)
	d := startDaemon(t, t.TempDir(), instanceName(t))
	conn := d.conn()
	defer conn.Close()
	api := pb.NewSandboxServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	csv := "region,units,price\n"
	for i := range 40 {
		csv += fmt.Sprintf("%s,%d,%d\n", []string{"north", "south", "east", "west"}[i%4], i+1, i%7+1)
	}
	info, err := api.CreateSession(ctx, &pb.CreateSessionRequest{Language: "python", Options: &pb.RunOptions{
		Files: []*pb.File{{Path: "sales.csv", Content: []byte(csv)}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := info.GetSessionId()
	up, err := api.UploadFile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	up.Send(&pb.UploadFileRequest{Part: &pb.UploadFileRequest_Header{Header: &pb.UploadHeader{SessionId: id, Path: "targets.csv"}}})
	up.Send(&pb.UploadFileRequest{Part: &pb.UploadFileRequest_Data{Data: []byte("region,target\nnorth,100\nsouth,200\n")}})
	if _, err := up.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	call := func(code string) (*pb.Result, string) {
		t.Helper()
		r, out, err := runToEnd(ctx, api, &pb.RunCodeRequest{Language: "python", Code: code, Options: &pb.RunOptions{SessionId: id}})
		if err != nil {
			t.Fatalf("%q: %v", code, err)
		}
		return r, out
	}
	value := func(r *pb.Result) string { return r.GetKernel().GetResult()["text/plain"] }
	steps := []struct {
		code, want string
	}{
		{"import pandas as pd\ndf = pd.read_csv('/input/sales.csv')", ""},
		{"df.shape", "(40, 3)"},
		{"df['revenue'] = df.units * df.price", ""},
		{"int(df.revenue.sum())", ""},
		{"t = pd.read_csv('targets.csv')", ""},
		{"len(t)", "2"},
		{"by = df.groupby('region').revenue.sum()", ""},
		{"m = t.merge(by.reset_index(), on='region')", ""},
		{"list(m.columns)", "['region', 'target', 'revenue']"},
		{"(m.revenue >= m.target).tolist()", ""},
		{"df.units.max()", "40"},
		{"df[df.region == 'east'].shape[0]", "10"},
		{"import numpy as np\nround(float(np.corrcoef(df.units, df.revenue)[0, 1]), 1) > 0", "True"},
		{"df.describe().loc['mean', 'units']", "20.5"},
		{"import matplotlib.pyplot as plt\nby.plot(kind='bar')\nplt.show()", ""},
		{"m.to_csv('/workspace/report.csv', index=False)", ""},
		{"print(open('/workspace/report.csv').readline().strip())", ""},
		{"x = 1", ""},
		{"x += 1\nx", "2"},
		{"sorted(df.region.unique())", "['east', 'north', 'south', 'west']"},
	}
	var chart *pb.DisplayFile
	var prev, chartBundle string
	for i, s := range steps {
		r, out := call(s.code)
		if r.GetStatus() != pb.Status_OK || (s.want != "" && value(r) != s.want) {
			t.Fatalf("call %d %q: %s (%s), value %q, want %q", i+1, s.code, r.GetStatus(), r.GetMessage(), value(r), s.want)
		}
		if c := r.GetSession(); c.GetSeq() != int64(i+1) || c.GetParentBundle() != prev {
			t.Fatalf("call %d: session part %v, previous bundle %s", i+1, c, prev)
		}
		prev = r.GetBundleDigest()
		if ds := r.GetKernel().GetDisplays(); len(ds) > 0 && len(ds[0].GetFiles()) > 0 {
			chart, chartBundle = ds[0].GetFiles()[0], r.GetBundleDigest()
		}
		if i == 16 && out != "region,target,revenue\n" {
			t.Errorf("print in call 17: %q", out)
		}
	}
	if chart == nil || chart.GetMime() != "image/png" || chart.GetSize() == 0 {
		t.Fatalf("no chart: %v", chart)
	}
	readAll := func(stream grpc.ServerStreamingClient[pb.FileChunk], err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var b []byte
		for {
			chunk, err := stream.Recv()
			if err == io.EOF {
				return b
			}
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, chunk.GetData()...)
		}
	}
	png := readAll(api.GetFile(ctx, &pb.GetFileRequest{BundleDigest: chartBundle, Path: chart.GetPath()}))
	if sum := sha256.Sum256(png); hex.EncodeToString(sum[:]) != chart.GetSha256() {
		t.Errorf("GetFile(the chart) returned %d bytes that are not the display's", len(png))
	}
	report := readAll(api.ReadFile(ctx, &pb.ReadFileRequest{SessionId: id, Path: "report.csv"}))
	if !strings.HasPrefix(string(report), "region,target,revenue\n") {
		t.Errorf("ReadFile(report.csv) = %q", report)
	}
	list, err := api.ListFiles(ctx, &pb.ListFilesRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range list.GetFiles() {
		paths = append(paths, f.GetPath())
	}
	if !strings.Contains(strings.Join(paths, " "), "report.csv") || !strings.Contains(strings.Join(paths, " "), chart.GetPath()) {
		t.Errorf("ListFiles() = %v", paths)
	}
	if ended, err := api.DeleteSession(ctx, &pb.DeleteSessionRequest{SessionId: id}); err != nil || ended.GetState() != pb.SessionState_SESSION_STATE_DELETED {
		t.Fatalf("DeleteSession() = %v, %v", ended, err)
	}
	if left := waitContainers(t, d.instance, 0); len(left) != 0 {
		t.Fatalf("containers left: %v", left)
	}
}

// TestMetricsEndpoint scrapes a daemon's /metrics after runs: the counters
// match the runs made, and the exposition passes promlint, as `promtool
// check metrics` runs it.
func TestMetricsEndpoint(t *testing.T) {
	requireDocker(t)
	addr, mcpAddr := freeAddr(t), freeAddr(t)
	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("metrics-token-0123456789\n"), 0o600)
	d := startDaemon(t, t.TempDir(), instanceName(t), "--metrics-listen", addr, "--mcp-listen", mcpAddr, "--token-file", token)
	// An MCP request without the token, refused at the door.
	if resp, err := http.Post("http://"+mcpAddr+"/mcp", "application/json", strings.NewReader(`{}`)); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("MCP without a token: %v %v", resp, err)
	}
	// And one with it: counted by its JSON-RPC method too.
	init, _ := http.NewRequest("POST", "http://"+mcpAddr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize",`+
		`"params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"metrics-test","version":"1"}}}`))
	init.Header.Set("Authorization", "Bearer metrics-token-0123456789")
	init.Header.Set("Content-Type", "application/json")
	init.Header.Set("Accept", "application/json, text/event-stream")
	if resp, err := http.DefaultClient.Do(init); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("MCP initialize: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	for range 2 {
		if stdout, stderr, code := runCLI(t, d, "--lang", "python", "-c", "print(1)"); code != 0 {
			t.Fatalf("run: %q %q %d", stdout, stderr, code)
		}
	}
	if _, _, code := runCLI(t, d, "--lang", "cobol", "-c", "x"); code == 0 {
		t.Fatal("a run in an unknown language was accepted")
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	text := string(body)
	// The default runtime: crun where the backend has it, else runc.
	rt := "runc"
	if out, _ := cli(t, "images", "--socket", d.socket); regexp.MustCompile(`(?m)^crun\s+\S+\s+yes`).MatchString(out) {
		rt = "crun"
	}
	for _, want := range []string{
		`sandboxd_runs_total{language="python",runtime="` + rt + `",start="cold",status="OK",tenant="operator"} 2`,
		`sandboxd_run_refusals_total{code="INVALID_ARGUMENT",quota="",tenant="operator"} 1`,
		`sandboxd_run_duration_seconds_count{runtime="` + rt + `"} 2`,
		`sandboxd_output_bytes_total{stream="stdout"} 4`,
		`sandboxd_runs_active 0`,
		`sandboxd_runs_queued 0`,
		`sandboxd_mcp_requests_total{method="initialize",outcome="ok",tool=""} 1`,
		`sandboxd_admission_slots_used 0`,
		`sandboxd_sessions_active 0`,
		`sandboxd_build_info{goversion="go1.`,
		// Every call of the API, by method and code.
		`grpc_server_handled_total{grpc_code="OK",grpc_method="RunCode",grpc_service="sandboxd.v1.SandboxService",grpc_type="server_stream"} 2`,
		`grpc_server_handled_total{grpc_code="InvalidArgument",grpc_method="RunCode",grpc_service="sandboxd.v1.SandboxService",grpc_type="server_stream"} 1`,
		`sandboxd_mcp_http_requests_total{code="401",method="post"} 1`,
		`grpc_server_handling_seconds_count{grpc_method="RunCode",grpc_service="sandboxd.v1.SandboxService",grpc_type="server_stream"} 3`,
		`go_goroutines `,
		`process_resident_memory_bytes `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !regexp.MustCompile(`(?m)^sandboxd_bundle_store_bytes [1-9]`).MatchString(text) {
		t.Error("/metrics reports no stored bundle bytes")
	}
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %+v", err, problems)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code := httpStatus(t, "http://"+addr+path); code != http.StatusOK {
			t.Errorf("GET %s: %d", path, code)
		}
	}
	// The operator's log: a line per run, with its status.
	if n := strings.Count(d.log.String(), `msg="run ended"`); n != 2 {
		t.Errorf("%d run lines in the daemon's log, want 2:\n%s", n, d.log)
	}
}

// httpStatus is the status code of a GET of url.
func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// TestTLSAndMutualTLS serves gRPC and MCP over TLS with a CA the test made:
// a client that checks the daemon's certificate and sends the token runs
// code, one in the clear does not; then with client certificates
// required, one of the CA runs code named by its certificate, and one
// without a certificate, or with one of another CA, is turned away.
func TestTLSAndMutualTLS(t *testing.T) {
	requireDocker(t)
	ca, other := testutil.NewTestCA(t, "sandboxd-test-ca"), testutil.NewTestCA(t, "another-ca")
	srvCert, srvKey := ca.Server("sandboxd")
	cliCert, cliKey := ca.Client("team-a")
	strayCert, strayKey := other.Client("stray")
	run := func(addr string, args ...string) (string, error) {
		out, err := exec.Command(binary, append(append([]string{"run", "--addr", addr}, args...), "--lang", "python", "-c", "print(1)")...).CombinedOutput()
		return string(out), err
	}

	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("s3cret-token-0123456789\n"), 0o600)
	addr := freeAddr(t)
	d := startDaemon(t, t.TempDir(), instanceName(t), "--listen", addr, "--token-file", token, "--tls-cert", srvCert, "--tls-key", srvKey)
	if out, err := run(addr, "--tls-ca", ca.File, "--token-file", token); err != nil || !strings.HasPrefix(out, "1\n") {
		t.Fatalf("over TLS with the token: %v %q", err, out)
	}
	if out, err := run(addr, "--token-file", token); err == nil {
		t.Fatalf("in the clear to a TLS listener: %q", out)
	}
	if out, err := run(addr, "--tls-ca", other.File, "--token-file", token); err == nil || !strings.Contains(out, "does not chain to --tls-ca") {
		t.Fatalf("trusting another CA: %v %q", err, out)
	}
	d.stop()

	grpcAddr, mcpAddr := freeAddr(t), freeAddr(t)
	auditLog := filepath.Join(t.TempDir(), "audit.log")
	startDaemon(t, t.TempDir(), instanceName(t), "--listen", grpcAddr, "--mcp-listen", mcpAddr,
		"--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", ca.File, "--audit-log", auditLog)
	if out, err := run(grpcAddr, "--tls-ca", ca.File, "--tls-cert", cliCert, "--tls-key", cliKey); err != nil || !strings.HasPrefix(out, "1\n") {
		t.Fatalf("mutual TLS: %v %q", err, out)
	}
	// Each refusal says what to pass.
	for name, tt := range map[string]struct {
		args []string
		hint string
	}{
		"no client certificate":            {[]string{"--tls-ca", ca.File}, "pass --tls-cert and --tls-key"},
		"a certificate of another CA":      {[]string{"--tls-ca", ca.File, "--tls-cert", strayCert, "--tls-key", strayKey}, "pass --tls-cert and --tls-key"},
		"in the clear with no certificate": {nil, "pass --tls-ca"},
	} {
		if out, err := run(grpcAddr, tt.args...); err == nil || !strings.Contains(out, tt.hint) {
			t.Errorf("%s: %v %q, want a hint to %s", name, err, out, tt.hint)
		}
	}
	ev := auditEvents(t, auditLog)
	if len(ev) == 0 || ev[0].Decision != audit.Accepted || ev[0].Tenant != "team-a" {
		t.Fatalf("the run over mutual TLS is not team-a's in the audit log: %+v", ev)
	}

	// MCP over the same TLS: initialize with and without a certificate.
	mcpPost := func(cert, key string) (int, error) {
		cfg, err := tlsconf.Files{CAFile: ca.File, CertFile: cert, KeyFile: key}.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 30 * time.Second}
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
		req, _ := http.NewRequest(http.MethodPost, "https://"+mcpAddr+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := mcpPost(cliCert, cliKey); err != nil || code != http.StatusOK {
		t.Fatalf("MCP over mutual TLS: %d %v", code, err)
	}
	if code, err := mcpPost("", ""); err == nil {
		t.Fatalf("MCP without a client certificate: %d", code)
	}
}

// TestRefusesToStartWhereTheEngineCannotSeeItsMounts is issue 29's daemon
// in a mount namespace of its own (as a systemd unit with private mounts
// or a container without a shared mount puts it): it used to serve, and
// every containerd run failed with runc's "can't get final child's PID
// from pipe: EOF". It now refuses at start, naming the folder and the fix,
// on both backends, having mounted nothing.
func TestRefusesToStartWhereTheEngineCannotSeeItsMounts(t *testing.T) {
	requireDocker(t)
	for _, backend := range []string{"docker", "containerd"} {
		t.Run(backend, func(t *testing.T) {
			state := t.TempDir()
			instance := instanceName(t)
			t.Cleanup(func() { scrub(t, state, instance) })
			cmd := exec.Command("unshare", "--mount", "--propagation", "private", binary, "serve", "--backend", backend,
				"--socket", filepath.Join(t.TempDir(), "sandboxd.sock"), "--state-dir", state, "--instance", instance,
				"--artifacts-dir", filepath.Join(state, "artifacts"), "--pool-size", "0")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the daemon started in a private mount namespace:\n%s", out)
			}
			for _, want := range []string{"FailedPrecondition", "does not see what sandboxd mounts under " + state, "make-rshared", "PrivateMounts="} {
				if !strings.Contains(string(out), want) {
					t.Errorf("the refusal does not say %q:\n%s", want, out)
				}
			}
			if mounts, _ := os.ReadFile("/proc/mounts"); strings.Contains(string(mounts), state) {
				t.Errorf("mounts left under %s", state)
			}
		})
	}
}

// helloHost is a test host that answers HTTP on port 8080 with body, until
// the test ends.
func helloHost(t *testing.T, body string) *testutil.Host {
	t.Helper()
	host := testutil.NewHost(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }),
		ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(host.Listen(t, 8080))
	t.Cleanup(func() { srv.Close() })
	return host
}

// TestAllowListedRunsFromAPrivateMountNamespace is the fourth review's
// third finding: a daemon in a mount namespace that does not receive the
// host's later mounts (unshare -m, a private root; its state folder shared
// both ways, as an operator shares it) served no allow-listed run on
// Docker: the cut-off of Docker's DNS server entered the container's
// network namespace through dockerd's bind mount, an empty file there, and
// every run ended RUNTIME_ERROR. It goes through the container's init's
// process now: the run reaches an allowed test host.
func TestAllowListedRunsFromAPrivateMountNamespace(t *testing.T) {
	requireDocker(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		testutil.SkipOrFail(t, "unshare (util-linux) is missing: %v", err)
	}
	host := helloHost(t, "hello from the allowed host")

	state := t.TempDir()
	for _, args := range [][]string{{"--bind", state, state}, {"--make-shared", state}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v %s", args, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("umount", "-l", state).Run() })
	d := startDaemonUnder(t, []string{"unshare", "--mount", "--propagation", "unchanged"}, state, instanceName(t),
		"--egress-allow", "allowed.test:8080", "--egress-host", "allowed.test="+host.Addr.String())
	code := `import urllib.request; print(urllib.request.urlopen("http://allowed.test:8080/", timeout=10).read().decode())`
	stdout, stderr, exit := runCLI(t, d, "--allow-host", "allowed.test:8080", "--lang", "python", "-c", code)
	if exit != 0 || strings.TrimSpace(stdout) != "hello from the allowed host" {
		t.Fatalf("an allow-listed run from a private mount namespace: exit %d, stdout %q, stderr %q\n%s", exit, stdout, stderr, d.log)
	}
	// The result, over the API, counts what went through the gateway.
	m := regexp.MustCompile(`(\d+) connections, 0 refused, ([0-9.]+[KMG]?i?B) out, ([0-9.]+[KMG]?i?B) in`).FindStringSubmatch(stderr)
	if m == nil || m[1] == "0" || m[2] == "0B" || m[3] == "0B" {
		t.Errorf("the status line does not count the connection and its bytes: %q", stderr)
	}
}

// TestTwoDaemonsNeverShareWhatTheyClaim is issue 22's neighbours on one
// host: a second daemon with the same --instance removed the first's task
// folders and broke its pool before failing on its port, and two daemons
// with the same --uid-range both served, handing out the same host uids.
// Now the second refuses before it touches anything, naming the holder;
// daemons left on the defaults take the next free block; and the claim of
// a daemon killed with -9 is taken over.
func TestTwoDaemonsNeverShareWhatTheyClaim(t *testing.T) {
	requireDocker(t)
	instance := instanceName(t)
	state := t.TempDir()
	uids := "1600000000:4096"
	a := startDaemon(t, state, instance, "--uid-range", uids)
	// A running task of a's, with its task folder: a finished one's folder
	// is a's to remove.
	_, longConn := startLongTask(t, a)
	defer longConn.Close()
	before, _ := os.ReadDir(filepath.Join(state, "tasks", instance))

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"the same instance", []string{"--instance", instance, "--uid-range", "1600100000:4096"}, fmt.Sprintf("instance %q is held by the live daemon %q", instance, instance)},
		{"an overlapping uid range", []string{"--instance", instance + "-b", "--uid-range", "1600002048:4096"}, "uid range 1600002048:4096 is held by the live daemon"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			other := t.TempDir()
			args := append([]string{"serve", "--socket", filepath.Join(t.TempDir(), "b.sock"), "--state-dir", other,
				"--artifacts-dir", filepath.Join(other, "artifacts"), "--pool-size", "0"}, tt.args...)
			out, code := cli(t, args...)
			if code == 0 || !strings.Contains(out, tt.want) || !strings.Contains(out, "AlreadyExists") {
				t.Fatalf("a second daemon: exit %d, want a refusal saying %q:\n%s", code, tt.want, out)
			}
		})
	}
	after, _ := os.ReadDir(filepath.Join(state, "tasks", instance))
	if len(after) != len(before) {
		t.Errorf("a's task folders went from %d to %d while others tried to start", len(before), len(after))
	}
	if _, stderr, code := runCLI(t, a, "--lang", "bash", "-c", "true"); code != 0 {
		t.Fatalf("a no longer serves: exit %d %s", code, stderr)
	}

	// On the defaults, the second daemon moves to the next block of uids.
	c := startDaemon(t, t.TempDir(), instance+"-c")
	d := startDaemon(t, t.TempDir(), instance+"-d")
	ranges := map[string]bool{}
	for _, dm := range []*daemon{c, d} {
		out, stderr, code := runCLI(t, dm, "--lang", "bash", "-c", "id -u")
		if code != 0 {
			t.Fatalf("exit %d %s", code, stderr)
		}
		uid, _ := strconv.ParseUint(strings.TrimSpace(out), 10, 32)
		def := hostuid.DefaultRange()
		ranges[fmt.Sprint((uid-uint64(def.First))/uint64(def.Count))] = true
	}
	if len(ranges) != 2 {
		t.Errorf("two daemons on the default uid range ran their tasks in the same block: %v\n%s", ranges, d.log)
	}

	// kill -9: the claim is stale, and the same instance starts again.
	a.cmd.Process.Kill()
	<-a.exited
	startDaemon(t, state, instance, "--uid-range", uids)
}

// TestEgressSubnetsAreClaimedOnContainerd is item 3 of the third review
// where Docker's IPAM had hidden it: on containerd nothing but sandboxd's
// claim keeps two daemons' egress gateways off one subnet. An overlapping
// --egress-subnet is refused naming its holder, before anything of the
// host is touched; two daemons on the default subnet each take their own.
func TestEgressSubnetsAreClaimedOnContainerd(t *testing.T) {
	requireDocker(t)
	if err := exec.Command("ctr", "--address", "/run/containerd/containerd.sock", "version").Run(); err != nil {
		testutil.SkipOrFail(t, "no standalone containerd (scripts/setup.sh starts one)")
	}
	instance := instanceName(t)
	// The gateway's rules name a test host that is never asked for.
	egress := []string{"--backend", "containerd", "--egress-allow", "files.test:8080"}
	startDaemon(t, t.TempDir(), instance, append(egress, "--egress-subnet", "100.77.0.0/24", "--uid-range", "1610000000:4096")...)

	other := t.TempDir()
	out, code := cli(t, append([]string{"serve", "--socket", filepath.Join(t.TempDir(), "b.sock"), "--state-dir", other, "--instance", instance + "-b",
		"--artifacts-dir", filepath.Join(other, "artifacts"), "--pool-size", "0",
		"--egress-subnet", "100.77.0.128/25", "--uid-range", "1610100000:4096"}, egress...)...)
	if code == 0 || !strings.Contains(out, "egress subnet 100.77.0.128/25 is held by the live daemon") || !strings.Contains(out, "AlreadyExists") {
		t.Fatalf("a daemon on an overlapping egress subnet: exit %d, want a refusal naming the holder:\n%s", code, out)
	}
	if entries, _ := os.ReadDir(other); len(entries) > 1 {
		t.Errorf("the refused daemon made %d entries in its state folder", len(entries))
	}

	c := startDaemon(t, t.TempDir(), instance+"-c", egress...)
	d := startDaemon(t, t.TempDir(), instance+"-d", egress...)
	subnets := map[string]bool{}
	for _, dm := range []*daemon{c, d} {
		for _, line := range strings.Split(dm.log.String(), "\n") {
			if i := strings.Index(line, "egress_subnet="); i >= 0 {
				subnets[strings.Fields(line[i:])[0]] = true
			}
		}
	}
	if len(subnets) != 1 {
		t.Errorf("the second daemon on the default subnet said %v; want it to move to a subnet of its own:\n%s", subnets, d.log)
	}
}

// checkBundleSignature checks the signature bundle get wrote beside file, as a
// reviewer on another machine would: a copy of the bundle and its
// signature in another folder, the daemon's public key alone. Another
// daemon's key, and a bundle without its signature, are refused.
func checkBundleSignature(t *testing.T, d *daemon, file, digest string) {
	t.Helper()
	elsewhere := t.TempDir()
	pub, _, code := daemonCLI(t, d, "images", "--public-key")
	if code != 0 || !strings.HasPrefix(pub, "-----BEGIN PUBLIC KEY-----") {
		t.Fatalf("images --public-key: %d %q", code, pub)
	}
	key := filepath.Join(elsewhere, "daemon.pem")
	os.WriteFile(key, []byte(pub), 0o644)
	copied := filepath.Join(elsewhere, filepath.Base(file))
	for _, suffix := range []string{"", artifacts.AttestationSuffix} {
		b, err := os.ReadFile(file + suffix)
		if err != nil {
			t.Fatalf("bundle get wrote no %s: %v", file+suffix, err)
		}
		os.WriteFile(copied+suffix, b, 0o644)
	}
	out, code := cli(t, "verify", "--digest", digest, "--key", key, copied)
	if code != 0 || !strings.Contains(out, "signed by key") || !strings.Contains(out, "result OK") {
		t.Fatalf("verify --key: %d %s", code, out)
	}
	foreign, _ := cli(t, "key", "public", "--state-dir", t.TempDir())
	foreignKey := filepath.Join(elsewhere, "other.pem")
	os.WriteFile(foreignKey, []byte(foreign), 0o644)
	if out, code := cli(t, "verify", "--key", foreignKey, copied); code != 1 || !strings.Contains(out, "REFUSED") || !strings.Contains(out, "not signed by key") {
		t.Errorf("verify with another daemon's key: %d %s", code, out)
	}
	os.Remove(copied + artifacts.AttestationSuffix)
	if out, code := cli(t, "verify", "--key", key, copied); code != 1 || !strings.Contains(out, "no signature") {
		t.Errorf("verify --key of an unsigned copy: %d %s", code, out)
	}
}

// TestCertificateAndTokenRotate: the server certificate and the token
// file, replaced on disk, are taken up by SIGHUP without a restart: new
// calls need the new ones, and a run streaming over a connection made
// before goes on to its end.
func TestCertificateAndTokenRotate(t *testing.T) {
	requireDocker(t)
	one, two := testutil.NewTestCA(t, "ca-one"), testutil.NewTestCA(t, "ca-two")
	srvCert, srvKey := one.Server("sandboxd")
	dir := t.TempDir()
	token, oldToken := filepath.Join(dir, "token"), filepath.Join(dir, "old-token")
	os.WriteFile(token, []byte("first-token-0123456789\n"), 0o600)
	os.WriteFile(oldToken, []byte("first-token-0123456789\n"), 0o600)
	addr := freeAddr(t)
	d := startDaemon(t, t.TempDir(), instanceName(t), "--listen", addr, "--token-file", token, "--tls-cert", srvCert, "--tls-key", srvKey)
	run := func(ca, tok string, code string) *exec.Cmd {
		return exec.Command(binary, "run", "--addr", addr, "--tls-ca", ca, "--token-file", tok, "--retry-within", "0", "--lang", "python", "-c", code)
	}

	long := run(one.File, oldToken, "import time\nprint('before', flush=True)\ntime.sleep(3)\nprint('after')")
	out, err := long.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 7)
	if _, err := io.ReadFull(out, first); err != nil || string(first) != "before\n" {
		t.Fatalf("the long run: %q %v", first, err)
	}

	newCert, newKey := two.Server("sandboxd")
	for from, to := range map[string]string{newCert: srvCert, newKey: srvKey} {
		b, _ := os.ReadFile(from)
		os.WriteFile(to, b, 0o600)
	}
	os.WriteFile(token, []byte("second-token-0123456789\n"), 0o600)
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, func() bool {
		l := d.log.String()
		return strings.Contains(l, "TLS certificate reloaded") && strings.Contains(l, "token reloaded")
	})

	if b, err := run(two.File, token, "print(2)").Output(); err != nil || string(b) != "2\n" {
		t.Fatalf("with the new certificate and token: %q %v", b, err)
	}
	if b, err := run(one.File, token, "print(3)").CombinedOutput(); err == nil || !strings.Contains(string(b), "certificate") {
		t.Fatalf("trusting the old certificate's CA: %v %s", err, b)
	}
	if b, err := run(two.File, oldToken, "print(4)").CombinedOutput(); err == nil || !strings.Contains(string(b), "Unauthenticated") {
		t.Fatalf("with the old token: %v %s", err, b)
	}
	rest, _ := io.ReadAll(out)
	if err := long.Wait(); err != nil || string(rest) != "after\n" {
		t.Fatalf("the run streaming across the rotation: %q %v", rest, err)
	}
	// Without a SIGHUP: the daemon sees the file change (within 5 s, and
	// 5 s more for it to hold still).
	third := filepath.Join(dir, "third-token")
	os.WriteFile(third, []byte("third-token-0123456789\n"), 0o600)
	os.Rename(third, token)
	waitFor(t, 30*time.Second, func() bool { return run(two.File, token, "print(5)").Run() == nil })
}

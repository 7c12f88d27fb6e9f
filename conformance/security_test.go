//go:build integration

package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/internal/sandbox/seccomp"
	"github.com/sandboxd/sandboxd/internal/testutil/backends"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/hostuid"
	"github.com/sandboxd/sandboxd/task/run"
)

// asUser runs argv as the host user uid:gid and returns its combined
// output and whether it succeeded.
func asUser(uid, gid uint32, argv ...string) (string, bool) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// testTaskFilesClosed has a program write a secret while two host users,
// a person's account (uid 1000) and nobody, try to read and change its
// files: its state folder, code, inputs and workspace, and, under runc,
// its root through /proc. All must fail; the program's uid must be one of
// sandboxd's range, no account's.
func testTaskFilesClosed(t *testing.T, s *suite) {
	// A state folder under a folder everyone may enter, as /var/lib is.
	state, err := os.MkdirTemp("/var/tmp", "sandboxd-conf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	var instance string
	svc := s.service(t, func(c *task.Config) { c.StateDir, instance = state, c.Instance })
	code := `import os, time
open('/workspace/secret.txt', 'w').write('secret')
print('ready', os.getuid(), os.getgid(), flush=True)
time.sleep(60)
`
	type probe struct {
		uid, gid int
		pid      string
	}
	seen := make(chan probe, 1)
	obs := &observer{}
	obs.onOutput = func(_ run.Stream, p []byte) {
		var pr probe
		if _, err := fmt.Sscanf(string(p), "ready %d %d", &pr.uid, &pr.gid); err == nil {
			if !s.gvisor() {
				pr.pid = pidWithArg("/code/main.py")
			}
			select {
			case seen <- pr:
			default:
			}
		}
	}
	req := python(code, limits.Limits{Timeout: 20 * time.Second})
	req.Options.Files = []run.File{{Path: "data.txt", Content: []byte("input")}}
	done := make(chan run.Result, 1)
	go func() { done <- s.run(t, svc, req, obs) }()
	var pr probe
	select {
	case pr = <-seen:
	case res := <-done:
		t.Fatalf("the program ended before it was probed: %s %q", res.Status, obs.output(run.Stderr))
	}
	defer func() {
		if obs.started != nil {
			svc.Cancel(asOperator, obs.started.RunID)
		}
		res := <-done
		s.noContainerOfRun(t, res.RunID)
	}()
	if !hostuid.DefaultRange().Contains(uint32(pr.uid)) || pr.uid != pr.gid {
		t.Errorf("the program runs as %d:%d, not as a uid of sandboxd's range %s", pr.uid, pr.gid, hostuid.DefaultRange())
	}
	if out, err := exec.Command("getent", "passwd", strconv.Itoa(pr.uid)).Output(); err == nil {
		t.Errorf("the program's uid %d is an account of this host: %s", pr.uid, out)
	}
	tasks := filepath.Join(state, "tasks", instance)
	entries, err := os.ReadDir(tasks)
	if err != nil || len(entries) == 0 {
		t.Fatalf("no task folder in %s: %v", tasks, err)
	}
	dir := filepath.Join(tasks, entries[len(entries)-1].Name())
	for _, u := range []struct {
		name     string
		uid, gid uint32
	}{{"uid 1000", 1000, 1000}, {"nobody", 65534, 65534}} {
		for _, try := range [][]string{
			{"ls", state},
			{"ls", filepath.Join(dir, "workspace")},
			{"cat", filepath.Join(dir, "workspace", "secret.txt")},
			{"cat", filepath.Join(dir, "input", "data.txt")},
			{"cat", filepath.Join(dir, "code", "main.py")},
			{"touch", filepath.Join(dir, "workspace", "planted")},
		} {
			if out, ok := asUser(u.uid, u.gid, try...); ok || !strings.Contains(out, "Permission denied") {
				t.Errorf("as %s, %q: %v %q, want Permission denied", u.name, try, ok, out)
			}
		}
		if pr.pid != "" {
			root := filepath.Join("/proc", pr.pid, "root", "workspace")
			if out, ok := asUser(u.uid, u.gid, "ls", root); ok {
				t.Errorf("as %s, the task's files are reachable through %s: %q", u.name, root, out)
			}
		}
	}
	for _, p := range []string{state, filepath.Dir(tasks), tasks, dir} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v (%v), want 0700", p, st.Mode().Perm(), err)
		}
	}
}

// pidWithArg finds the host process whose command line holds arg.
func pidWithArg(arg string) string {
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(arg)) {
			return filepath.Base(filepath.Dir(f))
		}
	}
	return ""
}

// blockingObserver takes the first output and then blocks, as a caller
// that stopped reading does, until released.
type blockingObserver struct {
	observer
	release chan struct{}
}

func (b *blockingObserver) Output(s run.Stream, p []byte) error {
	b.observer.Output(s, p)
	<-b.release
	return errors.New("the caller went away")
}

// testStalledCaller runs a program that prints without end for a caller
// that stops reading: the timeout still ends the run on time, its slot is
// freed for the next run, and the stalled caller is dropped after the
// stall timeout, with the result kept for GetRun.
func testStalledCaller(t *testing.T, s *suite) {
	svc := s.service(t, func(c *task.Config) { c.MaxRunning, c.StallTimeout = 1, 2*time.Second })
	obs := &blockingObserver{release: make(chan struct{})}
	defer close(obs.release)
	// About 3 MB/s: the caller stalls long before the kill threshold.
	code := "import sys, time\nwhile True:\n    sys.stdout.write('x' * 65536 + '\\n')\n    time.sleep(0.02)\n"
	ctx := access.WithCaller(context.Background(), access.Operator)
	start := time.Now()
	_, err := svc.Run(ctx, python(code, limits.Limits{Timeout: 2 * time.Second}), obs)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run() = %v, want the stalled caller dropped", err)
	}
	if took > 15*time.Second {
		t.Errorf("the stalled run held its caller %v: 2 s of timeout and 2 s of stall were due", took)
	}
	obs.mu.Lock()
	id := obs.started.RunID
	obs.mu.Unlock()
	rn, err := svc.Get(ctx, id)
	if err != nil || rn.State != run.Finished || rn.Result == nil || rn.Result.Status != run.StatusTimeout {
		t.Fatalf("GetRun = %+v (result %+v), %v; want the run finished with TIMEOUT", rn, rn.Result, err)
	}
	s.noContainerOfRun(t, id)
	// The only slot is free: the next run runs.
	next := &observer{}
	res := s.run(t, svc, python("print('next')", limits.Limits{}), next)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusOK || string(next.output(run.Stdout)) != "next\n" {
		t.Fatalf("the next run: %s %q", res.Status, next.output(run.Stdout))
	}
}

// testMaximaHonoured runs a program with every limit at the maximum the
// daemon advertises: the host must be able to give it (Docker refuses more
// CPUs than its host has).
func testMaximaHonoured(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	inv, err := svc.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := inv.MaxLimits
	// The disk is a tmpfs, counted in memory: both at their maxima only
	// bound what the program may use.
	res := s.run(t, svc, python("print('ok')", m), nil)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusOK {
		t.Fatalf("at the advertised maxima %+v: %s (%s)", m, res.Status, res.Message)
	}
}

// deniedSyscalls are x86-64 system call numbers of each denied family,
// with arguments that would succeed, or fail otherwise than EPERM, if the
// call were allowed.
var deniedSyscalls = []struct {
	family, name string
	nr           int
}{
	{"io_uring", "io_uring_setup", 425}, {"userfaultfd", "userfaultfd", 323}, {"bpf", "bpf", 321},
	{"perf_event_open", "perf_event_open", 298}, {"keys", "keyctl", 250}, {"keys", "add_key", 248},
	{"keys", "request_key", 249}, {"namespaces", "unshare", 272}, {"namespaces", "setns", 308},
	{"mount", "mount", 165}, {"mount", "umount2", 166}, {"mount", "pivot_root", 155}, {"mount", "fsopen", 430},
	{"mount", "open_tree", 428}, {"mount", "move_mount", 429}, {"mount", "chroot", 161},
	{"kexec", "kexec_load", 246}, {"kexec", "kexec_file_load", 320}, {"modules", "init_module", 175},
	{"modules", "finit_module", 313}, {"modules", "delete_module", 176}, {"clocks", "clock_settime", 227},
	{"clocks", "settimeofday", 164}, {"clocks", "adjtimex", 159}, {"clocks", "clock_adjtime", 305},
	{"numa", "mbind", 237}, {"numa", "set_mempolicy", 238}, {"numa", "migrate_pages", 256},
	{"numa", "move_pages", 279}, {"host management", "reboot", 169}, {"host management", "swapon", 167},
	{"host management", "acct", 163}, {"host management", "quotactl", 179}, {"host management", "syslog", 103},
	{"file handles", "open_by_handle_at", 304}, {"other processes", "kcmp", 312},
	{"hardware and old", "iopl", 172}, {"hardware and old", "ioperm", 173},
}

// testSeccompDenies makes one system call of each denied family: each must
// fail with EPERM, under runc and under gVisor alike. Under runc clone3
// fails with ENOSYS, so that libraries fall back to clone, which is allowed
// without the namespace flags; gVisor, which can only answer EPERM, leaves
// clone3 to its own kernel, which refuses these arguments with EINVAL.
// The bundle names the profile the runtime applied.
func testSeccompDenies(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	var calls strings.Builder
	for _, d := range deniedSyscalls {
		fmt.Fprintf(&calls, "    (%q, %d),\n", d.name, d.nr)
	}
	code := `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
calls = [
` + calls.String() + `]
for name, nr in calls:
    r = libc.syscall(nr, 0, 0, 0, 0, 0, 0)
    print(name, r, ctypes.get_errno())
r = libc.syscall(435, 0, 0)
print('clone3', r, ctypes.get_errno())
# unshare -Urm, as the review tried it.
print('unshare-user', libc.unshare(0x10000000 | 0x00020000), ctypes.get_errno())
`
	obs := &observer{}
	res := s.run(t, svc, python(code, limits.Limits{}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(obs.output(run.Stdout))), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			got[f[0]] = f[1] + " " + f[2]
		}
	}
	for _, d := range deniedSyscalls {
		if got[d.name] != "-1 1" {
			t.Errorf("%s (%s) = %q, want -1 with EPERM (stderr %q)", d.name, d.family, got[d.name], obs.output(run.Stderr))
		}
	}
	if want := map[bool]string{false: "-1 38", true: "-1 22"}[s.gvisor()]; got["clone3"] != want {
		t.Errorf("clone3(NULL, 0) = %q, want %s", got["clone3"], want)
	}
	if got["unshare-user"] != "-1 1" {
		t.Errorf("unshare(CLONE_NEWUSER|CLONE_NEWNS) = %q, want -1 with EPERM", got["unshare-user"])
	}
	b, _ := readBundle(t, svc, res)
	if want := seccomp.Digest(s.target.OCIRuntime); b.Manifest.Reproducible.Seccomp != want {
		t.Errorf("the bundle records the seccomp profile %q, want %s", b.Manifest.Reproducible.Seccomp, want)
	}
}

// testImagesOutsideTheLock imports images that carry the label
// of a sandbox image, but that the lock does not name: by name or by
// digest they are refused, and so is one the operator allows that
// declares a volume. Nothing is created for them, volumes included.
func testImagesOutsideTheLock(t *testing.T, s *suite) {
	plain := backends.ImportImage(t, "sandboxd-test/unlocked", "LABEL io.sandboxd.image=shell")
	withVolume := backends.ImportImage(t, "sandboxd-test/volume", "LABEL io.sandboxd.image=shell", "VOLUME /data")
	svc := s.service(t, func(c *task.Config) {
		c.AllowedImages = []string{withVolume}
		c.Catalog.Images = append(c.Catalog.Images, "sandboxd-test/unlocked")
		// Without a pool, any container of the instance would be the
		// refusals' doing.
		c.PoolSize = 0
	})
	volumes := backends.Volumes(t)
	ctx := access.WithCaller(context.Background(), access.Operator)
	for _, tt := range []struct {
		image string
		is    func(error) bool
		want  string
	}{
		{"sandboxd-test/unlocked", errdefs.IsPermissionDenied, "image lock"},
		{plain, errdefs.IsPermissionDenied, "image lock"},
		{withVolume, errdefs.IsFailedPrecondition, "volumes"},
	} {
		req := run.Request{Command: &run.Command{Argv: []string{"true"}}, Options: run.Options{Image: tt.image}}
		_, err := svc.Run(ctx, req, &observer{})
		if !tt.is(err) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("image %s: Run() = %v, want a refusal naming the %s", tt.image, err, tt.want)
		}
	}
	s.assertNothingLeft(t, map[string]string{task.LabelInstance: svc.Config().Instance}, "")
	if after := backends.Volumes(t); after != volumes {
		t.Errorf("the engine has %d volumes after the refusals, %d before", after, volumes)
	}
}

// testInitSurvivesSignals has the program send its init every signal,
// SIGKILL and those the Go runtime would die of included: the init runs as
// another user, so every one is refused (under gVisor too, which does not
// shield a PID namespace's init as Linux does), and the program keeps its
// exit code, with no dump of the init's in its output.
func testInitSurvivesSignals(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import os, signal, sys
sigs = range(1, signal.SIGRTMAX + 1)
denied = 0
for sig in sigs:
    try:
        os.kill(1, sig)
    except PermissionError:
        denied += 1
print(denied, 'of', len(sigs), 'denied', flush=True)
sys.exit(7)
`
	obs := &observer{}
	res := s.run(t, svc, python(code, limits.Limits{}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	stderr := string(obs.output(run.Stderr))
	if res.Status != run.StatusNonzeroExit || res.ExitCode != 7 || string(obs.output(run.Stdout)) != "64 of 64 denied\n" {
		t.Fatalf("status %s code %d (%s), stdout %q, stderr %q: want the program's exit code 7", res.Status, res.ExitCode, res.Message, obs.output(run.Stdout), stderr)
	}
	if strings.Contains(stderr, "goroutine") || strings.Contains(stderr, "sandboxd-init") {
		t.Fatalf("the init wrote to the program's stderr: %q", stderr)
	}
}

// testForkStorm ends programs that leave a process forking without end:
// each result must come soon after the program's exit, not at its timeout
// (one kill of every process can miss what is being forked meanwhile).
func testForkStorm(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import subprocess, time
subprocess.Popen(['sh', '-c', 'while :; do (sleep 100 &); done'], start_new_session=True)
time.sleep(0.3)
print('left it', flush=True)
`
	for i := range 10 {
		start := time.Now()
		res := s.run(t, svc, python(code, limits.Limits{Timeout: 60 * time.Second, Pids: 256}), nil)
		s.noContainerOfRun(t, res.RunID)
		if res.Status != run.StatusOK {
			t.Fatalf("run %d: %s (%s)", i, res.Status, res.Message)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Fatalf("run %d took %v: its leftovers held it", i, took)
		}
	}
}

// testNoHostPathInMountinfo reads what the program can see of its mounts
// and cgroups: no path of the host's state folder, and neither the
// instance's name nor the run's id.
func testNoHostPathInMountinfo(t *testing.T, s *suite) {
	var instance, state string
	svc := s.service(t, func(c *task.Config) { instance, state = c.Instance, c.StateDir })
	obs := &observer{}
	res := s.run(t, svc, run.Request{Command: &run.Command{Shell: "cat /proc/self/mountinfo /proc/self/cgroup"}}, obs)
	defer s.noContainerOfRun(t, res.RunID)
	out := string(obs.output(run.Stdout))
	if res.Status != run.StatusOK || out == "" {
		t.Fatalf("status %s, stdout %q, stderr %q", res.Status, out, obs.output(run.Stderr))
	}
	for _, secret := range []string{state, "/var/lib/sandboxd", instance, res.RunID} {
		if strings.Contains(out, secret) {
			t.Errorf("the program sees %q in its mountinfo or cgroups:\n%s", secret, out)
		}
	}
	// /dev is a mount of the container's own: crun's CVE-2026-88264 and
	// -88265 (crun 1.29.1 and older, Debian's 1.8.1 among them) need a
	// container whose /dev is not (docs/security.md).
	devMounted := false
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == "/dev" {
			devMounted = true
		}
	}
	if !devMounted {
		t.Errorf("/dev is no mount of its own in the container:\n%s", out)
	}
}

// testNonUTF8Names has a program leave files whose names are not UTF-8,
// which no JSON manifest or protocol string can carry: the result lists
// them escaped and does not store them, and the bundle verifies.
func testNonUTF8Names(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import os
open(b'/workspace/\xff\xfe.txt', 'w').write('x')
os.mkdir(b'/workspace/\xc3')
open(b'/workspace/\xc3/inner.txt', 'w').write('y')
open('/workspace/fine.txt', 'w').write('z')
`
	res := s.run(t, svc, python(code, limits.Limits{}), nil)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusOK {
		t.Fatalf("status %s (%s)", res.Status, res.Message)
	}
	b, entries := readBundle(t, svc, res)
	if string(entries["output/fine.txt"]) != "z" {
		t.Errorf("fine.txt was not kept: %v", b.Manifest.Reproducible.Outputs)
	}
	escaped := 0
	for _, o := range b.Manifest.Reproducible.Outputs {
		if strings.Contains(o.Path, `\xff\xfe`) || strings.Contains(o.Path, `\xc3`) {
			escaped++
			if o.SHA256 != "" || o.Omitted == "" {
				t.Errorf("%q was stored", o.Path)
			}
		}
	}
	if escaped != 2 {
		t.Errorf("outputs %+v: want the two names that are not UTF-8, escaped and not stored", b.Manifest.Reproducible.Outputs)
	}
}

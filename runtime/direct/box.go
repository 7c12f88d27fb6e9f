package direct

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/cgroup"
	"github.com/sandboxd/sandboxd/internal/sandbox/lifecycle"
	"github.com/sandboxd/sandboxd/internal/sandbox/netns"
	"github.com/sandboxd/sandboxd/internal/sandbox/seccomp"
	"github.com/sandboxd/sandboxd/runtime"
)

// port is the lifecycle's Port on OCI runtimes run directly.
type port struct {
	opts     Options
	store    *Store
	cgroups  cgroup.Hierarchy
	runtimes map[string]*ociRuntime
	// crunPrograms are the seccomp programs crun compiled, to give it back.
	crunPrograms seccomp.CrunPrograms
}

var _ lifecycle.Port = (*port)(nil)

func (p *port) close() error {
	var errs []error
	for _, rt := range p.runtimes {
		errs = append(errs, rt.close())
	}
	return errors.Join(errs...)
}

// containersDir holds one folder per container: its bundle and its record.
func containersDir(stateDir string) string { return filepath.Join(stateDir, "containers") }

// record is what a container's folder says of it, for Find after a crash.
type record struct {
	Runtime string            `json:"runtime"`
	Labels  map[string]string `json:"labels"`
	Netns   string            `json:"netns"`
	Egress  string            `json:"egress,omitempty"`
}

// The files of a container's folder besides its bundle (config.json and
// rootfs/, the overlay of upper/ and work/ on the image).
const (
	recordFile = "sandboxd.json"
	pidFile    = "pid"
	logFile    = "runtime.log"
)

// Create makes the container's folder: its record, its network namespace
// (with its link to the egress gateway when the spec asks for one), its
// root file system and its OCI spec. The OCI runtime runs at Start. On
// error it removes what it made.
func (p *port) Create(ctx context.Context, cfg lifecycle.Config) (_ lifecycle.Box, err error) {
	spec := cfg.Spec
	name := spec.Runtime
	if name == "" {
		name = runtime.RuncName
	}
	rt, ok := p.runtimes[name]
	if !ok {
		return nil, fmt.Errorf("%s is not installed on this host: %w", name, errdefs.ErrFailedPrecondition)
	}
	if _, err := p.store.config(spec.Image); err != nil {
		return nil, err
	}
	dir := filepath.Join(containersDir(p.opts.StateDir), cfg.Name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	b := &box{p: p, rt: rt, name: cfg.Name, dir: dir, restoreFrom: cfg.RestoreFrom, pidfd: -1, exited: make(chan error, 1), done: make(chan struct{}), outputDone: make(chan struct{})}
	defer func() {
		if err != nil {
			if rmErr := b.Remove(context.WithoutCancel(ctx)); rmErr != nil {
				p.opts.Log.Warn("remove a container whose creation failed", "container", b.name, "err", rmErr)
			}
		}
	}()
	rec := record{Runtime: name, Labels: spec.Labels, Netns: filepath.Join(dir, "netns")}
	if spec.Egress.IsValid() {
		rec.Egress = spec.Egress.String()
	}
	if err := writeJSON(filepath.Join(dir, recordFile), rec); err != nil {
		return nil, err
	}
	if err := netns.New(rec.Netns); err != nil {
		return nil, err
	}
	b.netns = rec.Netns
	if spec.Egress.IsValid() {
		if err := lifecycle.LinkEgress(p.opts.Egress, spec.Egress, b.netns); err != nil {
			return nil, err
		}
		b.egress = spec.Egress
	}
	if err := b.mountRootfs(p.store.rootfs(spec.Image)); err != nil {
		return nil, err
	}
	// The container's own cgroup goes when it exits; its parent stays and
	// keeps the peak and the OOM kills.
	b.cgroup = path.Join(cfg.Cgroup, "task")
	if cfg.Cgroup == "" {
		b.cgroup = path.Join(p.opts.CgroupParent, cfg.Name, "task")
	}
	oci := lifecycle.OCISpec(cfg, b.cgroup, b.netns)
	b.filter = p.crunPrograms.Filter(name, cfg.Layout.Seccomp)
	for k, v := range b.filter.Annotations() {
		if oci.Annotations == nil {
			oci.Annotations = map[string]string{}
		}
		oci.Annotations[k] = v
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), oci); err != nil {
		return nil, err
	}
	return b, nil
}

func writeJSON(file string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o600)
}

// mountRootfs mounts the container's root file system at rootfs/: an
// overlay whose lower folder is the image's, never written, and whose
// upper folder takes the mount points the OCI runtime makes (/mnt/NAME is
// in no image) before the spec's read-only root has it remounted
// read-only for the program.
func (b *box) mountRootfs(image string) error {
	for _, d := range []string{"rootfs", "upper", "work"} {
		if err := os.Mkdir(filepath.Join(b.dir, d), 0o700); err != nil {
			return err
		}
	}
	// The upper folder is the root's: its mode is the root folder's.
	if st, err := os.Stat(image); err != nil {
		return fmt.Errorf("image root file system: %w", err)
	} else if err := os.Chmod(filepath.Join(b.dir, "upper"), st.Mode().Perm()); err != nil {
		return err
	}
	// The folders go by descriptor: the mount's options, which the
	// program reads in its mountinfo, name /proc/self/fd/N and not the
	// host's paths (the image store, the instance, the run).
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, d := range []string{image, filepath.Join(b.dir, "upper"), filepath.Join(b.dir, "work")} {
		fd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("the root file system's folder %s: %w", d, err)
		}
		fds = append(fds, fd)
	}
	data := fmt.Sprintf("lowerdir=/proc/self/fd/%d,upperdir=/proc/self/fd/%d,workdir=/proc/self/fd/%d", fds[0], fds[1], fds[2])
	if err := unix.Mount("overlay", filepath.Join(b.dir, "rootfs"), "overlay", unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("mount the root file system: %w", err)
	}
	b.mounted = true
	return nil
}

// Find lists the containers of this daemon's folder that carry all of
// labels, as their records say.
func (p *port) Find(_ context.Context, labels map[string]string) ([]lifecycle.Box, error) {
	entries, err := os.ReadDir(containersDir(p.opts.StateDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var boxes []lifecycle.Box
	for _, e := range entries {
		dir := filepath.Join(containersDir(p.opts.StateDir), e.Name())
		var rec record
		data, err := os.ReadFile(filepath.Join(dir, recordFile))
		if err == nil {
			err = json.Unmarshal(data, &rec)
		}
		if err != nil {
			// A creation cut short before its record: nothing runs in it,
			// and nothing says whose it is; leave it to its daemon.
			continue
		}
		matches := true
		for k, v := range labels {
			matches = matches && rec.Labels[k] == v
		}
		if !matches {
			continue
		}
		b := &box{p: p, name: e.Name(), dir: dir, netns: rec.Netns, rt: p.runtimes[rec.Runtime], found: true, pidfd: -1}
		b.egress, _ = netip.ParseAddr(rec.Egress)
		b.mounted = mounted(filepath.Join(dir, "rootfs"))
		boxes = append(boxes, b)
	}
	return boxes, nil
}

// mounted says whether something is mounted at dir.
func mounted(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// box is one container: its folder, and the OCI runtime's run process
// that created it and waits for its end.
type box struct {
	p      *port
	rt     *ociRuntime
	name   string
	dir    string
	netns  string
	egress netip.Addr
	cgroup string
	// restoreFrom is the checkpoint's folder a restored container starts
	// from, or "".
	restoreFrom string
	// found says Find made the box: a container of an earlier daemon,
	// whose run process is not this daemon's.
	found   bool
	mounted bool

	stdin          *os.File // the init's stdin, this end
	stdout, stderr *os.File // its output, these ends
	late           lateStreams
	outputDone     chan struct{}

	cmd    *exec.Cmd
	exited chan error
	done   chan struct{} // closed once the run process has been waited for
	// oom learns of OOM kills in the container's cgroup while it lives.
	oom *cgroup.OOMWatch
	// filter is the container's seccomp profile, as crun compiles it.
	filter *seccomp.CrunFilter

	mu sync.Mutex
	// pidfd is the container's init (-1 before its start and after the
	// removal), under mu: a kill and a removal may come at once.
	pidfd      int
	state      *os.ProcessState
	finishedAt time.Time
}

// Start runs the OCI runtime's run on the bundle, with the init's stdio
// pipes, and returns once the runtime has written the init's pid (the
// container runs) or has given up (its error, with what it logged).
func (b *box) Start(ctx context.Context) error {
	files, err := b.pipes()
	if err != nil {
		return err
	}
	watch, err := newFileWatch(b.dir, pidFile)
	if err != nil {
		closeAll(files...)
		return err
	}
	defer watch.close()
	verb := []string{"run"}
	if b.restoreFrom != "" {
		verb = []string{"restore", "--image-path", b.restoreFrom}
	}
	cmd := b.rt.command(context.Background(), filepath.Join(b.dir, logFile), append(verb, "--bundle", b.dir, "--pid-file", filepath.Join(b.dir, pidFile), b.name)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = files[0], files[1], files[2]
	err = cmd.Start()
	closeAll(files...) // the child's ends: the run process and the container hold them
	if err != nil {
		return fmt.Errorf("start %s: %w", b.rt.name, err)
	}
	b.cmd = cmd
	go b.copyOutput()
	go b.wait()
	select {
	case <-watch.ready:
	case <-b.done:
		return b.startFailure()
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := b.openInit(); err != nil {
		select {
		case <-b.done:
			return b.startFailure()
		default:
			return fmt.Errorf("the init of %s: %w", b.name, err)
		}
	}
	oom, err := b.p.cgroups.WatchOOM(b.cgroup)
	if err != nil {
		return fmt.Errorf("the OOM kills of %s: %w", b.name, err)
	}
	b.oom = oom
	if err := b.filter.Learn(filepath.Join(b.rt.root, b.name)); err != nil {
		b.p.opts.Log.Debug("crun's compiled seccomp filter is not at hand; crun compiles it each time", "err", err)
	}
	return nil
}

// openInit opens the pidfd of the init whose pid the runtime wrote, once.
func (b *box) openInit() error {
	pid, err := readPid(filepath.Join(b.dir, pidFile))
	if err != nil {
		return err
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pidfd >= 0 {
		unix.Close(fd)
	} else {
		b.pidfd = fd
	}
	return nil
}

// pipes makes the init's stdio pipes and returns the child's ends.
func (b *box) pipes() ([]*os.File, error) {
	var child []*os.File
	for i := range 3 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(child...)
			return nil, err
		}
		if i == 0 {
			b.stdin = w
			child = append(child, r)
		} else {
			child = append(child, w)
			if i == 1 {
				b.stdout = r
			} else {
				b.stderr = r
			}
		}
	}
	return child, nil
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// startFailure is the error of a run that ended before its container ran,
// with what the runtime said in its log or, before the init had a task,
// on the container's stderr.
func (b *box) startFailure() error {
	said := strings.TrimSpace(b.late.early())
	if log, err := os.ReadFile(filepath.Join(b.dir, logFile)); err == nil && len(bytes.TrimSpace(log)) > 0 {
		said = lastLogLine(log)
	}
	b.mu.Lock()
	st := b.state
	b.mu.Unlock()
	return fmt.Errorf("%w: %s %v: %s", errStartedNot, b.rt.name, st, said)
}

// lastLogLine is the last message of a runtime's log: a line of text
// (crun), or the msg of a JSON line (runc).
func lastLogLine(log []byte) string {
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	last := lines[len(lines)-1]
	var entry struct{ Msg string }
	if json.Unmarshal([]byte(last), &entry) == nil && entry.Msg != "" {
		return entry.Msg
	}
	return last
}

func readPid(file string) (int, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// wait waits for the run process, whose end is the container's.
func (b *box) wait() {
	err := b.cmd.Wait()
	b.mu.Lock()
	b.state, b.finishedAt = b.cmd.ProcessState, time.Now()
	b.mu.Unlock()
	close(b.done)
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		b.exited <- fmt.Errorf("wait for %s run: %w", b.rt.name, err)
		return
	}
	b.exited <- nil
}

// copyOutput copies the init's stdout and stderr to the writers Attach
// gives, until both end: when the container and the run process have
// closed them, or CloseOutput.
func (b *box) copyOutput() {
	var wg sync.WaitGroup
	for _, s := range []struct {
		r *os.File
		w *io.Writer
	}{{b.stdout, &b.late.stdout}, {b.stderr, &b.late.stderr}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := s.r.Read(buf)
				if n > 0 {
					b.late.write(s.w, buf[:n])
				}
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(b.outputDone)
}

// Update gives the running container new limits, in its cgroup.
func (b *box) Update(_ context.Context, l lifecycle.Limits) error {
	err := b.p.cgroups.SetLimits(b.cgroup, cgroup.Limits{
		MemoryBytes: l.MemoryBytes, MemorySwapBytes: l.MemorySwapBytes,
		CPUQuota: l.CPUMillis * lifecycle.CPUPeriod / 1000, CPUPeriod: lifecycle.CPUPeriod, Pids: l.PidsLimit,
	})
	if err != nil {
		return fmt.Errorf("update %s: %w", b.name, err)
	}
	return nil
}

func (b *box) Attach(stdout, stderr io.Writer) { b.late.set(stdout, stderr) }
func (b *box) Input() io.WriteCloser           { return b.stdin }
func (b *box) Exited() <-chan error            { return b.exited }
func (b *box) OutputDone() <-chan struct{}     { return b.outputDone }

// CloseOutput ends the copy of the output: what a process the container
// left holds open is not waited for.
func (b *box) CloseOutput() {
	b.stdout.Close()
	b.stderr.Close()
}

// Status is how the container exited, as the run process's status says
// (the init's code, or 128+N for signal N), and whether its cgroups saw
// an OOM kill.
func (b *box) Status(context.Context) (lifecycle.Status, error) {
	b.mu.Lock()
	st, at := b.state, b.finishedAt
	b.mu.Unlock()
	if st == nil {
		return lifecycle.Status{}, fmt.Errorf("%s has not exited", b.name)
	}
	code := st.ExitCode()
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	status := lifecycle.Status{Code: code, FinishedAt: at, OOMKilled: b.oom.Killed()}
	if n, err := b.p.cgroups.OOMKills(path.Dir(b.cgroup)); err == nil && n > 0 {
		status.OOMKilled = true
	}
	return status, nil
}

// Kill kills every process of the container at once: its init, the first
// process of its PID namespace, whose end the kernel makes every other's;
// under gVisor the sandbox, which holds them all.
func (b *box) Kill(ctx context.Context) error {
	if b.found {
		return b.rt.run(ctx, "kill", "--all", b.name, "KILL")
	}
	return b.signal(unix.SIGKILL)
}

// Release sends SIGTERM to the container's init alone; under gVisor
// through runsc, as a signal to its sandbox would not reach the init.
func (b *box) Release(ctx context.Context) error {
	if b.rt.name == runtime.RunscName || b.found {
		return b.rt.run(ctx, "kill", b.name, "TERM")
	}
	return b.signal(unix.SIGTERM)
}

// signal signals the container's init through its pidfd, which cannot
// reach another process once the init has gone.
func (b *box) signal(sig unix.Signal) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pidfd < 0 {
		return nil // never started, or removed: nothing runs
	}
	err := unix.PidfdSendSignal(b.pidfd, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

// removeBound bounds how long Remove waits for the run process to end
// once the container is killed; outputBound how long it then waits for
// the output's end, which a process outside the container holding a pipe
// could keep open.
const (
	removeBound = 30 * time.Second
	outputBound = 2 * time.Second
)

// end kills a container whose run process still runs: through the init's
// pidfd, or, when the start was cut short before it was opened, through
// the runtime, which knows the container once it has its pid.
func (b *box) end(ctx context.Context) error {
	if b.openInit() == nil {
		return b.signal(unix.SIGKILL)
	}
	// No pid yet: the runtime is still creating the container. Its run
	// process ends the creation when killed, and nothing ran in it.
	if err := b.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return b.rt.delete(ctx, b.name)
}

// Remove kills the container if it still runs, waits for the run process
// (which deletes the runtime's state of it), then unmounts its root file
// system and removes its network namespace and folder.
func (b *box) Remove(ctx context.Context) error {
	var errs []error
	b.late.set(io.Discard, io.Discard)
	if b.stdin != nil {
		b.stdin.Close()
	}
	switch {
	case b.cmd != nil:
		select {
		case <-b.done:
		default:
			if err := b.end(ctx); err != nil {
				errs = append(errs, err)
			}
			select {
			case <-b.done:
			case <-time.After(removeBound):
				errs = append(errs, fmt.Errorf("%s run of %s did not end %s after its kill", b.rt.name, b.name, removeBound))
			}
		}
		select {
		case <-b.outputDone:
		case <-time.After(outputBound):
			b.CloseOutput()
			<-b.outputDone
		}
		// A container process whose run process was killed mid-start may
		// still be setting up the root file system (mount points made in
		// the upper layer): nothing of the container may run while its
		// folder goes. After an ordinary end the cgroup is already gone.
		emptyCtx, cancel := context.WithTimeout(ctx, removeBound)
		err := b.p.cgroups.Empty(emptyCtx, b.cgroup)
		cancel()
		if err != nil {
			errs = append(errs, err)
		}
	case b.found && b.rt != nil:
		// An earlier daemon's: its runtime's state goes with a forced
		// delete, which kills what still runs.
		if err := b.rt.delete(ctx, b.name); err != nil {
			errs = append(errs, err)
		}
	}
	if b.rt != nil && len(errs) == 0 {
		if err := b.rt.forget(b.name); err != nil {
			errs = append(errs, err)
		}
	}
	b.mu.Lock()
	if b.pidfd >= 0 {
		unix.Close(b.pidfd)
		b.pidfd = -1
	}
	b.mu.Unlock()
	b.oom.Close()
	if b.mounted {
		// EINVAL: nothing is mounted there; ENOENT: a Reap removed the
		// container first.
		if err := unix.Unmount(filepath.Join(b.dir, "rootfs"), unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount the root file system of %s: %w", b.name, err))
		} else {
			b.mounted = false
		}
	}
	if b.netns != "" {
		if err := netns.Remove(b.netns); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(b.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// lateStreams are a container's output writers, which exist only once it
// is launched. The init writes nothing before it has its task: what comes
// before is the OCI runtime's, kept (a little of it) for its error.
type lateStreams struct {
	mu             sync.Mutex
	attached       bool
	stdout, stderr io.Writer
	before         bytes.Buffer
}

// earlyBytes bounds what is kept of the output before the launch.
const earlyBytes = 4 << 10

func (l *lateStreams) set(stdout, stderr io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.attached {
		return
	}
	l.attached, l.stdout, l.stderr = true, stdout, stderr
}

// write writes p to *w once the writers are set; before, it keeps it.
func (l *lateStreams) write(w *io.Writer, p []byte) {
	l.mu.Lock()
	if !l.attached {
		if room := earlyBytes - l.before.Len(); room > 0 {
			l.before.Write(p[:min(len(p), room)])
		}
		l.mu.Unlock()
		return
	}
	dst := *w
	l.mu.Unlock()
	dst.Write(p)
}

func (l *lateStreams) early() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.before.String()
}

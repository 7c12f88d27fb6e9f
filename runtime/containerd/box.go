package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/lifecycle"
	"github.com/sandboxd/sandboxd/internal/sandbox/netns"
	"github.com/sandboxd/sandboxd/runtime"
)

// Create creates the container and its task, whose init waits on its stdin,
// in a network namespace of its own (with its link to the egress gateway
// when the spec asks for one). On error it removes what it made.
func (e *port) Create(ctx context.Context, cfg lifecycle.Config) (_ lifecycle.Box, err error) {
	ctx = e.ns(ctx)
	spec := cfg.Spec
	img, err := e.lookup(ctx, spec.Image)
	if err != nil {
		return nil, err
	}
	// The image's chain ID comes with its kept config: the client's
	// IsUnpacked and WithNewSnapshot would read its manifest and config
	// again, and ask for the snapshotter's capabilities, at every create.
	imageCfg, err := e.config(ctx, img)
	if err != nil {
		return nil, err
	}
	if _, err := e.client.SnapshotService(snapshotter).Stat(ctx, imageCfg.chain); errdefs.IsNotFound(err) {
		if err := img.Unpack(ctx, snapshotter); err != nil {
			return nil, containerdError("unpack image", err)
		}
	}
	stdin, stdinW := io.Pipe()
	b := &box{e: e, id: cfg.Name, late: newLateStreams(), stdin: stdinW, exited: make(chan error, 1)}
	// The container's own cgroup goes when it exits; its parent stays and
	// keeps the peak.
	cgroupsPath := path.Join("/sandboxd-unaccounted", b.id)
	if cfg.Cgroup != "" {
		cgroupsPath = path.Join(cfg.Cgroup, "task")
	}
	b.netns = filepath.Join(e.opts.NetnsDir, b.id)
	if err = netns.New(b.netns); err != nil {
		b.netns = ""
		return nil, err
	}
	defer func() {
		if err != nil {
			if rmErr := b.Remove(context.WithoutCancel(ctx)); rmErr != nil {
				e.opts.Log.Warn("remove a container whose creation failed", "container", b.id, "err", rmErr)
			}
		}
	}()
	if spec.Egress.IsValid() {
		if err := lifecycle.LinkEgress(e.opts.Egress, spec.Egress, b.netns); err != nil {
			return nil, err
		}
	}
	opts := &options.Options{}
	switch spec.Runtime {
	case runtime.RunscName:
		if e.opts.RunscPath == "" {
			return nil, fmt.Errorf("runsc is not configured for the containerd backend: %w", errdefs.ErrFailedPrecondition)
		}
		opts = &options.Options{BinaryName: e.opts.RunscPath, Root: e.opts.RunscRoot}
	case runtime.CrunName:
		if e.crunPath == "" {
			return nil, fmt.Errorf("crun is not installed on this host: %w", errdefs.ErrFailedPrecondition)
		}
		opts = &options.Options{BinaryName: e.crunPath}
	default:
		opts = &options.Options{BinaryName: e.runcPath}
	}
	filter := e.crunPrograms.Filter(spec.Runtime, cfg.Layout.Seccomp)
	b.group = shimGroupOf(spec.Labels[instanceLabel], spec.Runtime)
	labels := map[string]string{labelNetns: b.netns}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	b.ctr, err = e.client.NewContainer(ctx, b.id,
		client.WithImage(img),
		client.WithSnapshotter(snapshotter),
		// The snapshot is writable for the runtime to make mount points in
		// (/mnt/NAME is not in any image); the spec's read-only root has the
		// runtime remount it read-only before the program starts.
		withSnapshot(b.id, imageCfg.chain),
		client.WithRuntime(shim, opts),
		client.WithContainerLabels(labels),
		client.WithSpec(lifecycle.OCISpec(cfg, cgroupsPath, b.netns), withShimGroup(b.group), oci.WithAnnotations(filter.Annotations())),
	)
	if err != nil {
		return nil, containerdError("create container", err)
	}
	// OOM kills are reported as events: listen before anything runs.
	b.oom = e.oom.watch(b.id)

	created := make(chan struct{})
	// The shim holds the stdin pipe open: the program sees its end only
	// once the client says so, after copying all of it.
	stdinReader := &stdinEOF{r: stdin, onEOF: func() {
		<-created
		if b.task == nil {
			return
		}
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := b.task.CloseIO(closeCtx, client.WithStdinCloser); err != nil {
			e.opts.Log.Debug("close stdin", "container", b.id, "err", err)
		}
	}}
	stdout, stderr := lateWriter{b.late, &b.late.stdout}, lateWriter{b.late, &b.late.stderr}
	streams := []cio.Opt{cio.WithStreams(stdinReader, stdout, stderr)}
	if e.opts.FIFODir != "" {
		streams = append(streams, cio.WithFIFODir(e.opts.FIFODir))
	}
	err = e.shimGroups.create(b.group, func() (err error) {
		b.task, err = b.ctr.NewTask(ctx, cio.NewCreator(streams...))
		return err
	})
	close(created)
	if err != nil {
		// The OCI runtime does most of its work when the task is created.
		return nil, lifecycle.Refusal(containerdError("create task", err))
	}
	b.counted = true
	if err := filter.Learn(filepath.Join(shimRuntimeRoot, e.opts.Namespace, b.id)); err != nil {
		e.opts.Log.Debug("crun's compiled seccomp filter is not at hand; crun compiles it each time", "err", err)
	}
	exited, err := b.task.Wait(context.WithoutCancel(ctx))
	if err != nil {
		return nil, containerdError("wait for task", err)
	}
	go b.awaitExit(exited)
	return b, nil
}

// withSnapshot prepares the container's snapshot, named id, on the image's
// top layer, parent. No id mapping is asked for, so client.WithNewSnapshot
// would prepare on the same parent, after reading the image again.
func withSnapshot(id, parent string) client.NewContainerOpts {
	return func(ctx context.Context, c *client.Client, ctr *containers.Container) error {
		if _, err := c.SnapshotService(ctr.Snapshotter).Prepare(ctx, id, parent); err != nil {
			return err
		}
		ctr.SnapshotKey = id
		return nil
	}
}

// Find lists the containers that carry all of labels.
func (e *port) Find(ctx context.Context, labels map[string]string) ([]lifecycle.Box, error) {
	ctx = e.ns(ctx)
	var filters []string
	for k, v := range labels {
		filters = append(filters, fmt.Sprintf("labels.%q==%q", k, v))
	}
	list, err := e.client.Containers(ctx, strings.Join(filters, ","))
	if err != nil {
		return nil, containerdError("list containers", err)
	}
	boxes := make([]lifecycle.Box, 0, len(list))
	for _, ctr := range list {
		b := &box{e: e, id: ctr.ID(), ctr: ctr}
		if l, err := ctr.Labels(ctx); err == nil {
			b.netns = l[labelNetns]
		}
		if t, err := ctr.Task(ctx, nil); err == nil {
			b.task = t
		}
		boxes = append(boxes, b)
	}
	return boxes, nil
}

// box is one containerd container and its task.
type box struct {
	e      *port
	id     string
	late   *lateStreams   // the output, whose writers Attach sets
	stdin  *io.PipeWriter // the init's stdin
	netns  string
	ctr    client.Container
	task   client.Task
	oom    <-chan struct{} // closed on an OOM kill; nil for a container found by Find
	exited chan error      // containerd's word on the exit; buffered

	drainOnce sync.Once
	drained   chan struct{}

	// group is the container's shim group (shimGroupOf); "" for a
	// container found by Find.
	group string

	mu     sync.Mutex
	status client.ExitStatus
	// counted says the group's count has the task: made, and not removed.
	counted bool
}

// Start starts the task's init.
func (b *box) Start(ctx context.Context) error {
	if err := b.task.Start(b.e.ns(ctx)); err != nil {
		return containerdError("start task", err)
	}
	return nil
}

// awaitExit keeps containerd's exit status and passes its word on.
func (b *box) awaitExit(exited <-chan client.ExitStatus) {
	st := <-exited
	b.mu.Lock()
	b.status = st
	b.mu.Unlock()
	var err error
	if _, _, serr := st.Result(); serr != nil {
		err = containerdError("wait for task", serr)
	}
	b.exited <- err
}

// Update applies new limits to the task.
func (b *box) Update(ctx context.Context, l lifecycle.Limits) error {
	quota, period := l.CPUMillis*lifecycle.CPUPeriod/1000, uint64(lifecycle.CPUPeriod)
	err := b.task.Update(b.e.ns(ctx), client.WithResources(&specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &l.MemoryBytes, Swap: &l.MemorySwapBytes},
		CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
		Pids:   &specs.LinuxPids{Limit: &l.PidsLimit},
	}))
	if err != nil {
		return containerdError("update task", err)
	}
	return nil
}

func (b *box) Attach(stdout, stderr io.Writer) { b.late.set(stdout, stderr) }
func (b *box) Input() io.WriteCloser           { return b.stdin }
func (b *box) Exited() <-chan error            { return b.exited }

// OutputDone is closed once the task's streams are drained.
func (b *box) OutputDone() <-chan struct{} {
	b.drainOnce.Do(func() {
		b.drained = make(chan struct{})
		go func() {
			b.task.IO().Wait()
			close(b.drained)
		}()
	})
	return b.drained
}

func (b *box) CloseOutput() { b.task.IO().Cancel() }

// Status is the exit containerd reported, and whether it reported an OOM
// kill.
func (b *box) Status(context.Context) (lifecycle.Status, error) {
	b.mu.Lock()
	code, at, _ := b.status.Result()
	b.mu.Unlock()
	st := lifecycle.Status{Code: int(code), FinishedAt: at}
	select {
	case <-b.oom:
		st.OOMKilled = true
	default:
	}
	return st, nil
}

// Kill kills every process of the container at once. A task that has
// exited is left alone: runsc refuses to kill a sandbox that has ended.
func (b *box) Kill(ctx context.Context) error {
	err := b.task.Kill(b.e.ns(ctx), syscall.SIGKILL, client.WithKillAll)
	if err == nil || errdefs.IsNotFound(err) || errdefs.IsFailedPrecondition(err) {
		return nil
	}
	if st, serr := b.task.Status(b.e.ns(ctx)); serr == nil && st.Status == client.Stopped {
		return nil
	}
	return containerdError("kill task", err)
}

// Release sends SIGTERM to the task's init alone.
func (b *box) Release(ctx context.Context) error {
	err := b.task.Kill(b.e.ns(ctx), syscall.SIGTERM)
	if err == nil || errdefs.IsNotFound(err) || errdefs.IsFailedPrecondition(err) {
		return nil
	}
	return containerdError("signal task", err)
}

// Remove deletes the task, the container, its snapshot and its network
// namespace.
func (b *box) Remove(ctx context.Context) error {
	ctx = b.e.ns(ctx)
	var errs []error
	if b.oom != nil {
		b.e.oom.forget(b.id)
	}
	if b.late != nil { // not for a container found by Find
		b.late.set(io.Discard, io.Discard)
		b.stdin.Close()
	}
	if b.task == nil && b.ctr != nil {
		// A creation cut short may have made the task without saying so.
		if t, err := b.ctr.Task(ctx, nil); err == nil {
			b.task = t
		}
	}
	if b.task != nil {
		b.mu.Lock()
		counted := b.counted
		b.counted = false
		b.mu.Unlock()
		if err := b.e.shimGroups.remove(b.group, counted, func() error { return b.deleteTask(ctx) }); err != nil {
			errs = append(errs, err)
		}
	}
	if b.ctr != nil {
		if err := b.ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, containerdError("delete container", err))
		}
	}
	if b.netns != "" && filepath.Dir(b.netns) == b.e.opts.NetnsDir {
		if err := netns.Remove(b.netns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deleteTask deletes the task, killing it first only if it still runs:
// asking runsc to kill a sandbox that has exited fails.
func (b *box) deleteTask(ctx context.Context) error {
	_, err := b.task.Delete(ctx)
	if err == nil || errdefs.IsNotFound(err) {
		return nil
	}
	if !errdefs.IsFailedPrecondition(err) {
		// runsc's shim under containerd 1.6 refuses a running task with
		// an unknown error ("cannot delete a running process"): the
		// task's status tells.
		if st, serr := b.task.Status(ctx); serr != nil || st.Status == client.Stopped {
			return containerdError("delete task", err)
		}
	}
	exited, werr := b.task.Wait(ctx)
	if werr != nil {
		return containerdError("wait for task", werr)
	}
	// A kill can fail because the task is already on its way out (runsc:
	// "sandbox is not running"); the exit tells.
	if err := b.task.Kill(ctx, syscall.SIGKILL, client.WithKillAll); err != nil {
		b.e.opts.Log.Debug("kill task", "container", b.id, "err", err)
	}
	select {
	case <-exited:
	case <-ctx.Done():
		return ctx.Err()
	}
	if _, err := b.task.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
		return containerdError("delete task", err)
	}
	return nil
}

// stdinEOF calls onEOF, once, in the background, when r ends.
type stdinEOF struct {
	r     io.Reader
	once  sync.Once
	onEOF func()
}

func (s *stdinEOF) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if errors.Is(err, io.EOF) {
		s.once.Do(func() { go s.onEOF() })
	}
	return n, err
}

// lateStreams are a container's output writers, which exist only once it
// is launched. The init writes nothing before it has its task; a container
// removed unlaunched discards.
type lateStreams struct {
	once           sync.Once
	ready          chan struct{}
	stdout, stderr io.Writer
}

func newLateStreams() *lateStreams { return &lateStreams{ready: make(chan struct{})} }

func (l *lateStreams) set(stdout, stderr io.Writer) {
	l.once.Do(func() {
		l.stdout, l.stderr = stdout, stderr
		close(l.ready)
	})
}

// lateWriter writes to *w once its streams are set.
type lateWriter struct {
	l *lateStreams
	w *io.Writer
}

func (lw lateWriter) Write(p []byte) (int, error) {
	<-lw.l.ready
	return (*lw.w).Write(p)
}

// A stdio FIFO holds 64 KiB and cio copies it in reads of 32 KiB; each read
// is a write to the run's stored output, an event and a gRPC message, and
// a program that prints much spent its time in those hops, not printing.
// Once a read fills the buffer, the FIFO is grown to fifoBytes and reads
// double up to it: a program that prints a line pays for neither.
const (
	firstRead = 32 << 10
	fifoBytes = 1 << 20
)

// firstReads are the buffers of first reads, which most streams never
// outgrow.
var firstReads = sync.Pool{New: func() any { return new([firstRead]byte) }}

// ReadFrom copies r, the container's FIFO: cio's io.CopyBuffer calls it in
// place of its own loop.
func (lw lateWriter) ReadFrom(r io.Reader) (int64, error) {
	first := firstReads.Get().(*[firstRead]byte)
	defer firstReads.Put(first)
	buf := first[:]
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			w, werr := lw.Write(buf[:n])
			total += int64(w)
			if werr != nil {
				return total, werr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		if n == len(buf) && n < fifoBytes {
			if n == firstRead {
				growPipe(r, fifoBytes)
			}
			buf = make([]byte, 2*n)
		}
	}
}

// growPipe asks the kernel to let the pipe r holds size bytes. It is best
// effort: a pipe left at its size still carries everything.
func growPipe(r io.Reader, size int) {
	c, ok := r.(syscall.Conn)
	if !ok {
		return
	}
	if raw, err := c.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, size) })
	}
}

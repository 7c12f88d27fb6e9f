package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxd/sandboxd/internal/sandbox/lifecycle"
	"github.com/sandboxd/sandboxd/runtime"
)

// port is the lifecycle's Port on the Docker daemon.
type port struct {
	client Client
	log    *slog.Logger
	egress *egressNetwork // nil without an egress gateway
	// runscNetworkNone says Docker has runsc registered as
	// runscNetworkNone too: runsc containers without egress run so.
	runscNetworkNone bool
}

var _ lifecycle.Port = (*port)(nil)

// Create creates the container, unstarted.
func (e *port) Create(ctx context.Context, cfg lifecycle.Config) (lifecycle.Box, error) {
	hc, err := hostConfig(cfg)
	if err != nil {
		return nil, err
	}
	cc, nc := containerConfig(cfg), &network.NetworkingConfig{}
	switch addr := cfg.Spec.Egress; {
	case addr.IsValid():
		if e.egress == nil {
			return nil, fmt.Errorf("this daemon has no egress gateway for allow-listed networks: %w", errdefs.ErrFailedPrecondition)
		}
		nc = withEgress(cc, hc, e.egress.name, addr, e.egress.gw.Addr())
	case cfg.Spec.Runtime == runtime.RunscName && e.runscNetworkNone:
		ownLoopback(cc, hc)
	}
	created, err := e.client.ContainerCreate(ctx, cc, hc, nc, nil, cfg.Name)
	if err != nil {
		return nil, dockerError("create container", err)
	}
	b := e.box(created.ID, cfg.Name)
	b.egress = cfg.Spec.Egress.IsValid()
	return b, nil
}

// Find lists the containers that carry all of labels.
func (e *port) Find(ctx context.Context, labels map[string]string) ([]lifecycle.Box, error) {
	args := filters.NewArgs()
	for k, v := range labels {
		args.Add("label", k+"="+v)
	}
	list, err := e.client.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, dockerError("list containers", err)
	}
	boxes := make([]lifecycle.Box, 0, len(list))
	for _, s := range list {
		boxes = append(boxes, e.box(s.ID, s.ID))
	}
	return boxes, nil
}

func (e *port) box(id, name string) *box {
	return &box{e: e, id: id, name: name, copied: make(chan struct{}), exited: make(chan error, 1), cancelWait: func() {}}
}

// box is one Docker container.
type box struct {
	e    *port
	id   string
	name string

	// egress says the container is on the egress network, where Docker's
	// DNS server must be cut off before the program runs.
	egress bool

	attach     types.HijackedResponse
	copied     chan struct{} // closed when the output copy has ended
	exited     chan error    // Docker's word on the exit; buffered
	cancelWait context.CancelFunc
}

// Start attaches to the container, registers for its exit, and starts it.
func (b *box) Start(ctx context.Context) error {
	var err error
	b.attach, err = b.e.client.ContainerAttach(ctx, b.id, container.AttachOptions{
		Stream: true, Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return dockerError("attach container", err)
	}
	// The exit must be registered before the start, or a fast program's
	// exit is missed. It outlives ctx: Remove ends it.
	waitCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.cancelWait = cancel
	go b.awaitExit(b.e.client.ContainerWait(waitCtx, b.id, container.WaitConditionNextExit))
	if err := b.e.client.ContainerStart(ctx, b.id, container.StartOptions{}); err != nil {
		return dockerError("start container", err)
	}
	if b.egress {
		// The init waits for its launch: nothing of the task runs yet.
		inspect, err := b.e.client.ContainerInspect(ctx, b.id)
		if err != nil {
			return dockerError("inspect container", err)
		}
		if err := blockEmbeddedDNS(netnsOf(inspect)); err != nil {
			return fmt.Errorf("cut off Docker's DNS server in %s: %w", b.name, err)
		}
	}
	return nil
}

// netnsOf is the path of a started container's network namespace, as
// this daemon can open it: through its init's process, which waits for
// its launch, as every other look into a container goes. Docker's
// SandboxKey, the namespace bound under /run/docker/netns, is an empty
// file to a daemon whose mount namespace does not receive dockerd's later
// mounts (the fourth review's private mount namespace); it is the answer
// only when the init's process is not in this daemon's PID namespace.
func netnsOf(inspect container.InspectResponse) string {
	if inspect.State != nil && inspect.State.Pid > 0 {
		p := fmt.Sprintf("/proc/%d/ns/net", inspect.State.Pid)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if inspect.NetworkSettings != nil {
		return inspect.NetworkSettings.SandboxKey
	}
	return ""
}

// awaitExit passes the backend's answer on to b.exited, which holds it until
// the lifecycle asks, if it ever does: the client's channels are
// unbuffered, and a wait that ended on the exit report never asks.
func (b *box) awaitExit(resp <-chan container.WaitResponse, errs <-chan error) {
	select {
	case r := <-resp:
		var err error
		if r.Error != nil && r.Error.Message != "" {
			err = dockerError("wait for container", errors.New(r.Error.Message))
		}
		b.exited <- err
	case err := <-errs:
		b.exited <- dockerError("wait for container", err)
	}
}

// stopped says whether the container has stopped running, waiting up to
// a second for dockerd to see it so.
func (b *box) stopped(ctx context.Context) bool {
	for i := 0; i < 20 && ctx.Err() == nil; i++ {
		inspect, err := b.e.client.ContainerInspect(ctx, b.id)
		if errdefs.IsNotFound(err) || err == nil && inspect.State != nil && !inspect.State.Running {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// Update applies new limits to the container.
func (b *box) Update(ctx context.Context, l lifecycle.Limits) error {
	_, err := b.e.client.ContainerUpdate(ctx, b.id, container.UpdateConfig{Resources: container.Resources{
		Memory: l.MemoryBytes, MemorySwap: l.MemorySwapBytes, NanoCPUs: l.CPUMillis * 1_000_000, PidsLimit: &l.PidsLimit,
	}})
	if err != nil {
		return dockerError("update container", err)
	}
	return nil
}

// Attach copies the attach stream to stdout and stderr until it ends.
func (b *box) Attach(stdout, stderr io.Writer) {
	go func() {
		defer close(b.copied)
		// StdCopy's buffer is bounded by the backend's frame size; the
		// writers never fail, so this ends only at the stream's end.
		if _, err := stdcopy.StdCopy(stdout, stderr, b.attach.Reader); err != nil && !errors.Is(err, io.EOF) {
			b.e.log.Debug("output copy ended", "container", b.name, "err", err)
		}
	}()
}

// Input is the write half of the attach stream.
func (b *box) Input() io.WriteCloser { return attachInput{b.attach} }

type attachInput struct{ types.HijackedResponse }

func (a attachInput) Write(p []byte) (int, error) { return a.Conn.Write(p) }
func (a attachInput) Close() error                { return a.CloseWrite() }

func (b *box) Exited() <-chan error        { return b.exited }
func (b *box) OutputDone() <-chan struct{} { return b.copied }
func (b *box) CloseOutput()                { b.attach.Close() }

// Status reads how the container exited from its inspection.
func (b *box) Status(ctx context.Context) (lifecycle.Status, error) {
	inspect, err := b.e.client.ContainerInspect(ctx, b.id)
	if err != nil {
		return lifecycle.Status{}, dockerError("inspect container", err)
	}
	var st lifecycle.Status
	if s := inspect.State; s != nil {
		st.Code, st.OOMKilled = s.ExitCode, s.OOMKilled
		st.FinishedAt, _ = time.Parse(time.RFC3339Nano, s.FinishedAt)
	}
	return st, nil
}

// Kill sends SIGKILL to the container's init, which takes every process of
// its PID namespace with it.
func (b *box) Kill(ctx context.Context) error {
	err := b.e.client.ContainerKill(ctx, b.id, "KILL")
	if err != nil && !errdefs.IsNotFound(err) && !errdefs.IsConflict(err) {
		return dockerError("kill container", err)
	}
	return nil
}

// Release sends SIGTERM to the container's init alone.
func (b *box) Release(ctx context.Context) error {
	err := b.e.client.ContainerKill(ctx, b.id, "TERM")
	if err != nil && !errdefs.IsNotFound(err) && !errdefs.IsConflict(err) {
		return dockerError("signal container", err)
	}
	return nil
}

// Remove force-removes the container and ends its streams.
func (b *box) Remove(ctx context.Context) error {
	err := b.e.client.ContainerRemove(ctx, b.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	// A container that exits while dockerd kills it for the removal is
	// refused ("Could not kill running container ... is not running", seen
	// on runsc as the program ends); it has stopped by then, and a later
	// removal takes it.
	for try := 0; try < 3 && err != nil && !errdefs.IsNotFound(err) && b.stopped(ctx); try++ {
		time.Sleep(100 * time.Millisecond << try)
		err = b.e.client.ContainerRemove(ctx, b.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}
	if b.attach.Conn != nil {
		b.attach.Close()
	}
	b.cancelWait()
	if err != nil && !errdefs.IsNotFound(err) {
		return dockerError("remove container", err)
	}
	return nil
}

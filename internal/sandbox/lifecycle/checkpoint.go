package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
	"github.com/sandboxd/sandboxd/runtime"
)

// Checkpointing is the optional ability of a Port to save a running
// container, memory and all, and to restore it (Config.RestoreFrom).
type Checkpointing interface {
	// Checkpoints says why the containers of the OCI runtime name
	// cannot be checkpointed on this host, or nil when they can.
	Checkpoints(name string) error
}

// CheckpointBox is a Box of a Checkpointing port.
type CheckpointBox interface {
	// Checkpoint saves the container to dir. Without leave it ends,
	// as an exit would; with leave it goes on.
	Checkpoint(ctx context.Context, dir string, leave bool) error
}

// savedFile is the lifecycle's record in a checkpoint's folder, beside
// the OCI runtime's image: what the host knew of the session.
const savedFile = "sandboxd-session.json"

// saved is what a checkpoint's record holds.
type saved struct {
	Runtime string `json:"runtime"`
	// Last is the last background process's number: the restore's go on
	// from it. Processes are those that ran.
	Last      uint32         `json:"last_process"`
	Processes []savedProcess `json:"processes,omitempty"`
}

type savedProcess struct {
	ID       uint32              `json:"id"`
	Terminal *runtime.WindowSize `json:"terminal,omitempty"`
}

// quiesceTimeout bounds the wait for the init to hold its output, which
// it does as soon as it reads the message; restoreTimeout the wait for a
// restore's init to write again, after the OCI runtime loaded its memory
// (about a second for 170 MiB under gVisor).
const (
	quiesceTimeout = 10 * time.Second
	restoreTimeout = 2 * time.Minute
)

var _ runtime.Checkpointer = (*session)(nil)

// Checkpoint saves the session between calls: the init holds its output
// first (launch.Spec.Quiesce), so that the frames end whole before the
// checkpoint and a restore's begin on one; each background process's
// frames are all delivered by then.
func (s *session) Checkpoint(ctx context.Context, dir string, leave bool) ([]runtime.SavedProcess, error) {
	c := s.c
	box, err := c.l.checkpointBox(c)
	if err != nil {
		return nil, err
	}
	if !s.mu.TryLock() {
		return nil, errdefs.ErrFailedPrecondition.WithMessage("a call is running in the session: a checkpoint is taken between calls")
	}
	defer s.mu.Unlock()
	s.openMu.Lock()
	defer s.openMu.Unlock()
	if err := s.brokenErr(); err != nil {
		return nil, err
	}
	// A session no message opened yet is opened by the quiesce: the
	// restore waits for the init's word, which only a session's init
	// gives.
	rec := saved{Runtime: c.runtime}
	if err := s.quiesce(ctx); err != nil {
		return nil, s.fail(err)
	}
	s.procs.mu.Lock()
	rec.Last = s.procs.last
	var procs []runtime.SavedProcess
	for n, p := range s.procs.running {
		rec.Processes = append(rec.Processes, savedProcess{ID: n, Terminal: p.spec.Terminal})
		procs = append(procs, runtime.SavedProcess{ID: n, Process: p, Terminal: p.spec.Terminal != nil})
	}
	s.procs.saved = !leave
	s.procs.mu.Unlock()
	if err := box.Checkpoint(ctx, dir, leave); err != nil {
		s.procs.mu.Lock()
		s.procs.saved = false
		s.procs.mu.Unlock()
		err = fmt.Errorf("checkpoint %s: %w", c.name, err)
		if rerr := s.resume(); rerr != nil {
			return nil, s.fail(errors.Join(err, rerr))
		}
		return nil, err
	}
	if err := writeSaved(dir, rec); err != nil {
		if !leave {
			s.fail(errors.New("the session was checkpointed, and its container ended"))
		}
		return nil, err
	}
	if !leave {
		s.fail(errors.New("the session was checkpointed, and its container ended"))
		return procs, nil
	}
	if err := s.resume(); err != nil {
		return nil, s.fail(fmt.Errorf("resume %s after its checkpoint: %w", c.name, err))
	}
	return procs, nil
}

// quiesce asks the init to hold its output, and waits for its word; the
// caller holds openMu.
func (s *session) quiesce(ctx context.Context) error {
	held := make(chan struct{})
	s.procs.mu.Lock()
	s.procs.held = held
	s.procs.mu.Unlock()
	spec := launch.Spec{Quiesce: true}
	if !s.opened {
		// The session's first message: the init checks its user, and
		// opens its working folder, which "/" always is.
		spec.Session, spec.Tools, spec.UID, spec.GID, spec.Dir = true, true, s.c.uid, s.c.gid, "/"
	}
	var m bytesWriter
	if err := launch.Write(&m, spec); err != nil {
		return err
	}
	if err := s.send(m); err != nil {
		return fmt.Errorf("ask %s to hold its output: %w", s.c.name, err)
	}
	s.opened = true
	return s.await(ctx, held, quiesceTimeout, "hold its output")
}

// resume lets the init write again.
func (s *session) resume() error {
	var m bytesWriter
	if err := launch.Write(&m, launch.Spec{Resume: true}); err != nil {
		return err
	}
	return s.send(m)
}

// await waits for the init's word on ch, what, within bound.
func (s *session) await(ctx context.Context, ch <-chan struct{}, bound time.Duration, what string) error {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-ch:
		return nil
	case <-s.ended:
		return fmt.Errorf("the output of %s ended before its init would %s", s.c.name, what)
	case <-s.c.box.OutputDone():
		return fmt.Errorf("the container %s ended before its init would %s", s.c.name, what)
	case <-timer.C:
		return fmt.Errorf("the init of %s did not %s within %v", s.c.name, what, bound)
	case <-ctx.Done():
		return fmt.Errorf("the init of %s would %s: %w", s.c.name, what, ctx.Err())
	}
}

func writeSaved(dir string, rec saved) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, savedFile), data, 0o600)
}

// checkpointBox is c's box, when its port can checkpoint containers of
// its OCI runtime; otherwise a failed precondition saying why not.
func (l *Lifecycle) checkpointBox(c *container) (CheckpointBox, error) {
	if err := l.checkpoints(c.runtime); err != nil {
		return nil, err
	}
	box, ok := c.box.(CheckpointBox)
	if !ok {
		return nil, errdefs.ErrFailedPrecondition.WithMessage("this backend's containers cannot be checkpointed")
	}
	return box, nil
}

// Checkpoints says why the port cannot checkpoint containers of the OCI
// runtime name, or nil.
func (l *Lifecycle) Checkpoints(name string) error { return l.checkpoints(name) }

func (l *Lifecycle) checkpoints(runtimeName string) error {
	cp, ok := l.port.(Checkpointing)
	if !ok {
		return errdefs.ErrFailedPrecondition.WithMessage("this backend cannot checkpoint sessions: the direct backend (--backend direct) with gVisor can")
	}
	if err := cp.Checkpoints(runtimeName); err != nil {
		return errdefs.ErrFailedPrecondition.WithMessage(err.Error())
	}
	return nil
}

var _ runtime.Restorer = (*Lifecycle)(nil)

// Restore makes a container of spec from the checkpoint in dir and makes
// it the session's it was: the background processes the checkpoint holds
// report to procs' writers, and numbers go on from the checkpoint's.
func (l *Lifecycle) Restore(ctx context.Context, spec runtime.Spec, dir string, procs map[uint32]runtime.ProcessSpec) (runtime.Restored, error) {
	if err := l.checkpoints(spec.Runtime); err != nil {
		return runtime.Restored{}, err
	}
	if err := spec.Validate(true); err != nil {
		return runtime.Restored{}, err
	}
	var rec saved
	data, err := os.ReadFile(filepath.Join(dir, savedFile))
	if err == nil {
		err = json.Unmarshal(data, &rec)
	}
	if err != nil {
		return runtime.Restored{}, fmt.Errorf("the checkpoint in %s: %w: %w", dir, err, errdefs.ErrFailedPrecondition)
	}
	if rec.Runtime != spec.Runtime {
		return runtime.Restored{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("the checkpoint was taken under %s, not %s", rec.Runtime, spec.Runtime))
	}
	for id := range procs {
		if !rec.has(id) {
			return runtime.Restored{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("the checkpoint holds no background process %d", id))
		}
	}
	c, err := l.create(ctx, spec, dir)
	if err != nil {
		return runtime.Restored{}, err
	}
	s, err := c.newSession()
	if err != nil {
		c.removeAfterFailure(ctx)
		return runtime.Restored{}, err
	}
	// The checkpoint's init had its first message, and holds its output
	// until the Resume.
	s.opened = true
	restored := runtime.Restored{Container: c, Session: s, Processes: map[uint32]runtime.Process{}}
	s.procs.mu.Lock()
	s.procs.last = rec.Last
	s.procs.running = map[uint32]*process{}
	for _, sp := range rec.Processes {
		ps := procs[sp.ID]
		ps.Terminal = sp.Terminal
		p := &process{s: s, n: sp.ID, spec: ps, started: make(chan struct{}), done: make(chan struct{})}
		close(p.started)
		s.procs.running[sp.ID] = p
		restored.Processes[sp.ID] = p
	}
	s.procs.mu.Unlock()
	// The OCI runtime reads the checkpoint until the restore is whole,
	// after it said the container runs: the init's word that it writes
	// again is that end.
	resumed := make(chan struct{})
	s.procs.mu.Lock()
	s.procs.resumed = resumed
	s.procs.mu.Unlock()
	err = s.resume()
	if err == nil {
		err = s.await(ctx, resumed, restoreTimeout, "write again")
	}
	if err != nil {
		c.removeAfterFailure(ctx)
		return runtime.Restored{}, fmt.Errorf("resume the restored %s: %w", c.name, err)
	}
	return restored, nil
}

func (rec saved) has(id uint32) bool {
	for _, p := range rec.Processes {
		if p.ID == id {
			return true
		}
	}
	return false
}

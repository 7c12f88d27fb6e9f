package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/session"
)

// A session is paused by a checkpoint of its container to disk (see
// runtime.Checkpointer), which then goes: its memory, processes and
// memory-backed folders are in the checkpoint, its /workspace stays in its
// folder. Its resume restores the checkpoint into a new container on the
// same folders, its background processes going on under their IDs. A
// paused session is its owner's alone, takes no call, and counts against
// the session bounds apart from the running ones.

// checkpointDir is where a paused session's checkpoint is.
func (s *Service) checkpointDir(id string) string {
	return filepath.Join(s.cfg.StateDir, "checkpoints", s.cfg.Instance, id)
}

// PauseSession saves a session of the caller's to disk between its calls
// and removes its container.
func (s *Service) PauseSession(ctx context.Context, id string) (info session.Info, err error) {
	defer func() { s.recordPause(ctx, id, "paused", err) }()
	sess, err := s.liveSession(ctx, id)
	if err != nil {
		return session.Info{}, err
	}
	caller := access.CallerFrom(ctx)
	tenant := s.sessions.Info(sess).Tenant
	all, mine := s.sessions.Paused(tenant)
	if all >= s.cfg.MaxSessions {
		return session.Info{}, fmt.Errorf("%d sessions are paused, the most this daemon keeps (--max-sessions): %w", all, errdefs.ErrResourceExhausted)
	}
	if t := caller.Tenant; t != nil && t.MaxSessions > 0 && mine >= t.MaxSessions {
		return session.Info{}, &BusyError{Quota: quotaMaxSessions, Tenant: caller.Name, Limit: t.MaxSessions, RetryAfter: time.Minute}
	}
	if err := sess.take(ctx); err != nil {
		return session.Info{}, err
	}
	defer sess.give()
	// Another pause, or the end, may have come while this one waited.
	if err := s.stillLive(sess, id); err != nil {
		return session.Info{}, err
	}
	dir := s.checkpointDir(id)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return session.Info{}, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return session.Info{}, fmt.Errorf("the checkpoint's folder: %w", err)
	}
	saved, err := sess.box.Pause(ctx, dir)
	if err != nil {
		os.RemoveAll(dir)
		if errdefs.IsUnavailable(err) {
			// The container is gone, or broken: the session with it.
			s.endSession(id, session.Failed, err.Error())
		}
		return session.Info{}, err
	}
	digest, err := digestDir(dir)
	if err != nil {
		// The container is gone: without a digest the checkpoint cannot
		// be trusted at the resume, and the session cannot go on.
		s.endSession(id, session.Failed, "its checkpoint could not be read back: "+err.Error())
		return session.Info{}, fmt.Errorf("read back the checkpoint of %s: %w", id, err)
	}
	sess.procs.mu.Lock()
	sess.checkpointDigest = digest
	sess.saved = map[uint32]*liveProcess{}
	for _, sp := range saved {
		for _, p := range sess.procs.list {
			if p.current() == sp.Process {
				sess.saved[sp.ID] = p
			}
		}
	}
	sess.procs.mu.Unlock()
	now := time.Now().UTC()
	s.sessions.Update(sess, func(info *session.Info) {
		info.State, info.LastUsedAt = session.Paused, now
	})
	s.log.Info("session paused", "session", id, "tenant", tenant, "processes", len(saved))
	return s.sessions.Info(sess), nil
}

// stillLive says why the session sess, whose turn the caller holds, can
// no longer be paused: it ended, or is paused already.
func (s *Service) stillLive(sess *liveSession, id string) error {
	info, now, ok := s.sessions.Find(id)
	switch {
	case !ok || now != sess:
		return errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("session %q has ended (%s): %s", id, info.State, info.Reason))
	case info.State == session.Paused:
		return errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("session %q is paused already", id))
	}
	return nil
}

// ResumeSession restores a paused session of the caller's into a new
// container: its variables, processes and files as they were at the pause.
func (s *Service) ResumeSession(ctx context.Context, id string) (info session.Info, err error) {
	defer func() { s.recordPause(ctx, id, "resumed", err) }()
	info, sess, ok := s.sessions.Find(id)
	switch {
	case !ok || !access.CallerFrom(ctx).Owns(info.Tenant):
		return session.Info{}, s.unknownSession("session_id", id)
	case sess == nil:
		return session.Info{}, errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("session %q has ended (%s): %s", id, info.State, info.Reason))
	case info.State != session.Paused:
		return session.Info{}, errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("session %q is not paused", id))
	}
	if err := sess.take(ctx); err != nil {
		return session.Info{}, err
	}
	defer sess.give()
	// Another resume, or the end, may have come while this one waited.
	if now, _, _ := s.sessions.Find(id); now.State != session.Paused {
		return session.Info{}, errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("session %q is not paused (%s)", id, now.State))
	}
	dir := s.checkpointDir(id)
	sess.procs.mu.Lock()
	want := sess.checkpointDigest
	sess.procs.mu.Unlock()
	if got, err := digestDir(dir); err != nil || got != want {
		why := "its checkpoint changed on disk while it was paused"
		if err != nil {
			why = "its checkpoint cannot be read: " + err.Error()
		}
		s.endSession(id, session.Failed, why)
		return session.Info{}, errdefs.ErrDataLoss.WithMessage(fmt.Sprintf("session %s was not resumed: %s", id, why))
	}
	specs := map[uint32]runtime.ProcessSpec{}
	sess.procs.mu.Lock()
	for n, p := range sess.saved {
		specs[n] = runtime.ProcessSpec{Stdout: p.out, Stderr: p.errOut}
	}
	sess.procs.mu.Unlock()
	procs, err := sess.box.Resume(ctx, dir, specs)
	if err != nil {
		if !errdefs.IsFailedPrecondition(err) && !errdefs.IsInvalidArgument(err) {
			return session.Info{}, fmt.Errorf("resume session %s: %w", id, err)
		}
		return session.Info{}, err
	}
	sess.procs.mu.Lock()
	for n, p := range sess.saved {
		p.resumed <- procs[n]
	}
	sess.saved = nil
	sess.procs.mu.Unlock()
	if err := os.RemoveAll(dir); err != nil {
		s.log.Warn("remove a resumed session's checkpoint", "session", id, "err", err)
	}
	now := time.Now().UTC()
	s.sessions.Update(sess, func(info *session.Info) {
		info.State, info.LastUsedAt, info.IdleExpiresAt = session.Active, now, now.Add(sess.idleTTL)
	})
	s.log.Info("session resumed", "session", id, "tenant", info.Tenant)
	return s.sessions.Info(sess), nil
}

// endPaused ends what a paused session holds beside its folders: its
// processes' waits for a resume, and its checkpoint.
func (s *Service) endPaused(sess *liveSession) {
	sess.procs.mu.Lock()
	for _, p := range sess.saved {
		p.resumed <- nil
	}
	sess.saved = nil
	sess.procs.mu.Unlock()
	if err := os.RemoveAll(s.checkpointDir(sess.info.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("remove a paused session's checkpoint", "session", sess.info.ID, "err", err)
	}
}

// recordPause audits a pause or resume, refused or not.
func (s *Service) recordPause(ctx context.Context, id, what string, err error) {
	if err != nil {
		s.auditDecision(ctx, audit.Event{SessionID: id}, err)
		return
	}
	if s.auditLog == nil {
		return
	}
	e := s.auditEvent(ctx)
	e.Kind, e.SessionID, e.Session = audit.KindSession, id, what
	s.audit(e)
}

// digestDir is the SHA-256 of a checkpoint's folder: each file's name,
// size and bytes, in the order of their names. A resume restores only
// the checkpoint its pause wrote: the folder is root's, but what runsc
// restores is a sandbox's whole memory, and a change to it is a change
// to what runs.
func digestDir(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if !d.Type().IsRegular() {
			if d.IsDir() {
				fmt.Fprintf(h, "dir %q\n", rel)
				return nil
			}
			return fmt.Errorf("%s is not a regular file", rel)
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "file %q %d\n", rel, st.Size())
		_, err = io.Copy(h, f)
		return err
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

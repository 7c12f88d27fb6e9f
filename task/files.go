package task

import (
	"context"
	"fmt"
	"io"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/task/exec"
	"github.com/sandboxd/sandboxd/task/run"
)

// FileInfo is a file written into a session.
type FileInfo = exec.FileInfo

// UploadFile writes what r holds to path (relative to /workspace) in a
// session, replacing the file there, creating the folders on its way, all
// owned by the session's user. Its size is bounded by the session's disk
// alone. It waits for the session's running call, and the session's next
// call's bundle records it.
func (s *Service) UploadFile(ctx context.Context, sessionID, p string, executable bool, r io.Reader) (info FileInfo, err error) {
	defer func() {
		what := "upload " + p
		if err == nil {
			what = fmt.Sprintf("upload %s (%d bytes, sha256 %s)", p, info.Size, info.SHA256)
		}
		s.auditDecision(ctx, audit.Event{SessionID: sessionID, Reason: what}, err)
	}()
	if err := run.CheckRelPath("path", p); err != nil {
		return FileInfo{}, err
	}
	sess, err := s.liveSession(ctx, sessionID)
	if err != nil {
		return FileInfo{}, err
	}
	if err := sess.take(ctx); err != nil {
		return FileInfo{}, err
	}
	defer sess.give()
	info, err = sess.box.Upload(p, executable, r)
	if err != nil && ctx.Err() != nil {
		return FileInfo{}, fmt.Errorf("upload %s: %w", p, ctx.Err())
	}
	return info, err
}

// ReadFile opens the regular file at path (relative to /workspace) of a
// session of the caller's.
func (s *Service) ReadFile(ctx context.Context, sessionID, p string) (io.ReadCloser, error) {
	if err := run.CheckRelPath("path", p); err != nil {
		return nil, err
	}
	sess, err := s.liveSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	return sess.box.Open(p)
}

// ListFiles lists a session's /workspace below dir ("" for all of it),
// with each file's size and SHA-256, within the output limits.
func (s *Service) ListFiles(ctx context.Context, sessionID, dir string) ([]artifacts.Output, error) {
	if dir != "" && dir != "." {
		if err := run.CheckRelPath("path", dir); err != nil {
			return nil, err
		}
	}
	sess, err := s.liveSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	return sess.box.List(dir)
}

// GetFile writes the output file at path of a stored bundle to w. The
// bundle is verified as it is read: an error after some bytes were written
// means the bundle is not sound, and those bytes are not to be used.
func (s *Service) GetFile(ctx context.Context, digest, p string, w io.Writer) error {
	if err := run.CheckRelPath("path", p); err != nil {
		return err
	}
	f, err := s.OpenBundle(ctx, digest)
	if err != nil {
		return err
	}
	defer f.Close()
	want := artifacts.DirOutput + "/" + p
	found := false
	if _, err := artifacts.Verify(f, digest, artifacts.DefaultReadLimits(), func(name string, r io.Reader) error {
		if name != want {
			return nil
		}
		found = true
		_, err := io.Copy(w, r)
		return err
	}); err != nil {
		return err
	}
	if !found {
		return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("path: bundle %s stores no output file %s", digest, p))
	}
	return nil
}

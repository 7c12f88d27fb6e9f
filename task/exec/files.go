package exec

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// A session's /workspace is read and written from the host side, below
// the workspace's folder, following no link: the files are the session's
// code's, and may lie. The façade takes the session's turn around each.

// FileInfo is a file written into a session.
type FileInfo struct {
	// Path is relative to /workspace.
	Path   string
	Size   int64
	SHA256 string
}

// Upload writes what r holds to p (relative to /workspace), replacing the
// file there, creating the folders on its way, all owned by the session's
// user. Its size is bounded by the session's disk alone; the session's
// next call's bundle records it.
func (sess *Session) Upload(p string, executable bool, r io.Reader) (FileInfo, error) {
	root, err := sess.ws.OpenWorkspace()
	if err != nil {
		return FileInfo{}, err
	}
	defer unix.Close(root)
	dir, err := taskdir.MakeDirs(root, path.Dir(p), sess.ws.UID)
	if err != nil {
		return FileInfo{}, fileError(path.Dir(p), err)
	}
	defer unix.Close(dir)
	tmp, err := tempName()
	if err != nil {
		return FileInfo{}, err
	}
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return FileInfo{}, fmt.Errorf("path %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	// A copy the next call's bundle stores, wherever the code moves it.
	kept, err := sess.keepUpload()
	if err != nil {
		f.Close()
		_ = unix.Unlinkat(dir, tmp, 0)
		return FileInfo{}, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h, kept), r)
	if cerr := kept.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = f.Chown(int(sess.ws.UID), int(sess.ws.UID))
	}
	mode := os.FileMode(0o644)
	if executable {
		mode = 0o755
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, path.Base(p))
	}
	if err != nil {
		_ = unix.Unlinkat(dir, tmp, 0)
		_ = os.Remove(kept.Name())
		if errors.Is(err, unix.ENOSPC) {
			return FileInfo{}, fmt.Errorf("path %s: the session's disk of %s is full: %w", p, bytesString(sess.Plan.Limits.DiskBytes), errdefs.ErrResourceExhausted)
		}
		if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EEXIST) {
			return FileInfo{}, run.Invalid("path", "%s: a folder is in the way: %v", p, err)
		}
		return FileInfo{}, fmt.Errorf("upload %s: %w", p, err)
	}
	info := FileInfo{Path: p, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
	sess.uploads = append(sess.uploads, upload{Upload: artifacts.Upload{Path: p, Size: n, SHA256: info.SHA256, Executable: executable}, copy: kept.Name()})
	return info, nil
}

// Open opens the regular file at p (relative to /workspace).
func (sess *Session) Open(p string) (io.ReadCloser, error) {
	root, err := sess.ws.OpenWorkspace()
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	fd, err := taskdir.OpenBelow(root, p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		return nil, fileError(p, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, run.Invalid("path", "%s is not a regular file", p)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// List lists /workspace below dir ("" for all of it), with each file's
// size and SHA-256, within the output limits.
func (sess *Session) List(dir string) ([]artifacts.Output, error) {
	snap, err := taskdir.TakeSnapshot(sess.ws.Path(taskdir.Workspace), sess.workspace, sess.ex.cfg.Output)
	if err != nil {
		return nil, err
	}
	var out []artifacts.Output
	for _, p := range snap.Paths() {
		if dir != "" && dir != "." && p != dir && !bytes.HasPrefix([]byte(p), []byte(dir+"/")) {
			continue
		}
		e, _ := snap.Entry(p)
		o := artifacts.Output{Path: p, Type: e.Type, SHA256: e.SHA256}
		if e.Type == "file" {
			o.Size = e.Size
		}
		out = append(out, o)
	}
	return out, nil
}

// upload is a file uploaded into a session since its last call, and the
// host-side copy of it that the next call's bundle stores.
type upload struct {
	artifacts.Upload
	copy string
}

// keepUpload makes the host-side copy of an upload, in the session's own
// folder, out of the container's reach.
func (sess *Session) keepUpload() (*os.File, error) {
	dir := sess.ws.Path("uploads")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return os.CreateTemp(dir, "upload-")
}

// takeUploads hands the uploads since the last call to the next call's
// bundle, and forgets them.
func (sess *Session) takeUploads() ([]artifacts.Upload, []artifacts.Source, func()) {
	ups := sess.uploads
	sess.uploads = nil
	var list []artifacts.Upload
	var sources []artifacts.Source
	for _, u := range ups {
		list = append(list, u.Upload)
		sources = append(sources, artifacts.Source{Path: artifacts.DirUpload + "/" + u.Path, Size: u.Size, Executable: u.Executable,
			Open: func() (io.ReadCloser, error) { return os.Open(u.copy) }})
	}
	return list, sources, func() {
		for _, u := range ups {
			_ = os.Remove(u.copy)
		}
	}
}

func tempName() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return ".sandboxd-upload-" + hex.EncodeToString(b), nil
}

// fileError names what is wrong with a path of the workspace.
func fileError(p string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("path: %s does not exist", p))
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return run.Invalid("path", "%s goes through a link, which sandboxd does not follow", p)
	case errors.Is(err, unix.ENOTDIR):
		return run.Invalid("path", "%s: a file is in the way", p)
	}
	return fmt.Errorf("path %s: %w", p, err)
}

package task

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// workspace is the host side of one task's folders, all below one folder
// of the daemon's:
//
//	workspace/  a tmpfs of the task's disk size, owned by the sandbox user,
//	            mounted at /workspace (read-write)
//	input/      the request's files, mounted at /input (read-only)
//	code/       the program of a RunCode, mounted at /code (read-only)
//
// The tmpfs bounds what the program can write, and it is still readable from
// the host once the container is gone.
type workspace struct {
	dir string
}

const (
	wsWorkspace = "workspace"
	wsInput     = "input"
	wsCode      = "code"
)

// createWorkspace makes the folders of task id below root.
func createWorkspace(root, id string, diskBytes int64, uid, gid int) (_ *workspace, err error) {
	w := &workspace{dir: filepath.Join(root, id)}
	if err := os.Mkdir(w.dir, 0o711); err != nil {
		return nil, fmt.Errorf("task folder: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.remove())
		}
	}()
	for _, name := range []string{wsWorkspace, wsInput, wsCode} {
		if err := os.Mkdir(w.path(name), 0o755); err != nil {
			return nil, fmt.Errorf("task folder: %w", err)
		}
	}
	opts := fmt.Sprintf("size=%d,mode=0755,uid=%d,gid=%d", diskBytes, uid, gid)
	if err := unix.Mount("tmpfs", w.path(wsWorkspace), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return nil, fmt.Errorf("mount the workspace tmpfs: %w", err)
	}
	return w, nil
}

func (w *workspace) path(name string) string { return filepath.Join(w.dir, name) }

// writeFiles writes files below the folder name, read-only for everyone.
func (w *workspace) writeFiles(name string, files []File) error {
	root, err := os.OpenRoot(w.path(name))
	if err != nil {
		return err
	}
	defer root.Close()
	dirs := map[string]bool{}
	for _, f := range files {
		if dir := path.Dir(f.Path); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("input %s: %w", f.Path, err)
			}
			for ; dir != "."; dir = path.Dir(dir) {
				dirs[dir] = true
			}
		}
		mode := fs.FileMode(0o444)
		if f.Executable {
			mode = 0o555
		}
		if err := root.WriteFile(f.Path, f.Content, mode); err != nil {
			return fmt.Errorf("input %s: %w", f.Path, err)
		}
		// WriteFile's mode passes through the umask.
		if err := root.Chmod(f.Path, mode); err != nil {
			return fmt.Errorf("input %s: %w", f.Path, err)
		}
	}
	for dir := range dirs {
		if err := root.Chmod(dir, 0o555); err != nil {
			return fmt.Errorf("input %s: %w", dir, err)
		}
	}
	return os.Chmod(w.path(name), 0o555)
}

// makeWorkdir creates the working directory abs (in /workspace) owned by
// the sandbox user. The workspace is fresh: nothing in it is the task's yet.
func (w *workspace) makeWorkdir(abs string, uid, gid int) error {
	rel := path.Clean(abs[len(workspaceDir):])
	if rel == "/" || rel == "." {
		return nil
	}
	root, err := os.OpenRoot(w.path(wsWorkspace))
	if err != nil {
		return err
	}
	defer root.Close()
	rel = rel[1:]
	if err := root.MkdirAll(rel, 0o755); err != nil {
		return fmt.Errorf("workdir: %w", err)
	}
	for dir := rel; dir != "."; dir = path.Dir(dir) {
		if err := root.Lchown(dir, uid, gid); err != nil {
			return fmt.Errorf("workdir: %w", err)
		}
	}
	return nil
}

// remove unmounts the workspace and deletes the task's folders. Unmounting
// first drops whatever the program wrote without walking it.
func (w *workspace) remove() error {
	return removeTaskDir(w.dir)
}

// removeTaskDir unmounts and deletes a task folder, also one left behind by
// an earlier daemon.
func removeTaskDir(dir string) error {
	ws := filepath.Join(dir, wsWorkspace)
	if err := unix.Unmount(ws, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", ws, err)
	}
	// The read-only folders must be writable to be emptied.
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// probeMount checks, at start, that the daemon may mount a tmpfs below
// root, which every task needs.
func probeMount(root string) error {
	dir, err := os.MkdirTemp(root, ".probe-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=4k"); err != nil {
		return fmt.Errorf("sandboxd mounts a size-limited tmpfs as each task's /workspace and needs to run as root (CAP_SYS_ADMIN) for it: %w", err)
	}
	return unix.Unmount(dir, unix.MNT_DETACH)
}

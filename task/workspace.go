package task

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// workspace is the host side of one task's folders, all below one folder
// of the daemon's, 0700, which only root can enter:
//
//	workspace/  the task's writable folder, of its disk size, 0700 and
//	            owned by the task's own uid, mounted at /workspace
//	input/      the request's files, mounted at /input (read-only)
//	code/       the program of a RunCode, mounted at /code (read-only)
//
// Each of the three is a file system of its own (a tmpfs), so that the
// container's mountinfo shows no host path.
type workspace struct {
	dir  string
	disk Disk
	uid  uint32 // the task's uid and gid
	uids *uids  // where uid goes back when the folders are gone
	// egress is the container's address on the egress gateway's subnet,
	// when it has one; freeEgress gives it back.
	egress     netip.Addr
	freeEgress func(netip.Addr) error
}

const (
	wsWorkspace = "workspace"
	wsInput     = "input"
	wsCode      = "code"
	// wsControl holds the socket of a session's control connection (see
	// launch.ControlSocket): root's alone, never the program's.
	wsControl = "control"
)

// Disk makes the folders of each task.
type Disk interface {
	// Mount makes dir, an empty folder, a file system of its own as v
	// says.
	Mount(dir string, v Volume) error
	// Unmount undoes Mount; a folder that is not mounted is left as is.
	Unmount(dir string) error
	// Chown gives the file name below root to uid:gid.
	Chown(root *os.Root, name string, uid, gid int) error
}

// Volume is one of a task's folders.
type Volume struct {
	SizeBytes int64
	UID, GID  uint32
	Mode      fs.FileMode
}

// TmpfsDisk makes each task's folder a tmpfs of the task's disk size:
// memory-backed, bounded by the kernel, and still readable from the host
// once the container is gone. It needs CAP_SYS_ADMIN; it is the default.
type TmpfsDisk struct{}

// Mount mounts a tmpfs of v on dir.
func (TmpfsDisk) Mount(dir string, v Volume) error {
	opts := fmt.Sprintf("size=%d,mode=%04o,uid=%d,gid=%d", v.SizeBytes, v.Mode.Perm(), v.UID, v.GID)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// Unmount detaches the tmpfs, dropping what the program wrote without
// walking it.
func (TmpfsDisk) Unmount(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}

// Chown changes the owner of name without following a link.
func (TmpfsDisk) Chown(root *os.Root, name string, uid, gid int) error {
	return root.Lchown(name, uid, gid)
}

// FolderDisk leaves each task's folder a plain folder: no size limit and
// no change of owner, for tests that run the engine on a fake runtime
// without root. The engine suite (conformance) proves the real limit.
type FolderDisk struct{}

func (FolderDisk) Mount(string, Volume) error             { return nil }
func (FolderDisk) Unmount(string) error                   { return nil }
func (FolderDisk) Chown(*os.Root, string, int, int) error { return nil }

// createWorkspace makes the folders of task id below root, for a task of
// its own uid, with a writable folder of diskBytes; input and code hold at
// most what b lets a request carry.
func createWorkspace(disk Disk, root, id string, diskBytes int64, b Bounds, ids *uids) (_ *workspace, err error) {
	uid, err := ids.take()
	if err != nil {
		return nil, err
	}
	w := &workspace{dir: filepath.Join(root, id), disk: disk, uid: uid, uids: ids}
	if err := os.Mkdir(w.dir, 0o700); err != nil {
		ids.give(uid)
		return nil, fmt.Errorf("task folder: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.remove())
		}
	}()
	// tmpfs counts whole pages: room for each file's last page.
	const page = 4096
	for _, v := range []struct {
		name string
		vol  Volume
	}{
		{wsWorkspace, Volume{SizeBytes: diskBytes, UID: uid, GID: uid, Mode: 0o700}},
		{wsInput, Volume{SizeBytes: b.FilesBytes + int64(b.Files)*page + 1<<20, Mode: 0o755}},
		{wsCode, Volume{SizeBytes: b.CodeBytes + 1<<20, Mode: 0o755}},
		// A tmpfs too, so that the container's mountinfo names no host path.
		{wsControl, Volume{SizeBytes: page, Mode: 0o700}},
	} {
		if err := os.Mkdir(w.path(v.name), 0o700); err != nil {
			return nil, fmt.Errorf("task folder: %w", err)
		}
		if err := disk.Mount(w.path(v.name), v.vol); err != nil {
			return nil, fmt.Errorf("the %s folder: %w", v.name, err)
		}
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
// the task's uid. The workspace is fresh: nothing in it is the task's yet.
func (w *workspace) makeWorkdir(abs string) error {
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
		if err := w.disk.Chown(root, dir, int(w.uid), int(w.uid)); err != nil {
			return fmt.Errorf("workdir: %w", err)
		}
	}
	return nil
}

// remove unmounts the task's folders, deletes them, and gives the task's
// uid and egress address back.
func (w *workspace) remove() error {
	if err := removeTaskDir(w.disk, w.dir); err != nil {
		return err
	}
	w.uids.give(w.uid)
	if w.freeEgress != nil {
		if err := w.freeEgress(w.egress); err != nil {
			return err
		}
		w.freeEgress = nil
	}
	return nil
}

// removeTaskDir unmounts and deletes a task folder, also one left behind by
// an earlier daemon.
func removeTaskDir(disk Disk, dir string) error {
	for _, name := range []string{wsWorkspace, wsInput, wsCode, wsControl} {
		if err := disk.Unmount(filepath.Join(dir, name)); err != nil {
			return err
		}
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

// probeDisk checks, at start, that disk can make a task's folder below
// root, which every task needs.
func probeDisk(disk Disk, root string) error {
	dir, err := os.MkdirTemp(root, ".probe-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	if err := disk.Mount(dir, Volume{SizeBytes: 4096, Mode: 0o700}); err != nil {
		return fmt.Errorf("sandboxd makes a size-limited tmpfs the /workspace of each task and needs to run as root (CAP_SYS_ADMIN) for it: %w", err)
	}
	return disk.Unmount(dir)
}

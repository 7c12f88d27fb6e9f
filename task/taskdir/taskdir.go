// Package taskdir is the host side of one task's folders: it makes them
// (each a size-limited file system of its own), fills them with the
// request's inputs and code, walks what the program left there following
// no link (the outputs of a bundle, the snapshots of a session's
// workspace), and removes them with whatever was held for the task until
// then (its uid, its egress address).
//
// Everything below a task's folder is the task's and may lie: every walk
// and open below the workspace goes through openat2 with RESOLVE_BENEATH
// and no links.
package taskdir

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Dir is the host side of one task's folders, all below one folder of the
// daemon's, 0700, which only root can enter:
//
//	workspace/  the task's writable folder, of its disk size, 0700 and
//	            owned by the task's own uid, mounted at /workspace
//	input/      the request's files, mounted at /input (read-only)
//	code/       the program of a RunCode, mounted at /code (read-only)
//	control/    the socket of a session's control connection (see
//	            launch.ControlSocket): root's alone, never the program's
//
// Each is a file system of its own (a tmpfs), so that the container's
// mountinfo shows no host path.
type Dir struct {
	dir  string
	disk Disk
	// UID is the task's uid and gid.
	UID uint32
	// Egress is the container's address on the egress gateway's subnet,
	// when it has one.
	Egress netip.Addr
	// undo gives back, in reverse, what was held for the task.
	undo []func() error
}

// The folders of a Dir.
const (
	Workspace = "workspace"
	Input     = "input"
	Code      = "code"
	Control   = "control"
)

// Sizes are the sizes of a task's folders.
type Sizes struct {
	// Disk is the size of the writable workspace.
	Disk int64
	// Input and Code bound the request's files and its program: the
	// folders get a page more per file, as tmpfs counts whole pages.
	Input, Code int64
	InputFiles  int
}

// page is what tmpfs counts a file's last bytes as.
const page = 4096

// Create makes the folders of task id below root, for a task that runs as
// uid. On error nothing of them is left.
func Create(disk Disk, root, id string, uid uint32, sz Sizes) (_ *Dir, err error) {
	d := &Dir{dir: filepath.Join(root, id), disk: disk, UID: uid}
	if err := os.Mkdir(d.dir, 0o700); err != nil {
		return nil, fmt.Errorf("task folder: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, RemoveDir(disk, d.dir))
		}
	}()
	for _, v := range []struct {
		name string
		vol  Volume
	}{
		{Workspace, Volume{SizeBytes: sz.Disk, UID: uid, GID: uid, Mode: 0o700}},
		{Input, Volume{SizeBytes: sz.Input + int64(sz.InputFiles)*page + 1<<20, Mode: 0o755}},
		{Code, Volume{SizeBytes: sz.Code + 1<<20, Mode: 0o755}},
		{Control, Volume{SizeBytes: page, Mode: 0o700}},
	} {
		if err := os.Mkdir(d.Path(v.name), 0o700); err != nil {
			return nil, fmt.Errorf("task folder: %w", err)
		}
		if err := disk.Mount(d.Path(v.name), v.vol); err != nil {
			return nil, fmt.Errorf("the %s folder: %w", v.name, err)
		}
	}
	return d, nil
}

// OnRemove has Remove give back what was held for the task, after its
// folders are gone; the last added runs first.
func (d *Dir) OnRemove(undo func() error) { d.undo = append(d.undo, undo) }

// Path is the host path of name below the task's folder.
func (d *Dir) Path(name string) string { return filepath.Join(d.dir, name) }

// File is a file to write into one of the folders.
type File struct {
	// Path is relative to the folder.
	Path       string
	Content    []byte
	Executable bool
}

// WriteFiles writes files below the folder name, read-only for everyone.
// A file written there before (by a session's earlier call) is replaced:
// the folders on its way are opened to their owner while it is written
// and closed again after, so that writing needs no CAP_DAC_OVERRIDE.
func (d *Dir) WriteFiles(name string, files []File) error {
	if err := os.Chmod(d.Path(name), 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(d.Path(name))
	if err != nil {
		return err
	}
	defer root.Close()
	dirs := map[string]bool{}
	for _, f := range files {
		if err := openDirs(root, path.Dir(f.Path), dirs); err != nil {
			return fmt.Errorf("input %s: %w", f.Path, err)
		}
		mode := fs.FileMode(0o444)
		if f.Executable {
			mode = 0o555
		}
		if err := root.Remove(f.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("input %s: %w", f.Path, err)
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
	return os.Chmod(d.Path(name), 0o555)
}

// openDirs makes the folder dir below root, and each folder on its way,
// writable by its owner, making those missing; opened records them.
func openDirs(root *os.Root, dir string, opened map[string]bool) error {
	if dir == "." {
		return nil
	}
	if err := openDirs(root, path.Dir(dir), opened); err != nil {
		return err
	}
	if opened[dir] {
		return nil
	}
	err := root.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrExist) {
		err = root.Chmod(dir, 0o755)
	}
	if err != nil {
		return err
	}
	opened[dir] = true
	return nil
}

// MakeWorkdir creates the folder rel (relative to the workspace) owned by
// the task's uid. The workspace is fresh: nothing in it is the task's yet.
func (d *Dir) MakeWorkdir(rel string) error {
	rel = strings.TrimPrefix(path.Clean("/"+rel), "/")
	if rel == "" {
		return nil
	}
	root, err := os.OpenRoot(d.Path(Workspace))
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.MkdirAll(rel, 0o755); err != nil {
		return fmt.Errorf("workdir: %w", err)
	}
	for dir := rel; dir != "."; dir = path.Dir(dir) {
		if err := d.disk.Chown(root, dir, int(d.UID), int(d.UID)); err != nil {
			return fmt.Errorf("workdir: %w", err)
		}
	}
	return nil
}

// Remove unmounts the task's folders, deletes them, and gives back what
// was held for the task.
func (d *Dir) Remove() error {
	if err := RemoveDir(d.disk, d.dir); err != nil {
		return err
	}
	var errs []error
	for i := len(d.undo) - 1; i >= 0; i-- {
		errs = append(errs, d.undo[i]())
	}
	d.undo = nil
	return errors.Join(errs...)
}

// RemoveDir unmounts and deletes a task folder, also one left behind by an
// earlier daemon.
func RemoveDir(disk Disk, dir string) error {
	for _, name := range []string{Workspace, Input, Code, Control} {
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

// OpenWorkspace opens the workspace folder, for walks below it.
func (d *Dir) OpenWorkspace() (int, error) {
	return unix.Open(d.Path(Workspace), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// resolveNoLinks makes every path walk stay below the workspace and refuse
// any symlink on the way: the files are the task's and may lie.
const resolveNoLinks = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// OpenBelow opens p below the folder root with flags, through no link.
func OpenBelow(root int, p string, flags int) (int, error) {
	return unix.Openat2(root, p, &unix.OpenHow{Flags: uint64(flags), Resolve: resolveNoLinks})
}

// MakeDirs opens the folder rel below root, making what is missing of it,
// owned by uid; it follows no link. Its errors are the system's, for the
// caller to name (ENOENT, ELOOP, EXDEV, ENOTDIR).
func MakeDirs(root int, rel string, uid uint32) (int, error) {
	dir, err := unix.Dup(root)
	if err != nil {
		return -1, err
	}
	if rel == "." {
		return dir, nil
	}
	for _, part := range splitPath(rel) {
		err := unix.Mkdirat(dir, part, 0o755)
		if err == nil {
			err = unix.Fchownat(dir, part, int(uid), int(uid), unix.AT_SYMLINK_NOFOLLOW)
		} else if errors.Is(err, unix.EEXIST) {
			err = nil
		}
		var next int
		if err == nil {
			next, err = OpenBelow(dir, part, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
		}
		unix.Close(dir)
		if err != nil {
			return -1, err
		}
		dir = next
	}
	return dir, nil
}

func splitPath(p string) []string {
	var parts []string
	for p != "." && p != "/" && p != "" {
		parts = append([]string{path.Base(p)}, parts...)
		p = path.Dir(p)
	}
	return parts
}

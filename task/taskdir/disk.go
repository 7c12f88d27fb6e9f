package taskdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
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
	// MountRoot readies root, the empty folder of every task's folder,
	// and UnmountRoot undoes it once they are all gone.
	MountRoot(root string) error
	UnmountRoot(root string) error
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

// MountRoot makes root a tmpfs of its own, unless it is on one already
// (a crash left it mounted) or is not empty, which a tmpfs would hide.
// Each task makes its folder there, its four mount points and its
// stdout and stderr files, and removes them all: on a disk's file system
// that was 10% of the daemon's CPU per task (ext4's inode allocation),
// for folders that never outlive the boot.
func (TmpfsDisk) MountRoot(root string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return err
	}
	if st.Type == unix.TMPFS_MAGIC {
		return nil
	}
	if entries, err := os.ReadDir(root); err != nil || len(entries) > 0 {
		return err
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil {
		return fmt.Errorf("mount a tmpfs on the tasks' folder %s: %w", root, err)
	}
	return nil
}

// UnmountRoot unmounts the tmpfs that MountRoot mounted on root, if root
// is a file system of its own.
func (TmpfsDisk) UnmountRoot(root string) error {
	var st, parent unix.Stat_t
	if unix.Stat(root, &st) != nil || unix.Stat(filepath.Dir(root), &parent) != nil || st.Dev == parent.Dev {
		return nil
	}
	if err := unix.Unmount(root, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount the tasks' folder %s: %w", root, err)
	}
	return nil
}

// FolderDisk leaves each task's folder a plain folder: no size limit and
// no change of owner, for tests that run the engine on a fake runtime
// without root. The engine suite (conformance) proves the real limit.
type FolderDisk struct{}

func (FolderDisk) Mount(string, Volume) error             { return nil }
func (FolderDisk) Unmount(string) error                   { return nil }
func (FolderDisk) Chown(*os.Root, string, int, int) error { return nil }
func (FolderDisk) MountRoot(string) error                 { return nil }
func (FolderDisk) UnmountRoot(string) error               { return nil }

// Probe checks, at start, that disk can make a task's folder below root,
// which every task needs.
func Probe(disk Disk, root string) error {
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

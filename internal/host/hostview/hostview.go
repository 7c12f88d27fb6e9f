// Package hostview checks, before a daemon serves, that its backend's
// daemon (dockerd, containerd) sees what sandboxd mounts for containers
// (task folders, the init, pinned network namespaces) at the same paths.
// sandboxd in a mount namespace of its own whose mounts do not propagate
// to the backend's daemon's (a systemd unit with private mounts, a
// container without a shared mount) would start, then fail every container
// with an OCI runtime error that names neither the cause nor the fix.
package hostview

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// Result is what Check found out.
type Result struct {
	// DaemonPID is the backend's daemon's process as this daemon's PID namespace
	// numbers it, or 0 when the daemon is not in it (then nothing could be
	// checked).
	DaemonPID int
	// SameNamespace says the backend's daemon shares the daemon's mount namespace:
	// it sees every mount the daemon makes.
	SameNamespace bool
	// Unchecked, when not empty, says why the folders were not probed.
	Unchecked string
}

// Check finds the backend's daemon behind the unix socket sock and, when it runs in
// another mount namespace, mounts a small tmpfs under each of dirs (made if
// missing) and looks for it through the daemon's root. A folder whose mount
// the daemon cannot see is an error of class failed precondition that names
// the folder and the fix.
func Check(sock string, dirs []string) (Result, error) {
	pid, err := peerPID(sock)
	if err != nil {
		return Result{}, fmt.Errorf("find the backend's daemon behind %s: %w", sock, err)
	}
	if pid == 0 {
		return Result{Unchecked: "the backend's daemon runs in another PID namespace"}, nil
	}
	res := Result{DaemonPID: pid}
	self, err1 := os.Readlink("/proc/self/ns/mnt")
	theirs, err2 := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	if err := errors.Join(err1, err2); err != nil {
		res.Unchecked = "its mount namespace cannot be read: " + err.Error()
		return res, nil
	}
	if self == theirs {
		res.SameNamespace = true
		return res, nil
	}
	for _, dir := range dirs {
		seen, err := visible(pid, dir)
		if err != nil {
			return res, fmt.Errorf("probe %s: %w", dir, err)
		}
		if !seen {
			return res, fmt.Errorf("the backend's daemon (pid %d) does not see what sandboxd mounts under %s: sandboxd runs in a mount namespace of its own "+
				"whose new mounts do not reach the daemon's, so every container would fail to start (runc: \"can't get final child's PID from pipe\"). "+
				"Make %s a shared mount in both (mount --make-rshared, or a Bidirectional volume in a pod), or, under systemd, drop PrivateMounts=, "+
				"PrivateTmp=, PrivateDevices=, ProtectSystem= and ProtectHome= from sandboxd's unit, which make its mounts private: %w",
				pid, dir, dir, errdefs.ErrFailedPrecondition)
		}
	}
	return res, nil
}

// visible mounts a tmpfs at a fresh folder under dir, with a file in it,
// and says whether the process pid finds that file at the same path.
func visible(pid int, dir string) (bool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	probe, err := os.MkdirTemp(dir, ".hostview-")
	if err != nil {
		return false, err
	}
	defer os.Remove(probe)
	if err := unix.Mount("tmpfs", probe, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0700"); err != nil {
		return false, fmt.Errorf("mount a tmpfs: %w", err)
	}
	defer unix.Unmount(probe, unix.MNT_DETACH)
	marker := filepath.Join(probe, "marker")
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		return false, err
	}
	_, err = os.Stat(filepath.Join("/proc", strconv.Itoa(pid), "root", marker))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, err
}

// peerPID is the pid of the process that serves the unix socket path, as
// the kernel reports it to this process (0 outside its PID namespace).
func peerPID(path string) (int, error) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, credErr
	}
	return int(cred.Pid), nil
}

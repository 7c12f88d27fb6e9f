package containerd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// newNetns makes a network namespace with nothing in it but loopback, up,
// and pins it at dir/name so that a container can join it by path. The
// containerd API alone would give the container a namespace whose loopback
// is down; Docker's "none" network brings it up, and programs (test suites
// that serve on 127.0.0.1) rely on it.
func newNetns(dir, name string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return "", err
	}
	f.Close()
	errc := make(chan error, 1)
	// The thread that enters the new namespace never leaves it: it stays
	// locked, so it exits with its goroutine instead of running other code.
	go func() {
		goruntime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		if err := loopbackUp(); err != nil {
			errc <- err
			return
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		errc <- unix.Mount(self, path, "", unix.MS_BIND, "")
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return "", fmt.Errorf("network namespace: %w", err)
	}
	return path, nil
}

// loopbackUp sets the IFF_UP flag of lo in the calling thread's namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

// removeNetns unpins a namespace; it goes once nothing uses it.
func removeNetns(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Package netns makes, enters and removes network namespaces pinned at a
// path: the containerd backend's per-container namespaces, and the
// namespace of sandboxd's egress gateway.
package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// New makes a network namespace with nothing in it but loopback, up, and
// pins it at path, so that a container can join it and sandboxd enter it.
// A namespace made without it (the containerd API's) has loopback down;
// Docker's "none" network brings it up, and programs (test suites that
// serve on 127.0.0.1) rely on it.
func New(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return err
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
		return fmt.Errorf("network namespace: %w", err)
	}
	return nil
}

// Run calls fn on a thread of its own in the namespace pinned at path;
// what fn opens there (a listening socket, a sysctl file) stays in it.
// The thread is never used for anything else.
func Run(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("network namespace %s: %w", path, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Sysctl writes value to the sysctl key (net.ipv6.conf.all.disable_ipv6)
// of the namespace the calling thread is in; call it from Run.
func Sysctl(key, value string) error {
	return os.WriteFile("/proc/sys/"+strings.ReplaceAll(key, ".", "/"), []byte(value), 0o644)
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

// Remove unpins a namespace; it goes once nothing uses it.
func Remove(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

package direct

import (
	"bytes"
	"encoding/binary"
	"os"

	"golang.org/x/sys/unix"
)

// fileWatch tells, on ready, that a file name was written in a folder:
// how Start learns that the OCI runtime wrote the init's pid without
// polling for it (crun writes the file in place, runc renames it there).
type fileWatch struct {
	f     *os.File
	ready chan struct{}
}

func newFileWatch(dir, name string) (*fileWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("inotify_add_watch", err)
	}
	w := &fileWatch{f: os.NewFile(uintptr(fd), "inotify"), ready: make(chan struct{})}
	go w.read([]byte(name))
	return w, nil
}

// read reads the events until one names the file, or the watch closes.
func (w *fileWatch) read(name []byte) {
	buf := make([]byte, 4096)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			// struct inotify_event: wd, mask, cookie, len, then len bytes
			// of the name, NUL-padded.
			size := int(binary.NativeEndian.Uint32(buf[off+12:]))
			start := off + unix.SizeofInotifyEvent
			if start+size > n {
				break
			}
			if bytes.Equal(bytes.TrimRight(buf[start:start+size], "\x00"), name) {
				close(w.ready)
				return
			}
			off = start + size
		}
	}
}

func (w *fileWatch) close() { w.f.Close() }

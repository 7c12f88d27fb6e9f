package sandboxinit

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
)

// openTerminal opens a pseudo-terminal of size ws in the container's own
// devpts instance: its controlling side, which the init reads and writes
// on the Go poller, and the process's side. The process's node is root's
// and mode 0620 (group tty, which no sandbox user is in): no other
// process of the sandbox can open it.
func openTerminal(ws launch.WindowSize) (ptm, pts *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		return nil, nil, fmt.Errorf("unlock: %w", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		return nil, nil, fmt.Errorf("its number: %w", err)
	}
	sfd, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	pts = os.NewFile(uintptr(sfd), "pts")
	if err := unix.IoctlSetWinsize(sfd, unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols}); err != nil {
		pts.Close()
		return nil, nil, fmt.Errorf("its size: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		pts.Close()
		return nil, nil, err
	}
	// Non-blocking before it is a File: the File is then on the poller.
	ptm = os.NewFile(uintptr(fd), "ptmx")
	return ptm, pts, nil
}

// resize gives the terminal of its controlling side ptm the size ws; the
// kernel tells the foreground process group by SIGWINCH.
func resize(ptm *os.File, ws launch.WindowSize) error {
	rc, err := ptm.SyscallConn()
	if err != nil {
		return err
	}
	var ioctlErr error
	if err := rc.Control(func(fd uintptr) {
		ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols})
	}); err != nil {
		return err
	}
	return ioctlErr
}

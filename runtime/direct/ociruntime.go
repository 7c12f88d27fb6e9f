package direct

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime"
)

// ociRuntime is one OCI runtime this backend runs: its binary, its state
// folder (its --root, the daemon's own: two daemons never see each
// other's containers) and the flags every command of it gets.
type ociRuntime struct {
	name string
	// path is the binary on the host; exe is what is executed: for runc
	// and crun, a sealed copy in memory the daemon holds (sealedCopy).
	path, exe string
	sealed    *os.File
	root      string
	// logs says the runtime takes --log FILE for its own errors, apart
	// from the container's stderr, which it shares.
	logs bool
}

// newOCIRuntime prepares the runtime name at path, with its state below
// stateDir.
func newOCIRuntime(name, path, stateDir string) (*ociRuntime, error) {
	rt := &ociRuntime{name: name, path: path, exe: path, root: filepath.Join(stateDir, "oci", name), logs: name != runtime.RunscName}
	if err := os.MkdirAll(rt.root, 0o700); err != nil {
		return nil, err
	}
	if name != runtime.RunscName {
		f, err := sealedCopy(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		rt.sealed, rt.exe = f, fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	}
	return rt, nil
}

// sealedCopy copies the binary at path into a sealed memfd. runc and crun
// each copy themselves into one at every start, so that a container cannot
// overwrite the binary on the host through /proc/self/exe (CVE-2019-5736);
// started from a sealed copy, they see it is one and skip that copy, about
// 5 ms of CPU an execution (docs/benchmarks.md). The copy is the daemon's,
// made once: a container never has a path to it.
func sealedCopy(path string) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	fd, err := unix.MemfdCreate(filepath.Base(path), unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), filepath.Base(path))
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return nil, fmt.Errorf("copy %s: %w", path, err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal the copy of %s: %w", path, err)
	}
	return f, nil
}

// command is the runtime's command args, with its global flags; a
// command whose output matters gets the log file log ("" for none).
func (rt *ociRuntime) command(ctx context.Context, log string, args ...string) *exec.Cmd {
	global := []string{"--root", rt.root}
	if log != "" && rt.logs {
		if rt.name == runtime.CrunName {
			global = append(global, "--log=file:"+log)
		} else {
			global = append(global, "--log", log)
		}
	}
	cmd := exec.CommandContext(ctx, rt.exe, append(global, args...)...)
	cmd.Args[0] = rt.name
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	// A group of its own: a terminal's ^C to the daemon does not reach the
	// runtime and its container, which the daemon ends itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs a short command of the runtime (kill, delete) and returns its
// error with what the runtime said.
func (rt *ociRuntime) run(ctx context.Context, args ...string) error {
	var out bytes.Buffer
	cmd := rt.command(ctx, "", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", rt.name, args[0], err, strings.TrimSpace(out.String()))
	}
	return nil
}

// delete removes the runtime's state of the container name, killing what
// still runs in it; a container the runtime does not know is no error.
func (rt *ociRuntime) delete(ctx context.Context, name string) error {
	err := rt.run(ctx, "delete", "--force", name)
	if err != nil && notFound(err) {
		return nil
	}
	return err
}

// forget removes what the runtime keeps of the container name once it
// is gone: runsc leaves its state file's lock behind.
func (rt *ociRuntime) forget(name string) error {
	if rt.name != runtime.RunscName {
		return nil
	}
	var errs []error
	for _, ext := range []string{".lock", ".state"} {
		if err := os.Remove(filepath.Join(rt.root, name+"_sandbox:"+name+ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// notFound says whether a runtime's error says the container does not
// exist: runc's "does not exist", crun's missing state folder, runsc's
// "cannot load container".
func notFound(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "does not exist") || strings.Contains(msg, "No such file or directory") || strings.Contains(msg, "cannot load container")
}

// removeRoot removes the runtime's state folder, which holds no
// container: runsc's keeps a network namespace of its own pinned there,
// and runsc processes started together may each pin one, stacked (two
// were seen under the soak's 100 tasks): every one is unmounted.
func (rt *ociRuntime) removeRoot() error {
	nullNetns := filepath.Join(rt.root, "null-netns")
	for range 64 {
		err := unix.Unmount(nullNetns, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s's state folder: %w", rt.name, err)
		}
	}
	return os.RemoveAll(rt.root)
}

func (rt *ociRuntime) close() error {
	if rt.sealed == nil {
		return nil
	}
	return rt.sealed.Close()
}

// errStartedNot is a start the runtime gave up, with what it said.
var errStartedNot = errors.New("the OCI runtime did not start the container")

package hostview

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/internal/testutil"
)

// serveEnv makes the test binary a stand-in backend daemon: it serves the unix
// socket the variable names until it is killed, and says it listens with
// a file beside it (the socket's file is there before it listens).
const serveEnv = "HOSTVIEW_TEST_SERVE"

func TestMain(m *testing.M) {
	if path := os.Getenv(serveEnv); path != "" {
		ln, err := net.Listen("unix", path)
		if err != nil {
			os.Exit(3)
		}
		if err := os.WriteFile(path+".listening", nil, 0o600); err != nil {
			os.Exit(3)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(0)
			}
			c.Close()
		}
	}
	os.Exit(m.Run())
}

// backendDaemon starts a stand-in backend daemon (this test binary)
// through wrap, e.g. unshare into a mount namespace of its own, and
// returns its socket.
func backendDaemon(t *testing.T, wrap ...string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "daemon.sock")
	testutil.StartHelper(t, serveEnv, sock, sock+".listening", "the stand-in backend daemon", wrap...)
	return sock
}

func TestABackendDaemonInTheSameNamespaceSeesEverything(t *testing.T) {
	testutil.RequireRoot(t)
	res, err := Check(backendDaemon(t, "env"), []string{t.TempDir()})
	if err != nil || !res.SameNamespace || res.DaemonPID == 0 {
		t.Fatalf("Check() = %+v, %v; want the same namespace", res, err)
	}
}

// TestSandboxdWhoseMountsDoNotReachItsBackendIsRefused is issue 29's
// private mount namespace, turned around: the backend's daemon has a private copy of
// the mounts, so what the daemon mounts later never reaches it.
func TestSandboxdWhoseMountsDoNotReachItsBackendIsRefused(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		testutil.SkipOrFail(t, "unshare (util-linux) is missing: %v", err)
	}
	dir := t.TempDir()
	_, err := Check(backendDaemon(t, "unshare", "--mount", "--propagation", "private"), []string{dir})
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "make-rshared") {
		t.Fatalf("Check() = %v; want a failed precondition naming %s and the fix", err, dir)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) > 0 {
		t.Errorf("the probe left %v", entries)
	}
}

// TestABackendDaemonThatReceivesSandboxdsMountsPasses: a shared mount makes a
// namespace of the backend daemon's own receive what the daemon mounts.
func TestABackendDaemonThatReceivesSandboxdsMountsPasses(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		testutil.SkipOrFail(t, "unshare (util-linux) is missing: %v", err)
	}
	dir := t.TempDir()
	// dir becomes a shared mount point of its own, so that the daemon's
	// copy of it is a slave that receives new mounts.
	if out, err := exec.Command("mount", "--bind", dir, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount --bind: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	if out, err := exec.Command("mount", "--make-shared", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount --make-shared: %v: %s", err, out)
	}
	res, err := Check(backendDaemon(t, "unshare", "--mount", "--propagation", "slave"), []string{dir})
	if err != nil || res.SameNamespace {
		t.Fatalf("Check() = %+v, %v; want another namespace that sees the mounts", res, err)
	}
}

func TestNoBackendDaemonIsAnError(t *testing.T) {
	if _, err := Check(filepath.Join(t.TempDir(), "none.sock"), nil); err == nil {
		t.Fatal("Check() of a socket nobody serves succeeded")
	}
}

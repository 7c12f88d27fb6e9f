//go:build integration

package main

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testutil"
)

// TestInstalledService installs sandboxd as `make install` does (into a
// folder of the test's, DESTDIR), checks the unit with systemd-analyze,
// and starts the installed binary with the installed settings as systemd
// would start the unit, NOTIFY_SOCKET included: READY=1 once it serves,
// RELOADING=1 and READY=1 around SIGHUP, STOPPING=1 on SIGTERM, then exit
// 0. (This machine's init is not systemd, so no unit is started by it.)
func TestInstalledService(t *testing.T) {
	requireDocker(t)
	dest := t.TempDir()
	install := exec.Command("../../scripts/install.sh")
	// The binaries TestMain built, with the init next to the daemon.
	install.Env = append(os.Environ(), "DESTDIR="+dest, "BINDIR="+filepath.Dir(binary))
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	installed := filepath.Join(dest, "usr/local/bin/sandboxd")
	conf := filepath.Join(dest, "etc/sandboxd/sandboxd.conf")
	unit := filepath.Join(dest, "etc/systemd/system/sandboxd.service")
	for _, f := range []string{installed, filepath.Join(dest, "usr/local/bin/sandboxd-init"), conf, unit,
		filepath.Join(dest, "var/lib/sandboxd/images.lock"), filepath.Join(dest, "etc/sandboxd/token")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("not installed: %v", err)
		}
	}
	if analyze, err := exec.LookPath("systemd-analyze"); err == nil {
		// verify wants ExecStart's binary where the unit says: point it
		// at the installed one.
		b, _ := os.ReadFile(unit)
		checked := filepath.Join(t.TempDir(), "sandboxd.service")
		os.WriteFile(checked, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/sandboxd", installed)), 0o644)
		if out, err := exec.Command(analyze, "verify", checked).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
		}
	}

	notify := filepath.Join(t.TempDir(), "notify")
	nconn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nconn.Close()
	log := &testutil.Buffer{}
	next := func(want string) {
		t.Helper()
		nconn.SetReadDeadline(time.Now().Add(time.Minute))
		buf := make([]byte, 256)
		n, err := nconn.Read(buf)
		if err != nil || !strings.HasPrefix(string(buf[:n]), want) {
			t.Fatalf("systemd was told %q, %v; want %q\n%s", buf[:n], err, want, log)
		}
	}

	// The installed settings, with the test's own folders, socket and
	// instance on the command line, which has the last word.
	state, instance, probes := t.TempDir(), instanceName(t), freeAddr(t)
	t.Cleanup(func() { scrub(t, state, instance) })
	socket := filepath.Join(state, "sandboxd.sock")
	cmd := exec.Command(installed, "serve", "--config", conf, "--socket", socket, "--state-dir", state,
		"--artifacts-dir", filepath.Join(state, "artifacts"), "--images-lock", filepath.Join(dest, "var/lib/sandboxd/images.lock"),
		"--audit-log", filepath.Join(state, "log/sandboxd/audit.log"), "--metrics-listen", probes, "--instance", instance,
		"--pool-size", "0", "--cgroup-root", "/sys/fs/cgroup")
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify)
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		nconn.Close() // a daemon that exits tells systemd nothing more
		exited <- err
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		removeContainers(t, instance)
	})
	next("READY=1")
	if code := httpStatus(t, "http://"+probes+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after READY=1: %d", code)
	}
	if out, err := exec.Command(installed, "run", "--socket", socket, "--lang", "python", "-c", "print(6*7)").Output(); err != nil || string(out) != "42\n" {
		t.Fatalf("a run on the installed daemon: %q %v\n%s", out, err, log)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	next("RELOADING=1")
	next("READY=1")
	cmd.Process.Signal(syscall.SIGTERM)
	next("STOPPING=1")
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the daemon exited with %v\n%s", err, log)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("the daemon did not stop\n%s", log)
	}
	// The settings log JSON, a line per run.
	if !strings.Contains(log.String(), `"msg":"run ended"`) {
		t.Errorf("no JSON line for the run in the log:\n%s", log)
	}
}

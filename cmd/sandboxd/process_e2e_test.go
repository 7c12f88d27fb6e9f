//go:build integration

package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSessionShellIsATerminal drives python3 -i through sandboxd session
// shell, itself on a terminal of the host as a person's would be: a line
// typed is echoed and answered, a resize of the local terminal reaches
// the remote one, and the shell's exit code is the command's. Without a
// terminal, shell copies the streams; start, ps, logs and kill manage a
// background process that outlives the calls.
func TestSessionShellIsATerminal(t *testing.T) {
	requireDocker(t)
	d := startDaemon(t, t.TempDir(), instanceName(t))
	out, code := sessionCLI(t, d, "create", "--lang", "python")
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("session create: %q, exit %d", out, code)
	}
	ptm, pts := hostTerminal(t, 24, 80)
	cmd := exec.Command(binary, "session", "shell", "--socket", d.socket, id, "--", "python3", "-i", "-q")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	cmd.Env = append(os.Environ(), "TERM=xterm")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close()
	screen := make(chan string, 256)
	go func() {
		r := bufio.NewReader(ptm)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				screen <- string(buf[:n])
			}
			if err != nil {
				close(screen)
				return
			}
		}
	}()
	var seen strings.Builder
	last := "" // what the last expect matched in
	expect := func(what string, re *regexp.Regexp) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for !re.MatchString(seen.String()) {
			select {
			case s, ok := <-screen:
				if !ok {
					t.Fatalf("the terminal closed before %s; it showed %q", what, seen.String())
				}
				seen.WriteString(s)
			case <-deadline:
				t.Fatalf("no %s within 30 s; the terminal showed %q", what, seen.String())
			}
		}
		last = seen.String()
		seen.Reset()
	}
	type_ := func(s string) {
		t.Helper()
		if _, err := ptm.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	expect("prompt", regexp.MustCompile(`>>> $`))
	type_("import os; os.isatty(0), os.get_terminal_size()\r")
	expect("the terminal's size", regexp.MustCompile(`\(True, os\.terminal_size\(columns=80, lines=24\)\)`))
	if err := unix.IoctlSetWinsize(int(ptm.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 132}); err != nil {
		t.Fatal(err)
	}
	// The resize travels by SIGWINCH to the CLI, then to the sandbox:
	// asked again until it has come.
	for deadline := time.Now().Add(30 * time.Second); ; {
		type_("os.get_terminal_size().columns * 1000 + os.get_terminal_size().lines\r")
		// readline redraws its prompt at a SIGWINCH: whatever comes
		// between the answer and the last prompt.
		expect("a size", regexp.MustCompile(`\n(\d+)\r\n(?s:.*)>>> $`))
		if strings.Contains(last, "\n132040\r\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the terminal stayed %q after the resize", last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	type_("exit(7)\r")
	err := cmd.Wait()
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 7 {
		t.Fatalf("session shell ended with %v, want exit 7", err)
	}

	// Without a terminal: the streams, and the exit code.
	shell := exec.Command(binary, "session", "shell", "--socket", d.socket, id, "--", "sh")
	shell.Stdin = strings.NewReader("echo out; echo err >&2; exit 3\n")
	var stdout, stderr strings.Builder
	shell.Stdout, shell.Stderr = &stdout, &stderr
	err = shell.Run()
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 3 || stdout.String() != "out\n" || stderr.String() != "err\n" {
		t.Fatalf("shell without a terminal: %v, %q, %q", err, stdout.String(), stderr.String())
	}

	out, code = sessionCLI(t, d, "start", id, "--", "sh", "-c", "echo serving; exec sleep 300")
	pid := strings.TrimSpace(out)
	if code != 0 || !regexp.MustCompile(`^p\d+$`).MatchString(pid) {
		t.Fatalf("session start: %q, exit %d", out, code)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if out, code = sessionCLI(t, d, "logs", id, pid); code == 0 && out == "serving\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session logs: %q, exit %d", out, code)
		}
	}
	if stdout, _, code := runCLI(t, d, "--session", id, "--sh", "echo a call beside it"); code != 0 || stdout != "a call beside it\n" {
		t.Fatalf("a call beside the process: %q, %d", stdout, code)
	}
	if out, code = sessionCLI(t, d, "ps", id); code != 0 || !regexp.MustCompile(pid+` +RUNNING +\S+ +8 +sh -c echo serving`).MatchString(out) {
		t.Fatalf("session ps: %q, exit %d", out, code)
	}
	if out, code = sessionCLI(t, d, "kill", id, pid, "--signal", "9"); code != 0 {
		t.Fatalf("session kill: %q, exit %d", out, code)
	}
	if out, code = sessionCLI(t, d, "logs", id, pid, "--follow"); code != 0 || !strings.Contains(out, fmt.Sprintf("%s exited with 137", pid)) {
		t.Fatalf("session logs --follow of a killed process: %q, exit %d", out, code)
	}
}

// hostTerminal opens a pseudo-terminal on the host of rows by cols.
func hostTerminal(t *testing.T, rows, cols uint16) (ptm, pts *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ptm = os.NewFile(uintptr(fd), "ptmx")
	t.Cleanup(func() { ptm.Close() })
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	if pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		t.Fatal(err)
	}
	return ptm, pts
}

// TestPortThroughTheInboundProxyAndKill9: a web server started in a
// session answers through the inbound proxy at the URL session port
// prints, and nowhere else: a wrong token gets 404, and so does the URL
// once the port is closed. A kill -9 of the daemon leaves the session's
// container and its server behind; the restart removes them.
func TestPortThroughTheInboundProxyAndKill9(t *testing.T) {
	requireDocker(t)
	state, instance := t.TempDir(), instanceName(t)
	d := startDaemon(t, state, instance, "--inbound-listen", "127.0.0.1:0")
	out, code := sessionCLI(t, d, "create", "--lang", "python")
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("session create: %q, exit %d", out, code)
	}
	if out, code = sessionCLI(t, d, "upload", id, writeTemp(t, "index.html", "<h1>from the session</h1>\n")); code != 0 {
		t.Fatalf("session upload: %q %d", out, code)
	}
	if out, code = sessionCLI(t, d, "start", id, "--", "python3", "-m", "http.server", "--bind", "127.0.0.1", "8000"); code != 0 {
		t.Fatalf("session start: %q %d", out, code)
	}
	out, code = sessionCLI(t, d, "port", id, "8000")
	u, err := url.Parse(strings.TrimSpace(out))
	if code != 0 || err != nil || !strings.HasSuffix(u.Hostname(), ".localhost") {
		t.Fatalf("session port: %q %d", out, code)
	}
	// *.localhost is the loopback: ask 127.0.0.1 with the URL's Host.
	get := func(host string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://127.0.0.1:"+u.Port()+"/index.html", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var status int
	var body string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		// 502 until the server listens.
		if status, body = get(u.Host); status == 200 || time.Now().After(deadline) {
			break
		}
	}
	if status != 200 || body != "<h1>from the session</h1>\n" {
		t.Fatalf("through the inbound proxy: %d %q", status, body)
	}
	if status, _ := get(strings.Repeat("a", 32) + ".localhost:" + u.Port()); status != 404 {
		t.Fatalf("a wrong token: %d, want 404", status)
	}
	if out, code = sessionCLI(t, d, "ports", id); code != 0 || !strings.Contains(out, u.String()) {
		t.Fatalf("session ports: %q %d", out, code)
	}
	if out, code = sessionCLI(t, d, "port", id, "8000", "--close"); code != 0 {
		t.Fatalf("session port --close: %q %d", out, code)
	}
	if status, _ := get(u.Host); status != 404 {
		t.Fatalf("a closed port: %d, want 404", status)
	}
	d.cmd.Process.Kill()
	<-d.exited
	if n := len(containers(t, instance)); n < 1 {
		t.Fatalf("%d containers after kill -9, want the session's left behind", n)
	}
	startDaemon(t, state, instance, "--inbound-listen", "127.0.0.1:0")
	if left := containers(t, instance); len(left) != 0 {
		t.Fatalf("containers left after restart: %v", left)
	}
}

// writeTemp writes content to a file named name in a temp folder.
func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

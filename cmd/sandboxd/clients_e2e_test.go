//go:build integration

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testutil"
)

// debianPython is the interpreter whose packages (python3-grpcio,
// python3-pytest, python3-build...) the Python client is built and tested
// with: the python3 first on PATH may be another.
const debianPython = "/usr/bin/python3"

// clientDaemon starts a daemon for a client's tests: on a socket and on
// loopback TCP with a token (its file ends in a newline, as most do),
// running one task at a time and queueing none, so that the tests can
// provoke a busy refusal, with the inbound proxy on and a test host its
// allow-listed runs may reach. It returns the environment the tests read.
func clientDaemon(t *testing.T) []string {
	t.Helper()
	addr := freeAddr(t)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("client-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A test host the clients' allow-listed runs reach by name.
	host := helloHost(t, "hello from net.test")
	d := startDaemon(t, t.TempDir(), instanceName(t), "--listen", addr, "--token-file", token,
		"--max-running", "1", "--max-queued", "0", "--pool-size", "1", "--inbound-listen", "127.0.0.1:0",
		"--egress-allow", "net.test:8080", "--egress-host", "net.test="+host.Addr.String())
	return append(os.Environ(), "SANDBOXD_ADDR="+d.socket, "SANDBOXD_TEST_TCP_ADDR="+addr, "SANDBOXD_TEST_TOKEN_FILE="+token,
		"SANDBOXD_TEST_NET_HOST=net.test:8080")
}

// runIn runs a command in dir with env and fails the test with its output
// when it fails.
func runIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPythonClient builds the Python client's wheel with Debian's build
// tools, installs it in a venv over Debian's site packages, as
// docs/clients.md tells users to, and runs its pytest suite against a
// daemon: the socket, TCP with a token, a session and its chart, a
// detached run, a refusal's details and its retry.
func TestPythonClient(t *testing.T) {
	requireDocker(t)
	if err := exec.Command(debianPython, "-c", "import grpc, google.protobuf, zstandard, pytest, build, hatchling").Run(); err != nil {
		testutil.SkipOrFail(t, "Debian's python3-grpcio, -protobuf, -zstandard, -pytest, -build or -hatchling is missing (scripts/setup.sh installs them)")
	}
	env := clientDaemon(t)
	src, err := filepath.Abs("../../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	runIn(t, tmp, nil, debianPython, "-m", "build", "--no-isolation", "--skip-dependency-check", "--wheel", "--outdir", filepath.Join(tmp, "dist"), src)
	wheels, _ := filepath.Glob(filepath.Join(tmp, "dist", "sandboxd-*.whl"))
	if len(wheels) != 1 {
		t.Fatalf("built %v, want one wheel", wheels)
	}
	venv := filepath.Join(tmp, "venv")
	runIn(t, tmp, nil, debianPython, "-m", "venv", "--system-site-packages", venv)
	runIn(t, tmp, nil, filepath.Join(venv, "bin", "pip"), "install", "--no-index", "--quiet", wheels[0])
	// From tmp, not the source tree: the tests import the installed wheel.
	out := runIn(t, tmp, append(env, "SANDBOXD_TEST_WHEEL=1", "PYTHONDONTWRITEBYTECODE=1"),
		filepath.Join(venv, "bin", "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", filepath.Join(src, "tests"))
	t.Logf("pytest:\n%s", out)
}

// TestTypeScriptClient installs the TypeScript client's locked
// dependencies, packs it with npm pack (which builds it) and runs its
// tests, with node's test runner, on the packed package against a daemon.
func TestTypeScriptClient(t *testing.T) {
	requireDocker(t)
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, "%s is missing", tool)
		}
	}
	env := clientDaemon(t)
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "tsconfig.json", "src", "test"} {
		runIn(t, "", nil, "cp", "-r", filepath.Join("../../clients/typescript", f), dir)
	}
	runIn(t, dir, nil, "npm", "ci", "--no-audit", "--no-fund", "--prefer-offline")
	tarball := strings.TrimSpace(lastLine(runIn(t, dir, nil, "npm", "pack", "--silent")))
	packed := filepath.Join(dir, "packed")
	if err := os.Mkdir(packed, 0o755); err != nil {
		t.Fatal(err)
	}
	runIn(t, packed, nil, "tar", "xzf", filepath.Join(dir, tarball))
	out := runIn(t, dir, append(env, "SANDBOXD_CLIENT_DIR="+filepath.Join(packed, "package")), "node", "--test", "test/")
	t.Logf("node --test:\n%s", out)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/task/run"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "defaults", mutate: func(*Config) {}},
		{name: "loopback TCP needs a token too", mutate: func(c *Config) { c.Listen = "127.0.0.1:7070" }, wantErr: "--token-file"},
		{name: "MCP over HTTP needs a token", mutate: func(c *Config) { c.MCPListen = "127.0.0.1:7071" }, wantErr: "--token-file"},
		{name: "non-loopback TCP needs a token", mutate: func(c *Config) { c.Listen = "0.0.0.0:7070" }, wantErr: "--token-file"},
		{name: "non-loopback without TLS", mutate: func(c *Config) { c.Listen = "0.0.0.0:7070"; c.TokenFile = "/etc/sandboxd/token" }, wantErr: "--insecure-listen"},
		{name: "MCP on every address without TLS", mutate: func(c *Config) { c.MCPListen = ":7071"; c.TokenFile = "/etc/sandboxd/token" }, wantErr: "not a loopback address"},
		{name: "non-loopback, insecure by choice", mutate: func(c *Config) {
			c.Listen, c.TokenFile, c.InsecureListen = "0.0.0.0:7070", "/etc/sandboxd/token", true
		}},
		{name: "non-loopback over TLS", mutate: func(c *Config) {
			c.Listen, c.TokenFile, c.TLS.CertFile, c.TLS.KeyFile = "0.0.0.0:7070", "/etc/sandboxd/token", "/etc/sandboxd/cert.pem", "/etc/sandboxd/key.pem"
		}},
		{name: "mutual TLS needs no token", mutate: func(c *Config) {
			c.Listen, c.TLS.CertFile, c.TLS.KeyFile, c.TLS.CAFile = "[::]:7070", "/etc/sandboxd/cert.pem", "/etc/sandboxd/key.pem", "/etc/sandboxd/ca.pem"
		}},
		{name: "localhost is loopback", mutate: func(c *Config) { c.Listen, c.TokenFile = "localhost:7070", "/etc/sandboxd/token" }},
		{name: "a certificate without its key", mutate: func(c *Config) { c.TLS.CertFile = "/etc/sandboxd/cert.pem" }, wantErr: "--tls-key"},
		{name: "a client CA without a certificate", mutate: func(c *Config) { c.TLS.CAFile = "/etc/sandboxd/ca.pem" }, wantErr: "--tls-client-ca needs"},
		{name: "a token mount that is no mount", mutate: func(c *Config) { c.TokenMounts = []string{"data"} }, wantErr: "--token-mount"},
		{name: "a request budget below one request", mutate: func(c *Config) { c.RequestMemory = 1 << 20 }, wantErr: "--request-memory"},
		{name: "unreachable", mutate: func(c *Config) { c.Socket = "" }, wantErr: "unreachable"},
		{name: "relative socket", mutate: func(c *Config) { c.Socket = "s.sock" }, wantErr: "--socket"},
		{name: "bad listen", mutate: func(c *Config) { c.Listen = "nonsense" }, wantErr: "--listen"},
		{name: "bad log level", mutate: func(c *Config) { c.LogLevel = "loud" }, wantErr: "--log-level"},
		{name: "bad log format", mutate: func(c *Config) { c.LogFormat = "xml" }, wantErr: "--log-format \"xml\": use text or json"},
		{name: "engine config is checked", mutate: func(c *Config) { c.Task.MaxRunning = 0 }, wantErr: "max running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	c := DefaultConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	c.register(fs)
	dir := t.TempDir()
	err := fs.Parse([]string{"--max-memory", "8GiB", "--default-memory", "256m", "--mount", "data=" + dir, "--max-timeout", "1h"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Task.Limits.Max.MemoryBytes != 8<<30 || c.Task.Limits.Default.MemoryBytes != 256<<20 {
		t.Errorf("memory = %d / %d", c.Task.Limits.Default.MemoryBytes, c.Task.Limits.Max.MemoryBytes)
	}
	if c.Task.Mounts["data"] != dir {
		t.Errorf("mounts = %v", c.Task.Mounts)
	}
	for _, bad := range [][]string{{"--mount", "data"}, {"--mount", "x=/no/such/folder"}, {"--max-memory", "lots"}} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(&bytes.Buffer{})
		c := DefaultConfig()
		c.register(fs)
		if err := fs.Parse(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		res  run.Result
		want int
	}{
		{run.Result{Status: run.StatusOK}, 0},
		{run.Result{Status: run.StatusNonzeroExit, ExitCode: 3}, 3},
		{run.Result{Status: run.StatusTimeout, ExitCode: 137}, 137},
		{run.Result{Status: run.StatusCancelled, ExitCode: -1}, 130},
		{run.Result{Status: run.StatusRuntimeError, ExitCode: -1}, 125},
	}
	for _, tt := range tests {
		if got := exitCode(tt.res); got != tt.want {
			t.Errorf("exitCode(%v) = %d, want %d", tt.res.Status, got, tt.want)
		}
	}
}

func TestDispatch(t *testing.T) {
	var out, errOut bytes.Buffer
	// The binary's version, then why the daemon's is not known.
	none := filepath.Join(t.TempDir(), "none.sock")
	if code := dispatch([]string{"version", "--socket", none}, &out, &errOut); code != 125 || !strings.HasPrefix(out.String(), "client: sandboxd ") || !strings.Contains(errOut.String(), "no daemon answers on "+none) {
		t.Errorf("version: %d %q %q", code, out.String(), errOut.String())
	}
	if code := dispatch([]string{"frobnicate"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "unknown command") {
		t.Errorf("unknown command: %d %q", code, errOut.String())
	}
}

// TestConfigFile reads flags from the file --config names, then from
// $SANDBOXD_OPTIONS, then the command line's, which win.
func TestConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandboxd.conf")
	conf := "# the daemon's\n--max-running 7 --pool-size=3\n--default-memory 256MiB   # per task\n"
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	c.register(fs)
	if err := parseSettings(fs, []string{"--pool-size", "5", "--config", path}); err != nil {
		t.Fatal(err)
	}
	if c.Task.MaxRunning != 7 || c.Task.PoolSize != 5 || c.Task.Limits.Default.MemoryBytes != 256<<20 {
		t.Fatalf("max running %d, pool %d, memory %d: want 7 and 256 MiB from the file, 5 from the command line",
			c.Task.MaxRunning, c.Task.PoolSize, c.Task.Limits.Default.MemoryBytes)
	}
	// $SANDBOXD_OPTIONS comes between the file and the command line.
	c = DefaultConfig()
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	c.register(fs)
	t.Setenv("SANDBOXD_OPTIONS", "--pool-size 4  --max-running=9 --allow-image sha256:a --allow-image sha256:b")
	if err := parseSettings(fs, []string{"--config", path, "--max-running", "2"}); err != nil {
		t.Fatal(err)
	}
	if c.Task.PoolSize != 4 || c.Task.MaxRunning != 2 || len(c.Task.AllowedImages) != 2 || c.Task.Limits.Default.MemoryBytes != 256<<20 {
		t.Fatalf("pool %d, max running %d, images %v, memory %d: want 4 from the environment, 2 from the command line, two images, 256 MiB from the file",
			c.Task.PoolSize, c.Task.MaxRunning, c.Task.AllowedImages, c.Task.Limits.Default.MemoryBytes)
	}
	t.Setenv("SANDBOXD_OPTIONS", "--pool-size 4 oops")
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	c.register(fs)
	if err := parseSettings(fs, nil); err == nil || !strings.Contains(err.Error(), "$SANDBOXD_OPTIONS") || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("a variable with a stray word: %v, want an error naming the variable and the word", err)
	}
	t.Setenv("SANDBOXD_OPTIONS", "")
	if err := os.WriteFile(path, []byte("--no-such-flag 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	c.register(fs)
	if err := parseSettings(fs, []string{"--config", path}); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("a file with an unknown flag: %v, want an error naming the file", err)
	}
}

// TestMCPFailsClosed is the regression test of `sandboxd mcp` running an
// engine of its own, with the default configuration, when the daemon did
// not answer: it fails, and says how to ask for one.
func TestMCPFailsClosed(t *testing.T) {
	var errOut bytes.Buffer
	code := dispatch([]string{"mcp", "--socket", filepath.Join(t.TempDir(), "no-daemon.sock")}, &bytes.Buffer{}, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), "no daemon answers") || !strings.Contains(errOut.String(), "--in-process") {
		t.Fatalf("exit %d, %q: want a failure that names --in-process", code, errOut.String())
	}
}

// TestDefaultPathsAreAbsolute: a daemon started from any folder finds what
// it needs: no default path depends on the working directory.
func TestDefaultPathsAreAbsolute(t *testing.T) {
	c := DefaultConfig()
	for flag, path := range map[string]string{
		"--socket": c.Socket, "--images-lock": c.ImagesLock, "--artifacts-dir": c.ArtifactsDir,
		"--state-dir": c.Task.StateDir, "--init-path": c.InitPath, "--runsc-path": c.RunscPath,
		"--cgroup-root": c.CgroupRoot, "--containerd-address": c.ContainerdAddress,
		"--egress-run-dir": c.EgressRunDir, "--claims-dir": c.ClaimsDir,
	} {
		if !filepath.IsAbs(path) {
			t.Errorf("the default of %s, %q, is relative", flag, path)
		}
	}
}

// TestConfigFileQuotes: the file and $SANDBOXD_OPTIONS quote as a shell
// does, so a stdio tool server's command with arguments fits in one, and
// an error names the file and line; nothing is expanded.
func TestConfigFileQuotes(t *testing.T) {
	parse := func(t *testing.T, conf, env string) (*Config, error) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "sandboxd.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("SANDBOXD_OPTIONS", env)
		c := DefaultConfig()
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(&bytes.Buffer{})
		c.register(fs)
		return &c, parseSettings(fs, []string{"--config", path})
	}
	conf := "# tools\n" +
		"--tool-server files='/usr/local/bin/files-mcp --root \"/srv/my data\"'   # stdio, with arguments\n" +
		"--tool-server \"notes=/opt/notes mcp # not a comment\" \\\n" +
		"  --max-running 3\n" +
		"--tool-server-token=files=/etc/sandboxd/files\\ token\n"
	c, err := parse(t, conf, `--tool-server 'env=/bin/env-mcp --flag "a b"'`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`files=/usr/local/bin/files-mcp --root "/srv/my data"`, "notes=/opt/notes mcp # not a comment", `env=/bin/env-mcp --flag "a b"`}
	if !slices.Equal(c.ToolServers, want) || c.Task.MaxRunning != 3 || !slices.Equal(c.ToolTokens, []string{"files=/etc/sandboxd/files token"}) {
		t.Fatalf("tool servers %q, tokens %q, max running %d: want %q, the escaped space kept, 3 from the continued line", c.ToolServers, c.ToolTokens, c.Task.MaxRunning, want)
	}
	for _, tc := range []struct{ name, conf, env, want string }{
		{"unknown flag on its line", "--max-running 3\n\n--no-such-flag 1\n", "", "sandboxd.conf:3: "},
		{"unterminated quote", "--max-running 3\n--tool-server 'a=b\n", "", "sandboxd.conf:2:"},
		{"expansion", "--max-running 3\n--tool-server a=$HOME/x\n", "", "sandboxd.conf:2: $HOME is not expanded"},
		{"command substitution", "--tool-server \"a=$(id)\"\n", "", "sandboxd.conf:1: $(id) is not expanded"},
		{"shell syntax", "--max-running 3; --pool-size 2 > out\n", "", "sandboxd.conf:1: want flags"},
		{"stray word", "--max-running 3 oops\n", "", `sandboxd.conf:1: ["oops"] is not a flag`},
		{"mistyped flag", "--max-runing 3\n", "", "sandboxd.conf:1: flag provided but not defined: -max-runing; did you mean --max-running?"},
		{"in the variable", "", "--pool-size 2\n--tool-server 'a=b", "$SANDBOXD_OPTIONS:2:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parse(t, tc.conf, tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestAuditRequiredNeedsALog: --audit-required without --audit-log is
// refused at start, naming both.
func TestAuditRequiredNeedsALog(t *testing.T) {
	c := DefaultConfig()
	c.Task.AuditRequired = true
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--audit-required needs --audit-log") {
		t.Fatalf("Validate() = %v", err)
	}
	c.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	if err := c.Validate(); err != nil {
		t.Fatalf("with a log: %v", err)
	}
}

// TestShippedConfigsParse: the settings files the service and the
// Kubernetes manifests ship are flags serve takes.
func TestShippedConfigsParse(t *testing.T) {
	t.Setenv("SANDBOXD_OPTIONS", "")
	for _, path := range []string{"../../deploy/systemd/sandboxd.conf", "../../deploy/kubernetes/sandboxd.conf", "../../deploy/kubernetes-dev/sandboxd.conf"} {
		c := DefaultConfig()
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(&bytes.Buffer{})
		c.register(fs)
		if err := parseSettings(fs, []string{"--config", path}); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
}

package main

import (
	"flag"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestClientFlagsFromEnvironment: the CLI reads SANDBOXD_ADDR and
// SANDBOXD_TOKEN_FILE as the Python and TypeScript clients do, and flags
// given win.
func TestClientFlagsFromEnvironment(t *testing.T) {
	for _, tt := range []struct {
		env, args           []string
		socket, addr, token string
	}{
		{env: []string{"", ""}, socket: DefaultConfig().Socket},
		{env: []string{"/tmp/d.sock", ""}, socket: "/tmp/d.sock"},
		{env: []string{"unix:///tmp/d.sock", ""}, socket: "/tmp/d.sock"},
		{env: []string{"unix:/tmp/d.sock", ""}, socket: "/tmp/d.sock"},
		{env: []string{"127.0.0.1:7070", "/etc/t"}, socket: DefaultConfig().Socket, addr: "127.0.0.1:7070", token: "/etc/t"},
		{env: []string{"127.0.0.1:7070", "/etc/t"}, args: []string{"--addr", "10.0.0.1:1", "--token-file", "/x"},
			socket: DefaultConfig().Socket, addr: "10.0.0.1:1", token: "/x"},
	} {
		t.Setenv("SANDBOXD_ADDR", tt.env[0])
		t.Setenv("SANDBOXD_TOKEN_FILE", tt.env[1])
		var c clientFlags
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		c.register(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if c.socket != tt.socket || c.addr != tt.addr || c.tokenFile != tt.token {
			t.Errorf("env %q args %q: socket %q addr %q token file %q, want %q %q %q",
				tt.env, tt.args, c.socket, c.addr, c.tokenFile, tt.socket, tt.addr, tt.token)
		}
	}
}

// TestReachableSaysWhy: no daemon on the socket is said so, with how to
// start one; a daemon listening is reachable. (The socket's permissions,
// for a user outside the group, are TestSocketIsRootsAndItsGroups'.)
func TestReachableSaysWhy(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "d.sock")
	if err := reachable(socket); err == nil || !strings.Contains(err.Error(), "no daemon answers on "+socket+": start it") {
		t.Fatalf("no socket: %v", err)
	}
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if err := reachable(socket); err != nil {
		t.Fatalf("a listening socket: %v", err)
	}
}

// TestConnectionHint: every TLS handshake failure a client meets names the
// flag to pass, and other errors get no hint.
func TestConnectionHint(t *testing.T) {
	for msg, flag := range map[string]string{
		`connection error: desc = "error reading server preface: remote error: tls: certificate required"`:                            "--tls-cert",
		`connection error: desc = "transport: authentication handshake failed: remote error: tls: bad certificate"`:                   "--tls-cert",
		`connection error: desc = "write tcp 127.0.0.1:1->127.0.0.1:2: write: broken pipe"`:                                           "--tls-cert",
		`connection error: desc = "tls: failed to verify certificate: x509: certificate signed by unknown authority"`:                 "--tls-ca",
		`connection error: desc = "transport: authentication handshake failed: tls: first record does not look like a TLS handshake"`: "--tls-ca",
		`connection error: desc = "error reading server preface: EOF"`:                                                                "--tls-ca",
		`connection error: desc = "error reading server preface: connection reset by peer"`:                                           "--tls-ca",
		`connection error: desc = "error reading server preface: read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"`:  "--tls-ca",
		// Met in CI: the handshake cut while the client still wrote.
		`write tcp 127.0.0.1:58934->127.0.0.1:35771: write: connection reset by peer`: "--tls-cert",
		`InvalidArgument: limits.memory_mb: 100000 is above the maximum 4096`:         "",
	} {
		hint := connectionHint(msg)
		if (flag == "") != (hint == "") || !strings.Contains(hint, flag) {
			t.Errorf("connectionHint(%q) = %q, want a hint naming %q", msg, hint, flag)
		}
	}
}

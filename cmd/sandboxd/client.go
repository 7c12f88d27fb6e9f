package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/client"

	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/internal/edge/tlsconf"
	"github.com/sandboxd/sandboxd/task"
)

// clientFlags are the flags of every command that talks to a daemon.
type clientFlags struct {
	socket    string
	addr      string
	tokenFile string
	tls       tlsconf.Files
	retry     time.Duration
}

// register adds the flags, their defaults taken from the environment the
// Python and TypeScript clients read too: SANDBOXD_ADDR (a socket path or
// HOST:PORT) and SANDBOXD_TOKEN_FILE.
func (c *clientFlags) register(fs *flag.FlagSet) {
	socket, addr := DefaultConfig().Socket, ""
	if env := os.Getenv("SANDBOXD_ADDR"); env != "" {
		if path, ok := strings.CutPrefix(env, "unix:"); ok || strings.HasPrefix(env, "/") || strings.HasPrefix(env, ".") {
			socket = strings.TrimPrefix(path, "//")
		} else {
			addr = env
		}
	}
	fs.StringVar(&c.socket, "socket", socket, "the daemon's unix socket (or set SANDBOXD_ADDR)")
	fs.StringVar(&c.addr, "addr", addr, "the daemon's TCP address HOST:PORT, instead of the socket (or set SANDBOXD_ADDR)")
	fs.StringVar(&c.tokenFile, "token-file", os.Getenv("SANDBOXD_TOKEN_FILE"), "file holding the bearer token for --addr (or set SANDBOXD_TOKEN or SANDBOXD_TOKEN_FILE)")
	fs.StringVar(&c.tls.CAFile, "tls-ca", "", "PEM CA the daemon's certificate must chain to: talk TLS to --addr")
	fs.StringVar(&c.tls.CertFile, "tls-cert", "", "PEM client certificate, for a daemon that asks for one (--tls-client-ca)")
	fs.StringVar(&c.tls.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.DurationVar(&c.retry, "retry-within", client.DefaultRetryWithin, "how long to keep retrying when the daemon answers busy or draining (0: do not)")
}

// dial returns a client of the daemon. gRPC connects lazily: errors show
// on the first call.
func (c *clientFlags) dial() (*client.Client, error) {
	token := os.Getenv("SANDBOXD_TOKEN")
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, err
		}
		token = strings.TrimSpace(string(b))
	}
	if c.addr == "" {
		if err := reachable(c.socket); err != nil {
			return nil, err
		}
	}
	o := client.DialOptions{Socket: c.socket, Addr: c.addr, Token: token, Retry: client.Retry{Within: c.retry, Waiting: sayWaiting}}
	if c.tls != (tlsconf.Files{}) {
		if c.addr == "" {
			return nil, errors.New("--tls-ca, --tls-cert and --tls-key are for --addr: the socket needs no TLS")
		}
		cfg, err := c.tls.ClientConfig()
		if err != nil {
			return nil, err
		}
		o.TLS = cfg
	}
	return client.Dial(o)
}

// inventory asks the daemon what it runs, for a command that needs nothing
// else of it.
func (c *clientFlags) inventory() (task.Inventory, error) {
	client, err := c.dial()
	if err != nil {
		return task.Inventory{}, err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return client.Inventory(ctx)
}

// sayWaiting tells the person at the terminal why a command pauses: the
// daemon's refusal and the wait it asked for.
func sayWaiting(refusal error, wait time.Duration) {
	fmt.Fprintf(os.Stderr, "sandboxd: %s (waiting %v to retry)\n", status.Convert(refusal).Message(), wait.Round(10*time.Millisecond))
}

// connectionHint says what to pass when a TCP connection to the daemon
// failed in its TLS handshake, whose errors name the protocol's words, not
// the flags: "" when msg is no such failure.
func connectionHint(msg string) string {
	for _, h := range []struct{ says, hint string }{
		{"tls: certificate required", "the daemon asks for a client certificate its --tls-client-ca signed: pass --tls-cert and --tls-key"},
		{"tls: bad certificate", "the daemon refused this client certificate: pass --tls-cert and --tls-key of one its --tls-client-ca signed"},
		{"broken pipe", "the daemon closed the connection in the handshake; if it asks for client certificates, pass --tls-cert and --tls-key"},
		{"x509: certificate signed by unknown authority", "the daemon's certificate does not chain to --tls-ca: pass the CA that signed it"},
		{"first record does not look like a TLS handshake", "the daemon does not speak TLS at that address: leave out --tls-ca"},
		// A TLS listener that read a plaintext preface closes: EOF, or a
		// reset when the kernel still held bytes it left unread. The TLS
		// alerts above end the same way, so this comes after them.
		{"error reading server preface: ", "the daemon may speak TLS at that address: pass --tls-ca with the CA of its certificate"},
		// A reset while writing, with no preface error: the handshake was
		// cut, by a TLS listener that read a plaintext preface or refused
		// the client's certificate, whichever the client's write met first.
		{"write: connection reset by peer", "the daemon reset the connection in the handshake: if it speaks TLS, pass --tls-ca with the CA of its certificate; if it asks for client certificates, pass --tls-cert and --tls-key"},
	} {
		if strings.Contains(msg, h.says) {
			return "\n  hint: " + h.hint
		}
	}
	return ""
}

// reachable connects to the daemon's socket once, so that a person is told
// why it cannot be used rather than gRPC's "connection error": the
// socket's permissions (root's and the sandboxd group's), or no daemon.
func reachable(socket string) error {
	conn, err := net.DialTimeout("unix", socket, 5*time.Second)
	switch {
	case err == nil:
		return conn.Close()
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("the daemon's socket %s is root's and the sandboxd group's: run as root, or join the group (usermod -aG sandboxd $USER, then log in again)", socket)
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("no daemon answers on %s: start it (make run, or sandboxd serve), or point --socket or SANDBOXD_ADDR at it", socket)
	}
	return fmt.Errorf("the daemon's socket %s: %w", socket, err)
}

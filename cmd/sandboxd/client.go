package main

import (
	"flag"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/server"
)

// clientFlags are the flags of every command that talks to a daemon.
type clientFlags struct {
	socket    string
	addr      string
	tokenFile string
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.socket, "socket", DefaultConfig().Socket, "the daemon's unix socket")
	fs.StringVar(&c.addr, "addr", "", "the daemon's TCP address HOST:PORT (instead of the socket)")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the bearer token for --addr (or set SANDBOXD_TOKEN)")
}

// dial returns a client of the daemon. gRPC connects lazily: errors show
// on the first call.
func (c *clientFlags) dial() (*server.Client, error) {
	token := os.Getenv("SANDBOXD_TOKEN")
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, err
		}
		token = strings.TrimSpace(string(b))
	}
	return server.Dial(server.DialOptions{Socket: c.socket, Addr: c.addr, Token: token})
}

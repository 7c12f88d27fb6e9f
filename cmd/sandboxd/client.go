package main

import (
	"context"
	"flag"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
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

// dial connects to the daemon. gRPC connects lazily: errors show on the
// first call.
func (c *clientFlags) dial() (pb.SandboxServiceClient, func() error, error) {
	target := "unix://" + c.socket
	if c.addr != "" {
		target = "dns:///" + c.addr
	}
	opts := dialOptions()
	token := os.Getenv("SANDBOXD_TOKEN")
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, nil, err
		}
		token = strings.TrimSpace(string(b))
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken(token)))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, nil, err
	}
	return pb.NewSandboxServiceClient(conn), conn.Close, nil
}

// dialOptions are those of every connection to the daemon: plaintext, and
// replies of up to 64 MiB.
func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
	}
}

// bearerToken sends "authorization: Bearer TOKEN" with every call. The
// daemon's TCP listener is plaintext and meant for loopback or a trusted
// network, so the token is allowed without TLS.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return false }

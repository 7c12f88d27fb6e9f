package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sandboxd/sandboxd/mcp"
	"github.com/sandboxd/sandboxd/server"
)

// runMCP is `sandboxd mcp`, the command an MCP host launches: MCP over
// stdio, on the daemon at --socket when one answers there, and otherwise on
// an engine in this process, configured by the same flags as serve. Only MCP
// messages go to stdout; logs go to stderr.
func runMCP(args []string, _, stderr io.Writer) error {
	cfg := DefaultConfig()
	cfg.Task.Instance = fmt.Sprintf("mcp-%d", os.Getpid())
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.register(fs)
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogLevel)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var engine mcp.Engine
	if conn, ok := daemonAt(ctx, cfg.Socket); ok {
		defer conn.Close()
		log.Info("using the daemon", "socket", cfg.Socket)
		engine = server.NewClient(conn)
	} else {
		log.Info("no daemon answers; running the engine in this process", "socket", cfg.Socket, "instance", cfg.Task.Instance)
		svc, closeEngine, err := newEngine(ctx, cfg, log)
		if err != nil {
			return fmt.Errorf("no daemon answers at %s, and the engine cannot run here: %w", cfg.Socket, err)
		}
		defer func() {
			shutCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			svc.Shutdown(shutCtx)
			closeEngine()
		}()
		engine = svc
	}
	s, err := mcp.NewServer(ctx, engine, mcp.Options{Version: version, OutputBytes: cfg.MCPOutputBytes, Log: log})
	if err != nil {
		return err
	}
	if err := s.Run(ctx, &mcpsdk.StdioTransport{}); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// daemonAt connects to the daemon at socket if it answers its health check.
func daemonAt(ctx context.Context, socket string) (*grpc.ClientConn, bool) {
	if _, err := os.Stat(socket); err != nil {
		return nil, false
	}
	conn, err := grpc.NewClient("unix://"+socket, dialOptions()...)
	if err != nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		conn.Close()
		return nil, false
	}
	return conn, true
}

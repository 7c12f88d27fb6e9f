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

	"github.com/sandboxd/sandboxd/mcp"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/task"
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
	if client, ok := daemonAt(ctx, cfg.Socket); ok {
		defer client.Close()
		log.Info("using the daemon", "socket", cfg.Socket)
		engine = client
	} else {
		log.Info("no daemon answers; running the engine in this process", "socket", cfg.Socket, "instance", cfg.Task.Instance)
		// The engine is the operator's own: its caller is the operator.
		ctx = task.WithCaller(ctx, task.Operator)
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
	if err := mcp.ServeStdio(ctx, s); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// daemonAt connects to the daemon at socket if it answers its health check.
func daemonAt(ctx context.Context, socket string) (*server.Client, bool) {
	if _, err := os.Stat(socket); err != nil {
		return nil, false
	}
	client, err := server.Dial(server.DialOptions{Socket: socket})
	if err != nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if !client.Healthy(ctx) {
		client.Close()
		return nil, false
	}
	return client, true
}

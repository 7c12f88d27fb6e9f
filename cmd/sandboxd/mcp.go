package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/client"

	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/mcp"
	"github.com/sandboxd/sandboxd/task/access"
)

// runMCP is `sandboxd mcp`, the command an MCP host launches: MCP over
// stdio, on the daemon at --socket. When none answers it fails, rather than
// run tasks under a configuration other than the operator's; --in-process
// runs the engine in this process instead, configured by the same flags as
// serve (--config FILE takes them from the daemon's file). Only MCP
// messages go to stdout; logs go to stderr.
func runMCP(args []string, _, stderr io.Writer) error {
	cfg := DefaultConfig()
	cfg.Task.Instance = fmt.Sprintf("mcp-%d", os.Getpid())
	fs := verbFlags("mcp", stderr)
	cfg.register(fs)
	inProcess := fs.Bool("in-process", false, "run the engine in this process, configured by these flags, instead of using the daemon")
	if err := parseSettings(fs, args); err != nil {
		return err
	}
	if err := cfg.loadCatalog(); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var engine mcp.Engine
	if !*inProcess {
		client, err := daemonAt(ctx, cfg.Socket, client.Retry{Within: cfg.MCPWait, Waiting: func(refusal error, wait time.Duration) {
			log.Info("the daemon refused a call for now; retrying", "reason", status.Convert(refusal).Message(), "wait", wait)
		}})
		if err != nil {
			return fmt.Errorf("%w; or give --in-process to run the engine in this process with this command's flags (--config FILE reads the daemon's)", err)
		}
		defer client.Close()
		log.Info("using the daemon", "socket", cfg.Socket)
		engine = client
	} else {
		log.Info("running the engine in this process", "instance", cfg.Task.Instance)
		// The engine is the operator's own: its caller is the operator.
		ctx = access.WithCaller(ctx, access.Operator)
		svc, closeEngine, err := newEngine(ctx, cfg, log)
		if err != nil {
			return fmt.Errorf("the engine cannot run in this process: %w", err)
		}
		defer func() {
			shutCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			svc.Shutdown(shutCtx)
			closeEngine()
		}()
		engine = svc
	}
	s, err := mcp.NewServer(ctx, engine, mcp.Options{Version: version, OutputBytes: cfg.MCPOutputBytes, Wait: cfg.MCPWait, Log: log})
	if err != nil {
		return err
	}
	if err := mcp.ServeStdio(ctx, s); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// daemonAt connects to the daemon at socket if it answers its health check,
// or says why it cannot be used. A call the daemon refuses for now (busy,
// draining) is retried as retry says, as the CLI's are: a model would
// otherwise read "busy" as its code's failure.
func daemonAt(ctx context.Context, socket string, retry client.Retry) (*client.Client, error) {
	if err := reachable(socket); err != nil {
		return nil, err
	}
	client, err := client.Dial(client.DialOptions{Socket: socket, Retry: retry})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if !client.Healthy(ctx) {
		client.Close()
		return nil, fmt.Errorf("the daemon on %s is not serving (draining, or shutting down)", socket)
	}
	return client, nil
}

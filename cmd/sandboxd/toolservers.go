package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/mcp"
	"github.com/sandboxd/sandboxd/task/tools"
)

// openToolServers registers the --tool-server MCP servers, each with the
// token of its --tool-server-token. They are connected on first use: a
// server that is down does not keep the daemon from starting.
func openToolServers(cfg Config, cl *closers, log *slog.Logger) (*tools.Registry, error) {
	tokens := map[string]string{}
	for _, kv := range cfg.ToolTokens {
		name, file, ok := strings.Cut(kv, "=")
		if !ok || file == "" {
			return nil, fmt.Errorf("--tool-server-token %q: want NAME=FILE", kv)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--tool-server-token %s: %w", name, err)
		}
		tokens[name] = strings.TrimSpace(string(b))
	}
	reg := tools.NewRegistry(log)
	for _, kv := range cfg.ToolServers {
		name, target, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--tool-server %q: want NAME=URL or NAME=COMMAND", kv)
		}
		header := http.Header{}
		if tok, ok := tokens[name]; ok {
			header.Set("Authorization", "Bearer "+tok)
			delete(tokens, name)
		}
		ts, err := mcp.NewToolServer(name, target, header, version)
		if err != nil {
			return nil, fmt.Errorf("--tool-server %s: %w", name, err)
		}
		if err := reg.Add(name, ts); err != nil {
			return nil, fmt.Errorf("--tool-server: %w", err)
		}
		cl.push("tool server "+name, ts.Close)
	}
	for name := range tokens {
		return nil, fmt.Errorf("--tool-server-token %s: no --tool-server of that name", name)
	}
	return reg, nil
}

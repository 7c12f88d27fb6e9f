// Command orders-mcp is the tests' orders server (internal/testutil/toolserver)
// on stdin and stdout: an operator's MCP tool server that sandboxd starts as
// a command (--tool-server orders=orders-mcp).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/sandboxd/sandboxd/internal/testutil/toolserver"
)

func main() {
	if err := toolserver.ServeStdio(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "orders-mcp:", err)
		os.Exit(1)
	}
}

// Package layout holds the test that enforces the import rules of
// DESIGN.md: imports point downward, only cmd/sandboxd picks a backend,
// only server sees the API's protocol types, only mcp sees the MCP SDK,
// and the runtime contract and the shared lifecycle import no engine SDK.
package layout

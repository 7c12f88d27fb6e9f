// Package layout holds the tests that keep the repository's shape: the
// import rules of docs/architecture.md (imports point downward, only
// cmd/sandboxd picks a backend, only server sees the API's protocol types,
// only mcp sees the MCP SDK, the runtime contract and the shared lifecycle
// import no backend's SDK), that every doc comment starts with the name it
// documents, and that nothing built is tracked by git.
package layout

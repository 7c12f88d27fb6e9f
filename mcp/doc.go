// Package mcp is sandboxd's face for MCP hosts.
package mcp

import _ "github.com/modelcontextprotocol/go-sdk/mcp"
import _ "github.com/google/jsonschema-go/jsonschema"

package mcp

import (
	"context"
	"fmt"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	sbtools "github.com/sandboxd/sandboxd/task/tools"
)

// hostConfirmer asks the MCP host, by elicitation, whether a program's
// high-risk tool call may go on: the host shows the question to its user.
type hostConfirmer struct{ session *mcpsdk.ServerSession }

// hostConfirmerOf is the confirmer of a tool call's host, or nil when
// the host cannot be asked: high-risk calls are then refused as
// needs_confirmation. A host asks to be asked by declaring elicitation;
// on 2026-07-28 a server may no longer send it a request while serving
// one (it would answer the call with input requests instead, SEP-2322),
// so such hosts are not asked.
func hostConfirmerOf(req *mcpsdk.CallToolRequest) *hostConfirmer {
	if req == nil || req.Session == nil {
		return nil
	}
	p := req.Session.InitializeParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil || p.ProtocolVersion >= statelessRevision {
		return nil
	}
	return &hostConfirmer{req.Session}
}

// statelessRevision is the first MCP revision whose servers send no
// requests of their own while serving one.
const statelessRevision = "2026-07-28"

// confirmSchema is the one answer asked for: allow or not.
var confirmSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"allow": map[string]any{"type": "boolean", "title": "Allow this call", "default": false},
	},
	"required": []string{"allow"},
}

func (h *hostConfirmer) Confirm(ctx context.Context, c sbtools.Call) (bool, error) {
	res, err := h.session.Elicit(ctx, &mcpsdk.ElicitParams{
		Message: fmt.Sprintf("A program in the sandbox asks to call %s, a high-risk tool, with the arguments %s. Allow this one call?",
			c.Tool, c.Arguments),
		RequestedSchema: confirmSchema,
	})
	if err != nil {
		return false, err
	}
	allow, _ := res.Content["allow"].(bool)
	return res.Action == "accept" && allow, nil
}

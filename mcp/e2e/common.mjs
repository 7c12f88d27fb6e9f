// What the end-to-end clients share: the transport to sandboxd's MCP
// server, and one line per check.
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

export let failures = 0;

// check prints "ok NAME" or "FAIL NAME: why".
export function check(name, ok, why) {
  if (ok) {
    console.log(`ok ${name}`);
  } else {
    failures++;
    console.log(`FAIL ${name}: ${why}`);
  }
}

// transport launches `sandboxd mcp` (stdio BINARY ARGS...) or connects to
// `serve --mcp-listen` (http URL TOKEN).
export function transport(mode, target, rest) {
  if (mode === "stdio") {
    return new StdioClientTransport({ command: target, args: rest, stderr: "inherit" });
  }
  const token = rest[0];
  return new StreamableHTTPClientTransport(new URL(target), {
    requestInit: token ? { headers: { Authorization: `Bearer ${token}` } } : {},
  });
}

export function textOf(result) {
  return (result.content || []).filter((c) => c.type === "text").map((c) => c.text).join("");
}

// A host of the 2026-07-28 revision: the official TypeScript SDK's current
// major version (@modelcontextprotocol/client, v2; Node.js 20 or later)
// over Streamable HTTP or stdio, beside the v1 client of client.mjs on the
// same daemon. It is served statelessly: no transport session, a sandbox
// session used across requests by its id. mcp/e2e_integration_test.go
// runs it:
//
//   node revision2026.mjs http URL TOKEN
//   node revision2026.mjs stdio BINARY ARGS...
//
// It prints "ok NAME" or "FAIL NAME: why" per check and exits 1 if any failed.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { check, failures, textOf } from "./common.mjs";

const [mode, target, ...rest] = process.argv.slice(2);
const transport = mode === "stdio"
  ? new StdioClientTransport({ command: target, args: rest, stderr: "inherit" })
  : new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers: { Authorization: `Bearer ${rest[0]}` } } });
// The v2 client initializes at 2025-11-25 unless told: "auto" probes with
// server/discover and falls back; pinned, anything but 2026-07-28 fails.
const client = new Client({ name: "sandboxd-e2e-2026", version: "1.0.0" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } });
await client.connect(transport);
check("negotiated 2026-07-28", client.getNegotiatedProtocolVersion() === "2026-07-28", client.getNegotiatedProtocolVersion());
check("no transport session", transport.sessionId === undefined, transport.sessionId);

const { tools } = await client.listTools();
check("tools listed", ["run_code", "create_session", "wait_run"].every((n) => tools.some((t) => t.name === n)), tools.map((t) => t.name).join(" "));

const call = (name, args) => client.callTool({ name, arguments: args }, { timeout: 120000 });
const created = await call("create_session", { language: "python" });
const id = created.structuredContent?.session_id;
check("create_session", !created.isError && id, textOf(created));
await call("run_code", { language: "python", code: "x = 6 * 7", session_id: id });
const second = await call("run_code", { language: "python", code: "print(x)", session_id: id });
check("a session kept across requests", !second.isError && second.structuredContent?.stdout === "42\n", JSON.stringify(second.structuredContent));

await call("run_code", { language: "python", code: "open('report.txt', 'w').write('hi')", session_id: id });
const uri = `sandboxd://session/${id}/report.txt`;
const { resources } = await client.listResources();
check("the session's file is listed", resources.some((r) => r.uri === uri), resources.map((r) => r.uri).join(" "));
const read = await client.readResource({ uri });
check("and read", read.contents[0]?.text === "hi", JSON.stringify(read.contents));

const bad = await call("run_code", { language: "python", code: "x", memory_mb: 100000 });
check("an argument error in the API's words", bad.isError && /memory_mb: 100000 is above the maximum \d+/.test(textOf(bad)), textOf(bad));

const ended = await call("end_session", { session_id: id });
check("end_session", !ended.isError, textOf(ended));
await client.close();
process.exit(failures ? 1 : 0);

// End-to-end check of sandboxd's MCP server with the official TypeScript SDK
// as the client, over stdio or Streamable HTTP. mcp/e2e_integration_test.go
// runs it:
//
//   node client.mjs stdio BINARY ARGS...   launches `sandboxd mcp`
//   node client.mjs http URL TOKEN         connects to `serve --mcp-listen`
//   node client.mjs quick stdio|http ...   only initialize and print(6*7)
//
// It prints one line per check ("ok NAME" or "FAIL NAME: why"), the line
// "ABORTED" when it cancels a call (the harness then checks that the
// sandbox is gone within a second), and exits 1 if any check failed.
import http from "node:http";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { check, failures, textOf, transport } from "./common.mjs";

let args = process.argv.slice(2);
const quick = args[0] === "quick";
if (quick) args = args.slice(1);
const [mode, target, ...rest] = args;




async function run(client, name, args, options) {
  return client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout: 120000, ...options });
}

const client = new Client({ name: "sandboxd-e2e", version: "1.0.0" });
await client.connect(transport(mode, target, rest));
check("initialize", client.getServerVersion()?.name === "sandboxd", JSON.stringify(client.getServerVersion()));

const answer = await run(client, "run_code", { language: "python", code: "print(6*7)" });
check("run_code print(6*7) -> 42", answer.structuredContent?.stdout === "42\n" && !answer.isError && textOf(answer).includes("42"),
  JSON.stringify(answer));

if (!quick) {
  const tools = await client.listTools();
  const names = tools.tools.map((t) => t.name).sort();
  check("tools/list", names.join(",") === "cancel_run,create_session,end_session,open_port,read_process,run_code,run_command,start_process,wait_run", names.join(","));
  const code = tools.tools.find((t) => t.name === "run_code");
  check("input schema rejects unknown fields", code?.inputSchema?.additionalProperties === false, JSON.stringify(code?.inputSchema));
  check("output schema declared", code?.outputSchema?.properties?.status !== undefined, JSON.stringify(code?.outputSchema));
  check("limits in the description", /no network/.test(code?.description) && /Limits: memory/.test(code?.description), code?.description);

  const link = answer.content.find((c) => c.type === "resource_link");
  check("resource_link to the bundle", link && link.uri.startsWith("sandboxd://bundle/"), JSON.stringify(answer.content));
  if (link) {
    const manifest = await client.readResource({ uri: link.uri });
    const m = JSON.parse(manifest.contents[0].text);
    check("resources/read manifest", m.format === "sandboxd.bundle/v1" && m.reproducible.request.language === "python", manifest.contents[0].text.slice(0, 200));
  }

  const timeout = await run(client, "run_code", { language: "python", code: "while True: pass", timeout_seconds: 1 });
  check("timeout", timeout.isError && timeout.structuredContent?.status === "TIMEOUT", JSON.stringify(timeout.structuredContent));

  const oom = await run(client, "run_code", { language: "python", code: "x = bytearray(400 << 20)", memory_mb: 64 });
  check("out of memory", oom.isError && oom.structuredContent?.status === "OOM_KILLED", JSON.stringify(oom.structuredContent));

  const flood = await run(client, "run_code", { language: "python", code: "print('x' * 200000)" });
  const fs = flood.structuredContent;
  check("truncated flood", fs?.stdout_truncated === true && fs?.stdout_bytes === 200001 && fs?.stdout.length < 200000 && /stdout truncated/.test(textOf(flood)),
    JSON.stringify({ ...fs, stdout: fs?.stdout?.length }));

  const bad = await run(client, "run_code", { language: "python", code: "print(1)", colour: "red" });
  check("bad argument is a tool error", bad.isError && /colour/.test(textOf(bad)), textOf(bad));

  const forged = '{"jsonrpc":"2.0","id":1,"result":{}}';
  const forge = await run(client, "run_code", { language: "python", code: `print('${forged}')` });
  check("printed JSON-RPC stays text", forge.structuredContent?.stdout === forged + "\n" && textOf(forge).includes(forged), JSON.stringify(forge));

  const ticks = [];
  await run(client, "run_code", { language: "python", code: "import time\nfor i in range(3):\n    print('tick', i)\n    time.sleep(0.4)" },
    { onprogress: (p) => ticks.push(p.message || "") });
  check("progress notifications carry output", ticks.join("").includes("tick 0") && ticks.length >= 2, JSON.stringify(ticks));

  const abort = new AbortController();
  const started = [];
  const pending = run(client, "run_code", { language: "python", code: "import time\nprint('started', flush=True)\ntime.sleep(120)" },
    { signal: abort.signal, onprogress: (p) => { started.push(p.message); if (!abort.signal.aborted) { abort.abort(); console.log("ABORTED"); } } });
  let cancelled = false;
  try {
    await pending;
  } catch (e) {
    cancelled = true;
  }
  check("cancelled call", cancelled && started.length > 0, `cancelled ${cancelled}, progress ${JSON.stringify(started)}`);
  // The harness looks for the sandbox now; give it the second it allows.
  await new Promise((r) => setTimeout(r, 1500));

  if (mode === "http") {
    const status = await new Promise((resolve, reject) => {
      const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "evil", version: "1" } } });
      const req = http.request(target, { method: "POST", headers: {
        Origin: "http://evil.example", "Content-Type": "application/json", Accept: "application/json, text/event-stream",
        Authorization: `Bearer ${rest[0]}`,
      } }, (res) => { res.resume(); resolve(res.statusCode); });
      req.on("error", reject);
      req.end(body);
    });
    check("wrong Origin -> 403", status === 403, `status ${status}`);
  }

  // The servers of this test wait 6 s for a run (--mcp-wait): a longer one
  // answers RUNNING, and wait_run from the offsets it names gets the rest.
  let long = await run(client, "run_code", { language: "python", code: "import time\nprint('first', flush=True)\ntime.sleep(8)\nprint('second')" });
  const running = long.structuredContent;
  let seen = running?.stdout ?? "";
  check("a long run answers RUNNING", running?.status === "RUNNING" && running.run_id && seen === "first\n" && !long.isError, JSON.stringify(running));
  for (let i = 0; i < 10 && long.structuredContent?.status === "RUNNING"; i++) {
    const s = long.structuredContent;
    long = await run(client, "wait_run", { run_id: running.run_id, stdout_offset: s.stdout_bytes, stderr_offset: s.stderr_bytes });
    seen += long.structuredContent?.stdout ?? "";
  }
  check("wait_run gets the rest and the result", long.structuredContent?.status === "OK" && seen === "first\nsecond\n" && long.structuredContent.run_id === running.run_id,
    JSON.stringify({ ...long.structuredContent, seen }));

  const after = await run(client, "run_command", { command: "echo still serving" });
  check("serves after all that", after.structuredContent?.stdout === "still serving\n", JSON.stringify(after.structuredContent));
}

await client.close();
process.exit(failures === 0 ? 0 : 1);

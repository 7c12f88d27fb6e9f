// A host that follows long runs as tasks: the Tasks extension's official
// requester (@modelcontextprotocol/ext-tasks) over the 2026-07-28 client
// (@modelcontextprotocol/client), against a daemon whose tool calls wait
// 6 s (--mcp-wait). A run that outlasts the wait is a task: its output
// while it runs, its result after the client that started it has gone,
// its cancellation. mcp/e2e_integration_test.go runs it:
//
//   node tasks2026.mjs URL TOKEN
//
// It prints "ok NAME" or "FAIL NAME: why" per check and exits 1 if any failed.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { createTaskSessionFromClient, resultFromTaskOutcome } from "@modelcontextprotocol/ext-tasks/client";
import { check, failures } from "./common.mjs";

const [url, token] = process.argv.slice(2);
const version = "2026-07-28";
const clientInfo = { name: "sandboxd-e2e-tasks", version: "1.0.0" };

// The requester frames the extension's requests itself and hands them to
// a dispatcher: this one posts each as the revision has clients do, with
// the routing headers (Mcp-Name is the tool or the task).
let nextId = 1;
async function dispatch(request, options = {}) {
  const id = nextId++;
  const params = request.params ?? {};
  const name = request.method === "tools/call" ? params.name : params.taskId;
  const res = await fetch(url, {
    method: "POST",
    signal: options.signal,
    headers: {
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      "MCP-Protocol-Version": version,
      "Mcp-Method": request.method,
      ...(name ? { "Mcp-Name": name } : {}),
      Authorization: `Bearer ${token}`,
      ...(options.context?.headers ?? {}),
    },
    body: JSON.stringify({ ...request, jsonrpc: "2.0", id }),
  });
  const body = await res.text();
  let message;
  if ((res.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
    for (const line of body.split("\n")) {
      if (line.startsWith("data: ")) {
        const m = JSON.parse(line.slice(6));
        if (m.id === id) message = m;
      }
    }
  } else {
    message = JSON.parse(body);
  }
  if (!message) throw new Error(`no answer to ${request.method}: HTTP ${res.status} ${body}`);
  return message.error ? { kind: "error", error: message.error } : { kind: "result", result: message.result };
}

async function connect() {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client(clientInfo, { versionNegotiation: { mode: { pin: version } } });
  await client.connect(transport);
  const session = createTaskSessionFromClient(client, {
    endpointId: "sandboxd-e2e",
    rawDispatch: dispatch,
    v2RequestFraming: { protocolVersion: version, clientInfo, clientCapabilities: {} },
  });
  return { client, session };
}

const ticks = "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(3)\n";
const first = await connect();
check("the server offers tasks", first.session.capabilities.execution, JSON.stringify(first.session.capabilities));
const exec = await first.session.callTool("run_code", { language: "python", code: ticks });
check("a run past the wait is a task", exec.kind === "task", exec.kind);

const view = await first.session.task(exec.handle.taskId).snapshot();
const sofar = view.raw?._meta?.["sandboxd/output"];
check("its output while it runs", view.status === "working" && sofar?.stdout?.startsWith("tick 0\n") && sofar.stdout_bytes > 0,
  JSON.stringify(view.raw));

// The client that started it goes (its connection closed, as when its
// process dies: closing the requester's session would cancel the task);
// another finds it by its reference.
let reference;
await exec.handoff((r) => { reference = r; });
await first.client.close();
const second = await connect();
const resumed = await second.session.resumeTask(reference);
const { outcome } = await resumed.settle();
const result = resultFromTaskOutcome(outcome);
check("its result, after a reconnect, is the call's", outcome.status === "completed" && !result.isError &&
  result.structuredContent?.status === "OK" && result.structuredContent?.stdout === "tick 0\ntick 1\ntick 2\n" &&
  result.structuredContent?.run_id === reference.taskId, JSON.stringify(outcome));

const sleeper = await second.session.callTool("run_code", { language: "python", code: "import time\ntime.sleep(120)\n" });
check("a second long run is a task", sleeper.kind === "task", sleeper.kind);
await sleeper.cancel();
let status = "";
for (let i = 0; i < 40 && status !== "cancelled"; i++) {
  status = (await second.session.task(sleeper.handle.taskId).snapshot()).status;
  if (status !== "cancelled") await new Promise((r) => setTimeout(r, 250));
}
check("tasks/cancel stops it", status === "cancelled", status);

let refused;
try {
  await second.session.task("0123456789abcdef01234567").snapshot();
} catch (e) {
  refused = e;
}
check("no such task is an invalid parameter", refused?.code === -32602, String(refused));
await second.session.close();
await second.client.close();
process.exit(failures ? 1 : 0);

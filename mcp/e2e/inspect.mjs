// The MCP Inspector's strict check of sandboxd's tool schemas: its CLI
// (@modelcontextprotocol/inspector, which asks for Node.js 22.19 but
// runs this check on 20) lists the tools with --strict, which reports
// every schema construct some host cannot take and exits 6 on an error.
// sandboxd is held to none at all, warnings included.
// mcp/e2e_integration_test.go runs it:
//
//   node inspect.mjs URL TOKEN
//
// It prints "ok NAME" or "FAIL NAME: why" per check and exits 1 if any failed.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { check, failures } from "./common.mjs";

const [url, token] = process.argv.slice(2);
const inspector = fileURLToPath(new URL("./node_modules/.bin/mcp-inspector", import.meta.url));
// The Inspector keeps state in ~/.mcp-inspector: here, a folder of its own.
const home = mkdtempSync(join(tmpdir(), "inspector-"));
let run;
try {
  run = spawnSync(inspector, ["--cli", "--strict", "--method", "tools/list", "--transport", "http", "--server-url", url,
    "--header", `Authorization: Bearer ${token}`], { env: { ...process.env, HOME: home }, encoding: "utf8", timeout: 120000 });
} finally {
  rmSync(home, { recursive: true, force: true });
}
check("the Inspector's strict check passes", run.status === 0, `exit ${run.status}: ${run.stderr}`);
check("with no finding, warnings included", !/Warning:|Error:|\d+ (errors?|warnings?) across/.test(run.stderr), run.stderr);
let tools = [];
try {
  tools = JSON.parse(run.stdout).tools ?? [];
} catch (e) {
  check("it lists the tools", false, `${e}: ${run.stdout.slice(0, 200)}`);
}
check("on every tool", ["run_code", "run_command", "create_session", "end_session", "wait_run", "cancel_run"].every((n) => tools.some((t) => t.name === n)),
  tools.map((t) => t.name).join(" "));
process.exit(failures ? 1 : 0);

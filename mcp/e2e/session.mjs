// A data-analysis session through sandboxd's MCP server, with the official
// TypeScript SDK as the client: 20 calls in one session (load a CSV with
// pandas, keep state, fail and go on, plot, write and read a file, run a
// command, time out and keep state), then end it. mcp/e2e_integration_test.go
// runs it:
//
//   node session.mjs stdio BINARY ARGS...   launches `sandboxd mcp`
//   node session.mjs http URL TOKEN         connects to `serve --mcp-listen`
//
// It prints "ok NAME" or "FAIL NAME: why" per check and exits 1 if any failed.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { check, failures, transport } from "./common.mjs";

const [mode, target, ...rest] = process.argv.slice(2);



const client = new Client({ name: "sandboxd-e2e-session", version: "1.0.0" });
await client.connect(transport(mode, target, rest));

let calls = 0;
async function tool(name, args) {
  if (name === "run_code" || name === "run_command") calls++;
  return client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout: 120000 });
}

const rows = ["region,units,price"];
for (let i = 0; i < 40; i++) rows.push(`${["north", "south", "east", "west"][i % 4]},${i + 1},${(i % 7) + 0.5}`);
const csv = rows.join("\n") + "\n";

const created = await tool("create_session", { language: "python", files: [{ path: "sales.csv", content: csv }] });
const id = created.structuredContent?.session_id;
check("create_session", !created.isError && id && created.structuredContent.state === "ACTIVE", JSON.stringify(created));

const py = (code, extra = {}) => tool("run_code", { language: "python", code, session_id: id, ...extra });
const value = (r) => r.structuredContent?.value;

let r = await py("import pandas as pd\ndf = pd.read_csv('/input/sales.csv')");
check("load the CSV", !r.isError && r.structuredContent.status === "OK" && r.structuredContent.session_seq === 1, JSON.stringify(r.structuredContent));
r = await py("df.shape");
check("the frame is kept", value(r) === "(40, 3)", JSON.stringify(r.structuredContent));
r = await py("df.head(2)");
check("head as text", /region\s+units\s+price/.test(value(r)), value(r));
r = await py("df['revenue'] = df.units * df.price");
check("add a column", !r.isError, JSON.stringify(r.structuredContent));
r = await py("round(df.revenue.sum(), 2)");
const total = rows.slice(1).map((l) => l.split(",")).reduce((s, [, u, p]) => s + Number(u) * Number(p), 0);
check("sum", Number(value(r)) === Math.round(total * 100) / 100, `${value(r)} vs ${total}`);
r = await py("df.groupby('region').revenue.sum().round(1).to_dict()");
check("group by", /'north':/.test(value(r)) && /'west':/.test(value(r)), value(r));
r = await py("df['nope']");
check("an error is reported and kept apart", r.isError && r.structuredContent.error?.name === "KeyError" && r.structuredContent.status === "NONZERO_EXIT",
  JSON.stringify(r.structuredContent));
r = await py("len(df)");
check("state survives the error", value(r) === "40", JSON.stringify(r.structuredContent));

const plot = "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(4, 3))\ndf.groupby('region').revenue.sum().plot(kind='bar', ax=ax)\nplt.show()";
r = await py(plot);
const image = (r.content || []).find((c) => c.type === "image");
check("a chart comes back as an image", image && image.mimeType === "image/png" && image.data.startsWith("iVBORw0KGgo") && r.structuredContent.displays?.length === 1,
  JSON.stringify({ ...r.structuredContent, content: (r.content || []).map((c) => c.type) }));
const again = await py(plot);
const image2 = (again.content || []).find((c) => c.type === "image");
check("the same chart is the same bytes", image && image2 && image.data === image2.data, "the PNGs differ");

r = await py("df.to_csv('/workspace/summary.csv', index=False)");
const summary = (r.structuredContent?.files || []).find((f) => f.path === "summary.csv");
check("a file is written", summary && summary.size > 0, JSON.stringify(r.structuredContent?.files));
const link = (r.content || []).find((c) => c.type === "resource_link");
if (link) {
  const uri = link.uri.replace(/manifest\.json$/, "output/summary.csv");
  const file = await client.readResource({ uri });
  check("the file is downloaded through resources/read", file.contents[0].text?.startsWith("region,units,price,revenue"), JSON.stringify(file.contents[0]).slice(0, 200));
} else {
  check("the file is downloaded through resources/read", false, "no resource_link");
}

r = await tool("run_command", { command: "wc -l < /workspace/summary.csv", session_id: id });
check("a command sees the session's files", r.structuredContent?.stdout === "41\n", JSON.stringify(r.structuredContent));
r = await py("x = 10");
r = await py("x * 2");
check("a variable is kept", value(r) === "20", JSON.stringify(r.structuredContent));
r = await py("while True: pass", { timeout_seconds: 1 });
check("a timeout interrupts", r.isError && r.structuredContent.status === "TIMEOUT", JSON.stringify(r.structuredContent));
r = await py("x + len(df)");
check("state survives the interrupt", value(r) === "50", JSON.stringify(r.structuredContent));
r = await py("from scipy import stats\nround(stats.pearsonr(df.units, df.revenue)[0], 3)");
check("scipy", Number(value(r)) > 0.5, JSON.stringify(r.structuredContent));
r = await py("df.describe().loc['mean', 'units']");
check("describe", value(r) === "20.5", JSON.stringify(r.structuredContent));
r = await tool("run_command", { command: "ls /workspace/.sandboxd/displays | wc -l", session_id: id });
check("the charts are files of the session", r.structuredContent?.stdout === "2\n", JSON.stringify(r.structuredContent));
r = await py("from sklearn.linear_model import LinearRegression\nm = LinearRegression().fit(df[['units']], df.revenue)\nround(float(m.coef_[0]), 2) > 0");
check("scikit-learn", value(r) === "True", JSON.stringify(r.structuredContent));
check("20 calls in one session", calls === 20 && r.structuredContent.session_seq === 20, `calls ${calls}, seq ${r.structuredContent.session_seq}`);

// A process in the session's background, read on from its offsets and
// stopped.
const started = await tool("start_process", { session_id: id, command: "echo up; exec sleep 300" });
const proc = started.structuredContent;
check("start_process", !started.isError && proc?.state === "RUNNING" && proc.stdout === "up\n", JSON.stringify(proc));
const stopped = await tool("read_process", { session_id: id, process_id: proc?.process_id, stdout_offset: proc?.next_stdout_offset, signal: "TERM" });
check("read_process stops it", !stopped.isError && stopped.structuredContent?.state === "EXITED" && stopped.structuredContent.exit_code === 143,
  JSON.stringify(stopped.structuredContent));

const ended = await tool("end_session", { session_id: id });
check("end_session", !ended.isError && ended.structuredContent?.state === "DELETED", JSON.stringify(ended));
r = await py("1");
check("an ended session refuses calls", r.isError && /ended|DELETED/.test((r.content || []).map((c) => c.text).join("")), JSON.stringify(r));

await client.close();
process.exit(failures === 0 ? 0 : 1);

// The TypeScript client against a real daemon. `go test -tags integration
// ./cmd/sandboxd -run TestTypeScriptClient` starts one of its own, builds
// and packs the package and runs these; by hand, point them at one that
// runs one task at a time and queues none (--max-running 1 --max-queued 0):
//
//   SANDBOXD_ADDR=/run/sandboxd/sandboxd.sock SANDBOXD_TEST_TCP_ADDR=127.0.0.1:7070 \
//   SANDBOXD_TEST_TOKEN_FILE=/etc/sandboxd/token SANDBOXD_TEST_NET_HOST=net.test:8080 \
//   node --test clients/typescript/test/
//
// SANDBOXD_TEST_NET_HOST is a host of the test's that answers HTTP, which
// the daemon allows (--egress-allow, --egress-host).
//
// SANDBOXD_CLIENT_DIR names the package to test (the unpacked tarball);
// by default the build in dist/.

import * as grpc from "@grpc/grpc-js";
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { pathToFileURL } from "node:url";

const dir = process.env.SANDBOXD_CLIENT_DIR ?? new URL("..", import.meta.url).pathname;
const sd = await import(pathToFileURL(dir + "/dist/index.js").href);

for (const name of ["SANDBOXD_ADDR", "SANDBOXD_TEST_TCP_ADDR", "SANDBOXD_TEST_TOKEN_FILE", "SANDBOXD_TEST_NET_HOST"]) {
  assert.ok(process.env[name], `${name} is not set: see the top of test/client.test.js for how to run these tests`);
}

const client = new sd.Client();
after(() => client.close());
const text = (b) => new TextDecoder().decode(b);

test("runCode returns output, status, numbers and a verified bundle", async () => {
  const res = await client.runCode("import sys\nprint(6 * 7)\nsys.stdout.buffer.write(b'\\xff')");
  assert.equal(res.status, "OK");
  assert.equal(res.ok, true);
  assert.equal(res.exitCode, 0); // a number, never undefined
  assert.equal(typeof res.durationMs, "number");
  assert.ok(res.stdout instanceof Uint8Array);
  assert.deepEqual([...res.stdout], [...Buffer.from("42\n\xff", "latin1")]);
  assert.equal(res.text(), "42\n\ufffd");
  assert.equal(res.started.runId, res.runId);
  const bundle = await client.bundle(res.bundleDigest);
  assert.equal(bundle.digest, res.bundleDigest);
  assert.equal(bundle.manifest.reproducible.outcome.status, "OK");
  assert.equal(bundle.manifest.run.reproducible_digest, res.reproducibleDigest);
});

test("inventory names languages and runtimes", async () => {
  const inv = await client.inventory();
  assert.equal(inv.languages.python, "sandboxd/python");
  assert.ok(inv.runtimes.includes(inv.defaultRuntime));
  assert.ok(inv.maxLimits.timeoutMs > 0);
});

test("a failing program is a result, raiseForStatus throws", async () => {
  const res = await client.runCode("raise SystemExit(3)");
  assert.equal(res.status, "NONZERO_EXIT");
  assert.equal(res.exitCode, 3);
  assert.throws(() => res.raiseForStatus(), sd.RunFailed);
  const slow = await client.runCode("import time; time.sleep(30)", { timeoutMs: 1000 });
  assert.equal(slow.status, "TIMEOUT");
});

test("files, env, commands", async () => {
  const res = await client.runCode("import os; print(open('/input/a.txt').read(), os.environ['G'])", {
    files: { "a.txt": "hello" },
    env: { G: "hi" },
  });
  assert.equal(res.text(), "hello hi\n");
  const cmd = await client.runCommand(["sh", "-c", "echo $0; exit 4", "argv0"]);
  assert.equal(cmd.text(), "argv0\n");
  assert.equal(cmd.exitCode, 4);
  assert.equal((await client.runCommand({ shell: "echo from a shell" })).text(), "from a shell\n");
});

test("streamCode yields events as they come", async () => {
  const events = [];
  for await (const ev of client.streamCode("import sys; print('a', flush=True); print('b', file=sys.stderr)")) events.push(ev);
  assert.equal(events[0].type, "started");
  assert.equal(events.at(-1).type, "result");
  const out = events.filter((e) => e.type === "stdout").map((e) => text(e.data)).join("");
  const err = events.filter((e) => e.type === "stderr").map((e) => text(e.data)).join("");
  assert.equal(out, "a\n");
  assert.equal(err, "b\n");
  assert.ok(events.every((e) => e.type === "started" || e.type === "result" || e.data.length > 0), "no empty output events");
});

test("an allow-listed run's network is followed as it happens", async () => {
  const netHost = process.env.SANDBOXD_TEST_NET_HOST;
  const host = netHost.split(":")[0];
  const code = `import urllib.request; print(urllib.request.urlopen('http://${netHost}/', timeout=10).read().decode())`;
  const events = [];
  for await (const ev of client.streamCode(code, { network: [netHost] })) events.push(ev);
  const res = events.at(-1).result;
  assert.equal(res.status, "OK", res.message);
  const heard = events.filter((e) => e.type === "network").map((e) => e.event);
  assert.ok(heard.some((e) => e.kind === "connect" && e.name === host && e.allowed), JSON.stringify(heard));
  assert.ok(res.networkConnections >= 1 && res.networkBytesIn > 0);
  const info = await client.getRun(res.runId);
  assert.deepEqual(info.network.map((e) => e.index), [...info.network.keys()]);
  assert.ok(info.network.some((e) => e.name === host && e.bytesIn > 0), JSON.stringify(info.network));
});

test("a session's network changes while it lives", async () => {
  const netHost = process.env.SANDBOXD_TEST_NET_HOST;
  const fetch = `
try:
    import urllib.request
    print(urllib.request.urlopen('http://${netHost}/', timeout=10).read().decode())
except Exception as e:
    print("refused:", type(e).__name__)
`;
  const text = (res) => Buffer.from(res.stdout).toString().trim();
  const s = await client.session({ language: "python", network: [netHost] });
  try {
    assert.deepEqual(s.info.networkRules, [netHost]);
    assert.equal(text(await s.run(fetch)), "hello from net.test");
    const info = await s.setNetwork("none");
    assert.deepEqual(info.networkRules, []);
    assert.match(text(await s.run(fetch)), /^refused:/);
    assert.deepEqual((await s.setNetwork([netHost])).networkRules, [netHost]);
    assert.equal(text(await s.run(fetch)), "hello from net.test");
    await assert.rejects(s.setNetwork(["evil.test:443"]), (e) => e instanceof sd.PermissionDenied && /evil\.test/.test(e.message));
    // The test daemon's backend cannot checkpoint: the refusal says so, and the session goes on.
    await assert.rejects(s.pause(), (e) => e instanceof sd.FailedPrecondition && /paused/.test(e.message));
    assert.equal(text(await s.run(fetch)), "hello from net.test");
  } finally {
    await s.delete();
  }
});

test("a bad request names its field", async () => {
  await assert.rejects(client.runCode("x", { language: "cobol" }), (e) => e instanceof sd.InvalidArgument && e.field === "language");
  await assert.rejects(client.runCode("x", { files: { "../x": "y" } }), (e) => e.field === "files[0].path");
  await assert.rejects(client.runCode("x", { limits: { memory: 1 } }), /limits: no such limit "memory" \(did you mean "memoryBytes"\?\); limits are memoryBytes, /);
  await assert.rejects(client.getRun("0123456789abcdef01234567"), sd.NotFound);
});

test("a session keeps variables, draws charts, holds files, forks", async () => {
  const s = await client.session({ language: "python" });
  try {
    await s.run("x = 41");
    const res = await s.run("x + 1");
    assert.equal(res.value, "42");
    assert.equal(res.session.seq, 2);
    const chart = await s.run("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()");
    assert.equal(chart.displays.length, 1);
    const png = await chart.displays[0].png();
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    const err = await s.run("1 / 0");
    assert.equal(err.status, "NONZERO_EXIT");
    assert.equal(err.error.name, "ZeroDivisionError");

    const info = await s.files.write("data/in.txt", "some text\n");
    assert.equal(info.size, 10);
    assert.equal(text(await s.files.read("data/in.txt")), "some text\n");
    assert.ok((await s.files.list("data")).some((f) => f.path === "data/in.txt"));

    // What `await using fork = await s.fork()` calls at the block's end (Node 20 lacks the syntax).
    const fork = await s.fork();
    try {
      assert.notEqual(fork.id, s.id);
      assert.equal((await fork.run("x")).value, "41");
    } finally {
      await fork[Symbol.asyncDispose]();
    }
    assert.equal((await client.getSession(fork.id)).info.state, "DELETED");
  } finally {
    await s.delete();
  }
  assert.equal((await client.getSession(s.id)).info.state, "DELETED");
});

test("a detached run is followed from offsets and cancelled", async () => {
  const handle = await client.runCode("import time\nprint('one', flush=True)\ntime.sleep(0.5)\nprint('two')", { detach: true });
  assert.equal(handle.runId, handle.started.runId);
  const res = await handle.wait();
  assert.equal(res.text(), "one\ntwo\n");
  let tail = "";
  for await (const ev of handle.attach({ stdout: 4 })) if (ev.type === "stdout") tail += text(ev.data);
  assert.equal(tail, "two\n");
  const long = await client.runCode("import time; time.sleep(60)", { detach: true });
  await long.cancel();
  assert.equal((await long.wait()).status, "CANCELLED");
});

test("an aborted call cancels its run", async () => {
  const ac = new AbortController();
  const run = client.runCode("import time; print('up', flush=True); time.sleep(60)", {
    signal: ac.signal,
    onStdout: () => ac.abort(),
  });
  await assert.rejects(run, sd.Cancelled);
  // The daemon's one slot is free again: the run was cancelled, not left.
  const [last] = await client.listRuns();
  const info = await client.waitRun(last.runId);
  assert.equal(info.result.status, "CANCELLED");
});

test("a busy refusal carries its details and is retried", async () => {
  const hold = await client.runCode("import time; time.sleep(60)", { detach: true });
  try {
    const impatient = new sd.Client({ retryWithinMs: 0 });
    let refusal;
    try {
      await impatient.runCode("print(1)");
    } catch (e) {
      refusal = e;
    } finally {
      impatient.close();
    }
    assert.ok(refusal instanceof sd.ResourceExhausted, String(refusal));
    assert.ok(refusal.retryDelayMs > 0);
    assert.equal(refusal.quota[0].subject, "sandboxd");
    assert.match(refusal.quota[0].description, /^max-queued/);

    setTimeout(() => hold.cancel(), refusal.retryDelayMs / 2);
    const patient = new sd.Client({ retryWithinMs: 30_000 });
    try {
      assert.equal((await patient.runCode("print(1)")).text(), "1\n");
    } finally {
      patient.close();
    }
  } finally {
    await hold.cancel();
  }
});

test("a program calls the caller's own tools", async () => {
  const deleted = [];
  const asked = [];
  const tools = [
    {
      name: "add",
      description: "Adds two integers.",
      inputSchema: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, required: ["a", "b"] },
      risk: "read",
      handler: async ({ a, b }) => a + b,
    },
    {
      name: "remove",
      description: "Deletes a record.",
      inputSchema: { type: "object", properties: { record: { type: "string" } }, required: ["record"] },
      risk: "high",
      handler: ({ record }, call) => {
        deleted.push([record, call.idempotencyKey.length]);
        return { deleted: record };
      },
    },
    { name: "fails", handler: () => { throw new Error("on purpose"); } },
  ];
  const code = [
    "from sandboxd import tools",
    "print(tools.caller.add(a=2, b=40))",
    "print(tools.caller.remove(record='r1')['deleted'])",
    "try:",
    "    tools.caller.remove(record='r2')",
    "except tools.Declined as e:",
    "    print('declined')",
    "try:",
    "    tools.caller.fails()",
    "except tools.ToolFailed as e:",
    "    print(e.message)",
  ].join("\n");
  const res = await client.runCode(code, {
    tools,
    confirm: async (tool, args) => {
      asked.push(`${tool} ${args.record}`);
      return args.record === "r1";
    },
  });
  assert.equal(res.status, "OK", res.stderr.text());
  assert.equal(res.text(), "42\nr1\ndeclined\nError: on purpose\n");
  assert.equal(res.toolCalls, 4);
  assert.deepEqual(deleted, [["r1", 32]]);
  assert.deepEqual(asked, ["caller.remove r1", "caller.remove r2"]);
  // Without confirm, a high-risk call is refused, never asked.
  const refused = await client.runCode("from sandboxd import tools\ntry:\n    tools.caller.remove(record='r3')\nexcept tools.NeedsConfirmation:\n    print('no one asked')", { tools });
  assert.equal(refused.text(), "no one asked\n");
  await assert.rejects(client.runCode("print(1)", { tools: [{ name: "x", risk: "extreme", handler: () => 1 }] }), /risk "extreme"/);
});

test("a session's kernel calls the caller's tools, each call its own", async () => {
  const s = await client.session({ language: "python" });
  try {
    const double = { name: "double", inputSchema: { type: "object", properties: { n: { type: "integer" } } }, handler: ({ n }) => 2 * n };
    const first = await s.run("from sandboxd import tools\nx = tools.caller.double(n=21)\nprint(x)", { tools: [double] });
    assert.equal(first.text(), "42\n", first.stderr.text());
    assert.equal(first.toolCalls, 1);
    // The next call names no tools: the kernel keeps x, and is refused.
    const next = await s.run("try:\n    tools.call('caller.double', {'n': 1})\nexcept tools.Refused:\n    print('refused', x)");
    assert.equal(next.text(), "refused 42\n", next.stderr.text());
  } finally {
    await s.delete();
  }
});

test("TCP with a token from a file that ends in a newline", async () => {
  const addr = process.env.SANDBOXD_TEST_TCP_ADDR;
  const c = new sd.Client({ addr, tokenFile: process.env.SANDBOXD_TEST_TOKEN_FILE });
  try {
    assert.equal((await c.runCode("print('over tcp')")).text(), "over tcp\n");
  } finally {
    c.close();
  }
  const anonymous = new sd.Client({ addr, token: "" });
  try {
    await assert.rejects(anonymous.runCode("print(1)"), sd.Unauthenticated);
  } finally {
    anonymous.close();
  }
  assert.throws(() => new sd.Client({ addr: "/run/x.sock", tlsCa: "/nonexistent" }), /the socket needs no TLS/);
});

test("a bundle that was changed does not verify", async () => {
  const res = await client.runCode("print('kept')");
  const data = await client.getBundle(res.bundleDigest);
  assert.equal(text(sd.verifyBundle(data, res.bundleDigest).entries.get("stdout")), "kept\n");
  assert.throws(() => sd.verifyBundle(data, "sha256:" + "0".repeat(64)), /digest/);
  assert.throws(() => sd.verifyBundle(data.subarray(0, data.length - 8)), sd.BundleInvalid);
});

test("a call another daemon holds is made there once", async () => {
  // A front daemon answers every run with the ELSEWHERE redirect to the
  // real daemon's TCP address; the client calls there, with its token, once.
  const gen = await import(pathToFileURL(dir + "/dist/gen/sandboxd/v1/sandboxd.js").href);
  const rpc = await import(pathToFileURL(dir + "/dist/gen/sandboxd/rpc/error_details.js").href);
  const status = await import(pathToFileURL(dir + "/dist/gen/sandboxd/rpc/status.js").href);
  const addr = process.env.SANDBOXD_TEST_TCP_ADDR;
  const calls = [];
  const server = new grpc.Server();
  server.addService(gen.SandboxServiceService, {
    runCode(call) {
      calls.push(call.metadata.get("authorization")[0]);
      const info = rpc.ErrorInfo.encode({ reason: "ELSEWHERE", domain: "sandboxd.dev", metadata: { address: addr, daemon: "real", kind: "run", id: "x" } }).finish();
      const st = status.Status.encode({
        code: grpc.status.FAILED_PRECONDITION,
        message: "held by real",
        details: [{ typeUrl: "type.googleapis.com/google.rpc.ErrorInfo", value: info }],
      }).finish();
      const md = new grpc.Metadata();
      md.set("grpc-status-details-bin", Buffer.from(st));
      call.emit("error", { code: grpc.status.FAILED_PRECONDITION, details: "held by real", metadata: md });
    },
  });
  const port = await new Promise((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  const c = new sd.Client({ addr: `127.0.0.1:${port}`, tokenFile: process.env.SANDBOXD_TEST_TOKEN_FILE });
  try {
    assert.equal((await c.runCode("print('moved')")).text(), "moved\n");
    assert.equal(calls.length, 1);
    assert.match(calls[0], /^Bearer /);
  } finally {
    c.close();
    server.forceShutdown();
  }
});

const SUM = "a, b = map(int, input().split())\nprint(a + b)";

test("evaluate gives each case its verdict", async () => {
  const j = await client.evaluate(SUM, [
    { stdin: "1 2\n", expected: "3\n", name: "small" },
    { stdin: "2 2", expected: "5", name: "wrong" },
  ]);
  assert.equal(j.verdict, "WRONG_ANSWER");
  assert.deepEqual([j.passed, j.total, j.firstFailing, j.score, j.accepted], [1, 2, 1, 0.5, false]);
  assert.deepEqual(j.cases.map((c) => c.verdict), ["ACCEPTED", "WRONG_ANSWER"]);
  assert.equal(j.cases[1].message, 'line 1: expected "5", got "4"');
  assert.equal(text(j.cases[0].stdout), "3\n");
  assert.equal(j.isolation, "fresh");
  assert.match(j.bundleDigest, /^sha256:/);
});

test("evaluateMany reports progress and keeps errors in place", async () => {
  const seen = [];
  const out = await client.evaluateMany(
    [
      { code: SUM, cases: [{ stdin: "1 1", expected: "2" }], id: "right" },
      { code: SUM, cases: [{ stdin: "1 1" }], id: "no expected" },
      { code: "def add(a, b):\n    return a + b", cases: [{ test: "assert add(1, 2) == 3" }], isolation: "shared" },
    ],
    { progress: (done, total) => seen.push([done, total]) },
  );
  assert.equal(out[0].verdict, "ACCEPTED");
  assert.ok(out[1] instanceof sd.InvalidArgument);
  assert.equal(out[1].field, "cases[0].expected_stdout");
  assert.equal(out[2].verdict, "ACCEPTED");
  assert.equal(out[2].isolation, "shared");
  assert.deepEqual(seen.at(-1), [3, 3]);
});

test("a session's background process, its terminal and a port", async () => {
  const s = await client.session({ language: "python" });
  try {
    const echo = await s.start({ shell: "read line; echo got $line" });
    await echo.write("one\n", true);
    assert.equal((await echo.wait()).exitCode, 0);
    assert.equal(text((await echo.read()).stdout), "got one\n");

    const repl = await s.start(["python3", "-i", "-q"], { terminal: [24, 80] });
    const att = repl.attach();
    att.write("6 * 7\r");
    att.write("exit(3)\r");
    let seen = "";
    for await (const { data } of att) seen += text(data);
    assert.match(seen, /42/);
    assert.equal(att.exited.exitCode, 3);

    await s.files.write("index.html", "<p>served</p>\n");
    await s.start(["python3", "-m", "http.server", "--bind", "127.0.0.1", "8000"]);
    const port = await s.openPort(8000);
    const url = new URL(port.url);
    assert.equal(url.hostname, port.token + ".localhost");
    let status = 0;
    let body = "";
    for (let i = 0; i < 300 && status !== 200; i++) {
      // *.localhost is the loopback: ask it with the URL's Host.
      [status, body] = await new Promise((resolve, reject) => {
        import("node:http").then(({ request }) => {
          const req = request({ host: "127.0.0.1", port: url.port, path: "/index.html", headers: { host: url.host } }, (res) => {
            let b = "";
            res.on("data", (d) => (b += d));
            res.on("end", () => resolve([res.statusCode, b]));
          });
          req.on("error", reject);
          req.end();
        });
      });
      if (status !== 200) await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(status, 200);
    assert.equal(body, "<p>served</p>\n");
    assert.deepEqual((await s.processes()).map((p) => p.processId), ["p1", "p2", "p3"]);
  } finally {
    await s.delete();
  }
});

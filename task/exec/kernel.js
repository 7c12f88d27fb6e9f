// sandboxd's JavaScript kernel: the global context of one Node.js process
// that runs a session's calls, as Node's own REPL keeps its variables.
//
// sandboxd-init starts it (node -e) as the task's user, writes one JSON
// request line per call on fd 4, {"code": ...}, and reads one JSON reply
// line on fd 5 (fd 3 is the code's tool channel, docs/tools.md). The code's output goes to stdout and stderr as it is
// written (both are synchronous on Linux pipes), before the reply. A
// promise the code ends with is awaited. SIGINT, at the call's timeout,
// stops the running code and keeps the kernel.
"use strict";
const fs = require("fs");
const net = require("net");
const readline = require("readline");
const util = require("util");
const vm = require("vm");

// The channel. Node.js cannot mark a file descriptor close-on-exec (nor
// reopen a pipe of root's), so a program the code starts inherits it,
// where Python's kernel closes it: that gives the code nothing it has not
// (it runs in this process, and sandboxd reads a reply as the code's).
const requests = 4;
const replies = 5;

// Bounds on what one reply carries; sandboxd caps the whole reply at 1 MiB.
const TEXT_LIMIT = 64 << 10;
const clip = (s) => (s.length > TEXT_LIMIT ? s.slice(0, TEXT_LIMIT) + "\n[truncated]" : s);

// What the REPL gives code besides the globals.
globalThis.require = require;

// An interrupt between calls, or while a promise is awaited, stops nothing
// but the wait; during the code, breakOnSigint stops it.
let interrupted = () => {};
process.on("SIGINT", () => interrupted());

// What the code left running fails on its own: reported, and the kernel
// (the session's state) lives on.
const report = (what) => (e) => process.stderr.write(`${what}: ${(e && e.stack) || util.inspect(e)}\n`);
process.on("uncaughtException", report("uncaught exception"));
process.on("unhandledRejection", report("unhandled rejection"));

let count = 0;

async function execute(code) {
  count++;
  const reply = { status: "ok", execution_count: count };
  try {
    let value = vm.runInThisContext(code, { filename: `<call ${count}>`, breakOnSigint: true });
    if (value !== null && typeof value === "object" && typeof value.then === "function") {
      value = await new Promise((resolve, reject) => {
        interrupted = () => reject(new Error("Script execution interrupted."));
        value.then(resolve, reject);
      }).finally(() => {
        interrupted = () => {};
      });
    }
    if (value !== undefined) {
      reply.result = { "text/plain": clip(util.inspect(value)) };
    }
  } catch (e) {
    const err = e instanceof Error ? e : new Error(util.inspect(e));
    // The code's frames, without the kernel's below them.
    const frames = String(err.stack || err).split("\n");
    const end = frames.findIndex((f) => f.includes("node:vm:"));
    const trace = clip((end < 0 ? frames : frames.slice(0, end)).join("\n"));
    reply.status = "error";
    reply.error = { name: err.name || "Error", value: clip(String(err.message)), traceback: [trace] };
    process.stderr.write(trace + "\n");
  }
  fs.writeSync(replies, JSON.stringify(reply) + "\n");
}

(async () => {
  // Read on the event loop: a file stream's read waits in libuv's thread
  // pool, and holds up process.exit() in the code until a request comes.
  const input = new net.Socket({ fd: requests, readable: true, writable: false });
  const lines = readline.createInterface({ input, crlfDelay: Infinity });
  for await (const line of lines) {
    await execute(JSON.parse(line).code);
  }
  process.exit(0);
})();

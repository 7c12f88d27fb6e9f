"use strict";
// The tools this run may call, through the sandbox's own channel, never the
// network (see docs/tools.md):
//
//   const { tools } = require("sandboxd");
//   console.log(await tools.list());                  // [{name, description, risk}, ...]
//   console.log(await tools.describe("orders.search")); // its JSON Schema
//   const hits = await tools.orders.search({ query: "lamp" });
//   await tools.call("orders.search", { query: "lamp" });
//
// A call that does not return a result rejects with a ToolError whose kind
// says why: Refused, InvalidArguments (.field), NeedsConfirmation, Declined,
// ToolFailed, TimedOut, LimitReached.
const net = require("net");

class ToolError extends Error {
  constructor(kind, message, tool, field) {
    super(message);
    this.kind = kind;
    this.tool = tool;
    this.field = field;
  }
}
const errors = { ToolError };
for (const [kind, name] of [
  ["refused", "Refused"],
  ["invalid_arguments", "InvalidArguments"],
  ["needs_confirmation", "NeedsConfirmation"],
  ["declined", "Declined"],
  ["failed", "ToolFailed"],
  ["timed_out", "TimedOut"],
  ["limit", "LimitReached"],
]) {
  errors[name] = { [name]: class extends ToolError {} }[name];
  errors[name].kind = kind;
  Object.defineProperty(errors[name].prototype, "name", { value: name });
}
const byKind = Object.fromEntries(Object.values(errors).filter((c) => c.kind).map((c) => [c.kind, c]));

let channel;

// The channel: requests a line each, answers matched by id. The socket
// does not keep the program alive while no call waits.
function open() {
  if (channel) return channel;
  const fd = process.env.SANDBOXD_TOOLS_FD;
  if (!fd) throw new Error("this run has no tool channel: the request names the tools it may call (options.tools)");
  const socket = new net.Socket({ fd: Number(fd), readable: true, writable: true });
  socket.setEncoding("utf8");
  socket.unref();
  const pending = new Map();
  let next = 0;
  let buffered = "";
  const fail = (err) => {
    for (const p of pending.values()) p.reject(err);
    pending.clear();
  };
  socket.on("data", (chunk) => {
    buffered += chunk;
    for (let i; (i = buffered.indexOf("\n")) >= 0; ) {
      const answer = JSON.parse(buffered.slice(0, i));
      buffered = buffered.slice(i + 1);
      // An answer without an id (a request the daemon could not read)
      // is the oldest's.
      const id = answer.id ?? pending.keys().next().value;
      const p = pending.get(id);
      if (!p) continue;
      pending.delete(id);
      if (pending.size === 0) socket.unref();
      const e = answer.error;
      if (e) p.reject(new (byKind[e.kind] ?? ToolError)(e.kind, e.message, p.tool, e.field));
      else p.resolve(answer);
    }
  });
  socket.on("error", fail);
  socket.on("close", () => fail(new ToolError("closed", "the tool channel closed")));
  channel = {
    ask(request) {
      return new Promise((resolve, reject) => {
        const id = ++next;
        pending.set(id, { resolve, reject, tool: request.tool });
        socket.ref();
        socket.write(JSON.stringify({ ...request, id }) + "\n");
      });
    },
  };
  return channel;
}

/** The tools this run may call: name, one-line description and risk. */
async function list() {
  return (await open().ask({ op: "list" })).tools ?? [];
}

/** A tool's name, description, risk and the JSON Schema of its arguments. */
async function describe(name) {
  return (await open().ask({ op: "describe", tool: name })).tool;
}

/** Calls the tool name with args and returns its result. */
async function call(name, args = {}) {
  return (await open().ask({ op: "call", tool: name, arguments: args })).result;
}

// tools.PROVIDER.TOOL(args): the daemon's registry says which exist.
function provider(prefix) {
  return new Proxy(
    {},
    {
      get(_, name) {
        if (typeof name !== "string" || name === "then") return undefined;
        const f = (args) => call(`${prefix}.${name}`, args);
        f.describe = () => describe(`${prefix}.${name}`);
        return f;
      },
    },
  );
}

const tools = new Proxy(
  { list, describe, call, ...errors },
  {
    get(target, name) {
      if (name in target || typeof name !== "string" || name === "then") return target[name];
      return provider(name);
    },
  },
);

module.exports = { tools, ...errors };

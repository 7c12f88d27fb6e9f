// The client: runs, streams, detached runs, sessions, files and bundles over
// one gRPC channel (@grpc/grpc-js), with the retry policy every sandboxd
// client shares.

import { readFileSync } from "node:fs";
import { resolve as resolvePath } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { ChannelCredentials, Metadata, type ClientDuplexStream, type ClientOptions, type ClientReadableStream } from "@grpc/grpc-js";

import { verifyBundle, type Bundle } from "./bundle.js";
import { Batch, checkLimitNames, submissionOf, type CaseSpec, type Judgement, type Outcome, type Progress, type SubmissionSpec } from "./judge.js";
import { fromServiceError, ResourceExhausted, RunFailed, Unavailable, type SandboxdError } from "./errors.js";
import { port, Process, processInfo, type Port, type ProcessInfo } from "./process.js";
import {
  Interpreter,
  NetworkMode,
  RunState as PbRunState,
  SandboxServiceClient,
  SessionState as PbSessionState,
  Status as PbStatus,
  ToolRisk,
  type GetRunResponse,
  type ListImagesResponse,
  type Limits as PbLimits,
  type Network as PbNetwork,
  type NetworkEvent as PbNetworkEvent,
  type Result as PbResult,
  type RunCodeRequest,
  type RunCommandRequest,
  type RunEvent,
  type RunOptions as PbRunOptions,
  type RunWithToolsEvent,
  type RunWithToolsRequest,
  type ToolCall,
  type ToolSpec,
  type AttachProcessEvent,
  type AttachProcessRequest,
  type EvaluateEvent,
  type EvaluateRequest,
  type ListPortsResponse,
  type ListProcessesResponse,
  type PortInfo,
  type ProcessInfo as PbProcessInfo,
  type SessionInfo as PbSessionInfo,
  type Started as PbStarted,
  type UploadFileRequest,
} from "./gen/sandboxd/v1/sandboxd.js";
import type { Duration } from "./gen/google/protobuf/duration.js";

/** The daemon's socket when neither an address nor SANDBOXD_ADDR is given. */
export const DEFAULT_SOCKET = "/run/sandboxd/sandboxd.sock";
/** How long refused calls are retried by default, as the CLI does. */
export const DEFAULT_RETRY_WITHIN_MS = 60_000;
const FOLLOWED_HEADER = "sandboxd-followed";
const CHUNK = 1 << 20;

/** A stream's bytes as the program wrote them; text() decodes them. */
export class Output extends Uint8Array {
  text(): string {
    return new TextDecoder().decode(this);
  }
}

export type Status =
  | "OK"
  | "NONZERO_EXIT"
  | "TIMEOUT"
  | "OOM_KILLED"
  | "OUTPUT_LIMIT"
  | "CANCELLED"
  | "KILLED_BY_SIGNAL"
  | "RUNTIME_ERROR"
  | "KERNEL_DIED"
  | "LOST"
  | "COMPILE_ERROR"
  | "STATUS_UNSPECIFIED";

/** A run's limits; in a request, unset fields are the daemon's defaults. */
export interface Limits {
  memoryBytes: number;
  cpuMillis: number;
  pids: number;
  timeoutMs: number;
  stdoutBytes: number;
  stderrBytes: number;
  diskBytes: number;
}

export interface Started {
  runId: string;
  limits: Limits;
  image: string;
  imageDigest: string;
  runtime: string;
  runtimeVersion: string;
  backend: string;
  startedAt?: Date;
  prestarted: boolean;
  preimported: string[];
}

export interface OutputFile {
  path: string;
  type: string;
  size: number;
  sha256: string;
  omitted: string;
}

/** What a session's code displayed; png() fetches a chart's bytes. */
export interface Display {
  data: Record<string, string>;
  /** MIME type -> path of the file in the call's bundle. */
  files: Record<string, string>;
  /** The display's bytes of one MIME type (a PNG by default). */
  bytes(mime?: string): Promise<Uint8Array | undefined>;
  png(): Promise<Uint8Array | undefined>;
}

export interface KernelError {
  name: string;
  value: string;
  traceback: string[];
}

/** How a run ended, with all it wrote (up to its byte caps). */
export interface Result {
  runId: string;
  status: Status;
  /** Always a number: 0 for a program that exited 0. */
  exitCode: number;
  signal: number;
  message: string;
  stdout: Output;
  stderr: Output;
  stdoutTotal: number;
  stderrTotal: number;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  durationMs: number;
  queuedMs: number;
  peakMemoryBytes: number;
  limits: Limits;
  outputs: OutputFile[];
  bundleDigest: string;
  bundleError: string;
  reproducibleDigest: string;
  start: string;
  coldReason: string;
  tenant: string;
  networkConnections: number;
  networkDenied: number;
  /** Bytes the program sent and received through the egress gateway. */
  networkBytesOut: number;
  networkBytesIn: number;
  /** How many tools the program called. */
  toolCalls: number;
  started?: Started;
  session?: { sessionId: string; seq: number; parentBundle: string; workspaceBefore: string; workspaceAfter: string };
  /** A session call's last value by MIME type; `value` is its text/plain. */
  values: Record<string, string>;
  value?: string;
  displays: Display[];
  error?: KernelError;
  executionCount: number;
  /** The program ran and exited 0. */
  ok: boolean;
  /** stdout as text. */
  text(): string;
  /** Throws RunFailed unless the run is OK; returns the result. */
  raiseForStatus(): Result;
}

/**
 * A decision of the egress gateway for an allow-listed run, as it now
 * stands: streamed when it is made, and again with the same `index` when
 * its connection ends (its bytes) or is cut.
 */
export interface NetworkEvent {
  index: number;
  time?: Date;
  /** "dns" or "connect". */
  kind: string;
  name: string;
  /** Where the name came from: dns, connect, http, sni, host or address. */
  via: string;
  port: number;
  addr: string;
  allowed: boolean;
  rule: string;
  reason: string;
  bytesOut: number;
  bytesIn: number;
  /** The operator's secrets the gateway added to the connection's requests (names, never values). */
  secrets: string[];
  /** How many requests got a secret, and how many times a response carried one back, masked. */
  injections: number;
  masked: number;
}

function networkEventOf(e: PbNetworkEvent): NetworkEvent {
  return {
    index: e.index,
    time: e.time,
    kind: e.kind,
    name: e.name,
    via: e.via,
    port: e.port,
    addr: e.addr,
    allowed: e.allowed,
    rule: e.rule,
    reason: e.reason,
    bytesOut: e.bytesOut,
    bytesIn: e.bytesIn,
    secrets: e.secrets,
    injections: e.injections,
    masked: e.masked,
  };
}

export type Event =
  | { type: "started"; started: Started }
  | { type: "stdout"; data: Uint8Array }
  | { type: "stderr"; data: Uint8Array }
  | { type: "network"; event: NetworkEvent }
  | { type: "result"; result: Result };

export type RunState = "RUNNING" | "FINISHED" | "RUN_STATE_UNSPECIFIED";

export interface RunInfo {
  runId: string;
  state: RunState;
  started?: Started;
  result?: Result;
  labels: Record<string, string>;
  error: string;
  tenant: string;
  /** An allow-listed run's network log (getRun, waitRun): so far while it runs, all of it once it has ended. */
  network: NetworkEvent[];
}

export interface SessionInfo {
  sessionId: string;
  state: "ACTIVE" | "PAUSED" | "DELETED" | "EXPIRED" | "FAILED" | "LOST" | "SESSION_STATE_UNSPECIFIED";
  reason: string;
  language: string;
  image: string;
  imageDigest: string;
  runtime: string;
  limits: Limits;
  labels: Record<string, string>;
  createdAt?: Date;
  expiresAt?: Date;
  idleExpiresAt?: Date;
  calls: number;
  lastBundle: string;
  tenant: string;
  /** The rules in force ("host:ports" or "cidr:ports"): the session's own, or what setNetwork changed them to. */
  networkRules: string[];
  /** The secrets the gateway adds to the session's HTTPS requests. */
  networkSecrets: string[];
}

/** What the daemon offers: languages (name -> image), images, runtimes, limits. */
export interface Inventory {
  languages: Record<string, string>;
  images: { name: string; digest: string; present: boolean; recipeDigest: string }[];
  runtimes: string[];
  defaultRuntime: string;
  backend: string;
  defaultLimits: Limits;
  maxLimits: Limits;
  /** The operator's tools the caller may let programs call. */
  tools: { name: string; description: string; risk: "read" | "write" | "high"; inputSchema: Record<string, unknown> }[];
}

export interface FileInfo {
  path: string;
  type: string;
  size: number;
  sha256: string;
}

/** A file placed under /input before the program starts. */
export interface FileSpec {
  path: string;
  content: string | Uint8Array;
  executable?: boolean;
}

/** Egress to an allow-list: the operator's policy, rules of its own, caps. */
export interface NetworkSpec {
  policy?: string;
  allow?: { host?: string; cidr?: string; ports?: number[] }[];
  bytesOut?: number;
  bytesIn?: number;
  connections?: number;
  /** The operator's secrets the gateway adds to the run's HTTPS requests; the program holds placeholders. */
  secrets?: string[];
}

/** One of the caller's own tools: the program calls it as tools.caller.NAME. */
export interface Tool {
  /** Letters, digits and _, not starting with a digit. */
  name: string;
  /** What it does; its first line is what the program's listing shows. */
  description?: string;
  /** The JSON Schema of its arguments; the daemon checks every call against it. */
  inputSchema?: Record<string, unknown>;
  /** "read", "write" (the default) or "high": a high-risk call waits for confirm. */
  risk?: "read" | "write" | "high";
  /** Runs the tool; what it returns (JSON) is the result, what it throws fails the call. */
  handler: (args: any, call: { idempotencyKey: string }) => unknown | Promise<unknown>;
}

/** What a run takes besides its code or command. */
export interface RunOptions {
  image?: string;
  runtime?: string;
  limits?: Partial<Limits>;
  /** The run's time limit, in milliseconds. */
  timeoutMs?: number;
  /** "none" (the default), an operator's policy name, ["host:port", ...], or a NetworkSpec. */
  network?: "none" | string | string[] | NetworkSpec;
  /** Files under /input: {path: content} or FileSpecs. */
  files?: Record<string, string | Uint8Array> | FileSpec[];
  mounts?: string[];
  env?: Record<string, string>;
  stdin?: string | Uint8Array;
  workdir?: string;
  labels?: Record<string, string>;
  seed?: number;
  interpreter?: "fresh" | "prestarted";
  idempotencyKey?: string;
  /**
   * What the program may call with `from sandboxd import tools`: names of the
   * operator's tools ("orders.search", "orders.*") and the caller's own Tools,
   * which it calls as tools.caller.NAME and which run here (docs/tools.md).
   */
  tools?: (string | Tool)[];
  /** Answers whether a high-risk call may go on; without it they are refused. */
  confirm?: (tool: string, args: Record<string, unknown>) => boolean | Promise<boolean>;
  /** Output as it comes. */
  onStdout?: (data: Uint8Array) => void;
  onStderr?: (data: Uint8Array) => void;
  /** Aborting cancels the call, and the daemon cancels the run. */
  signal?: AbortSignal;
}

export interface ClientOptionsSpec {
  /** A unix socket path (or unix:PATH), or HOST:PORT; default SANDBOXD_ADDR, then the socket. */
  addr?: string;
  /** The bearer token (default SANDBOXD_TOKEN). */
  token?: string;
  /** A file holding it (default SANDBOXD_TOKEN_FILE); a trailing newline is fine. */
  tokenFile?: string;
  /** PEM files: the CA to trust, and a client certificate and its key (mutual TLS). */
  tlsCa?: string;
  tlsCert?: string;
  tlsKey?: string;
  /** How long refusals that name a delay are retried (0: not at all). */
  retryWithinMs?: number;
}

function limitsOf(l: PbLimits | undefined): Limits {
  return {
    memoryBytes: l?.memoryBytes ?? 0,
    cpuMillis: l?.cpuMillis ?? 0,
    pids: l?.pids ?? 0,
    timeoutMs: l?.timeoutMs ?? 0,
    stdoutBytes: l?.stdoutBytes ?? 0,
    stderrBytes: l?.stderrBytes ?? 0,
    diskBytes: l?.diskBytes ?? 0,
  };
}

function ms(d: Duration | undefined): number {
  return d ? d.seconds * 1000 + d.nanos / 1e6 : 0;
}

function startedOf(s: PbStarted): Started {
  return {
    runId: s.runId,
    limits: limitsOf(s.limits),
    image: s.image,
    imageDigest: s.imageDigest,
    runtime: s.runtime,
    runtimeVersion: s.runtimeVersion,
    backend: s.backend,
    startedAt: s.startedAt,
    prestarted: s.prestarted,
    preimported: s.preimported,
  };
}

function concat(chunks: Uint8Array[]): Output {
  const out = new Output(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

function encode(s: string | Uint8Array): Uint8Array {
  return typeof s === "string" ? new TextEncoder().encode(s) : s;
}

export class Client {
  private readonly target: string;
  private readonly credentials: ChannelCredentials;
  private readonly token?: string;
  private readonly serverName?: string;
  private readonly stub: SandboxServiceClient;
  private readonly peers = new Map<string, SandboxServiceClient>();
  /** How long refusals that name a delay are retried. */
  retryWithinMs: number;

  constructor(opts: ClientOptionsSpec = {}) {
    const env = process.env;
    const addr = opts.addr || env.SANDBOXD_ADDR || DEFAULT_SOCKET;
    let token = opts.token ?? env.SANDBOXD_TOKEN;
    const tokenFile = opts.tokenFile ?? env.SANDBOXD_TOKEN_FILE;
    if (token === undefined && tokenFile) token = readFileSync(tokenFile, "utf8");
    token = token?.trim();
    if (token && /\s/.test(token)) throw new TypeError("token: holds white space inside; a bearer token is one word");
    this.token = token || undefined;
    let tcp = false;
    if (addr.startsWith("unix:")) this.target = addr;
    else if (addr.startsWith("/") || addr.startsWith(".")) this.target = "unix:" + resolvePath(addr);
    else [this.target, tcp] = [addr, true];
    const ca = opts.tlsCa ?? env.SANDBOXD_TLS_CA;
    const cert = opts.tlsCert ?? env.SANDBOXD_TLS_CERT;
    const key = opts.tlsKey ?? env.SANDBOXD_TLS_KEY;
    if (ca || cert || key) {
      if (!tcp) throw new TypeError("tlsCa, tlsCert and tlsKey are for a TCP address: the socket needs no TLS");
      if (Boolean(cert) !== Boolean(key)) throw new TypeError("tlsCert and tlsKey go together: a client certificate needs its key");
      this.credentials = ChannelCredentials.createSsl(
        ca ? readFileSync(ca) : null,
        key ? readFileSync(key) : null,
        cert ? readFileSync(cert) : null,
      );
      this.serverName = this.target.slice(0, this.target.lastIndexOf(":")).replace(/^\[|\]$/g, "");
    } else {
      this.credentials = ChannelCredentials.createInsecure();
    }
    this.retryWithinMs = opts.retryWithinMs ?? DEFAULT_RETRY_WITHIN_MS;
    this.stub = this.dial(this.target, false);
  }

  private dial(target: string, peer: boolean): SandboxServiceClient {
    const options: ClientOptions = {
      "grpc.max_receive_message_length": 64 << 20,
      "grpc.max_send_message_length": 64 << 20,
    };
    if (peer && this.serverName) options["grpc.ssl_target_name_override"] = this.serverName;
    return new SandboxServiceClient(target, this.credentials, options);
  }

  /** Close the connections; open streams are cancelled. */
  close(): void {
    for (const p of this.peers.values()) p.close();
    this.peers.clear();
    this.stub.close();
  }

  /** `using client = new Client()` closes it at the end of the block, as close(). */
  [Symbol.dispose](): void {
    this.close();
  }

  private metadata(followed: boolean): Metadata {
    const md = new Metadata();
    if (this.token) md.set("authorization", "Bearer " + this.token);
    if (followed) md.set(FOLLOWED_HEADER, "1");
    return md;
  }

  private peer(address: string): SandboxServiceClient {
    let stub = this.peers.get(address);
    if (!stub) {
      stub = this.dial(address, true);
      this.peers.set(address, stub);
    }
    return stub;
  }

  // One call's retrying. A refusal with a delay (busy, draining) is made
  // again on the same daemon after it, stretched by up to a fifth at random,
  // until retryWithinMs from the first refusal; a call for what another
  // daemon holds is made once more there. A refusal comes before a run
  // starts: no run is made twice. again() answers where to call next, or
  // throws the error as the call's answer.
  private retrier(): (err: SandboxdError, stub: SandboxServiceClient, followed: boolean) => Promise<[SandboxServiceClient, boolean]> {
    let deadline: number | undefined;
    return async (err, stub, followed) => {
      const refused = (err instanceof ResourceExhausted || err instanceof Unavailable) && err.retryDelayMs !== undefined;
      if (refused && this.retryWithinMs > 0) {
        const now = Date.now();
        deadline ??= now + this.retryWithinMs;
        const wait = err.retryDelayMs! * (1 + Math.random() / 5);
        if (now + wait <= deadline) {
          await sleep(wait);
          return [stub, followed];
        }
      }
      if (err.redirect && !followed) return [this.peer(err.redirect.address), true];
      throw err;
    };
  }

  /** @internal */
  async unary<Req, Res>(method: string, request: Req): Promise<Res> {
    const again = this.retrier();
    let stub = this.stub;
    let followed = false;
    for (;;) {
      try {
        return await new Promise<Res>((resolve, reject) => {
          (stub as any)[method](request, this.metadata(followed), (err: unknown, res: Res) => (err ? reject(err) : resolve(res)));
        });
      } catch (e) {
        [stub, followed] = await again(fromServiceError(e), stub, followed);
      }
    }
  }

  /** @internal */
  async *stream<Req, Res>(method: string, request: Req, signal?: AbortSignal): AsyncGenerator<Res> {
    const again = this.retrier();
    let stub = this.stub;
    let followed = false;
    for (;;) {
      const call: ClientReadableStream<Res> = (stub as any)[method](request, this.metadata(followed));
      const abort = () => call.cancel();
      signal?.addEventListener("abort", abort);
      let received = false;
      let err: SandboxdError;
      try {
        for await (const message of call) {
          received = true;
          yield message as Res;
        }
        return;
      } catch (e) {
        err = fromServiceError(e);
      } finally {
        signal?.removeEventListener("abort", abort);
        // A caller that stops reading ends the call; the daemon cancels its run.
        call.cancel();
      }
      if (received) throw err;
      [stub, followed] = await again(err, stub, followed);
    }
  }

  private result(r: PbResult, stdout: Output, stderr: Output, started?: Started): Result {
    const digest = r.bundleDigest;
    const fetch = (path: string) => this.getFile(digest, path);
    const displays: Display[] = (r.kernel?.displays ?? []).map((d) => {
      const files = Object.fromEntries(d.files.map((f) => [f.mime, f.path]));
      const bytes = async (mime = "image/png") => {
        if (files[mime] && digest) return fetch(files[mime]);
        const v = d.data[mime];
        if (v === undefined) return undefined;
        return mime.startsWith("text/") ? encode(v) : new Uint8Array(Buffer.from(v, "base64"));
      };
      return { data: d.data, files, bytes, png: () => bytes("image/png") };
    });
    const k = r.kernel;
    const status = (PbStatus[r.status] ?? "STATUS_UNSPECIFIED") as Status;
    const res: Result = {
      runId: r.runId,
      status,
      exitCode: r.exitCode ?? 0,
      signal: r.signal ?? 0,
      message: r.message,
      stdout,
      stderr,
      stdoutTotal: r.stdoutTotal,
      stderrTotal: r.stderrTotal,
      stdoutTruncated: r.stdoutTruncated,
      stderrTruncated: r.stderrTruncated,
      durationMs: ms(r.duration),
      queuedMs: ms(r.queued),
      peakMemoryBytes: r.peakMemoryBytes,
      limits: limitsOf(r.limits),
      outputs: r.files.map((f) => ({ path: f.path, type: f.type, size: f.size, sha256: f.sha256, omitted: f.omitted })),
      bundleDigest: digest,
      bundleError: r.bundleError,
      reproducibleDigest: r.reproducibleDigest,
      start: r.start,
      coldReason: r.coldReason,
      tenant: r.tenant,
      networkConnections: r.networkConnections,
      networkDenied: r.networkDenied,
      networkBytesOut: r.networkBytesOut,
      networkBytesIn: r.networkBytesIn,
      toolCalls: r.toolCalls,
      started,
      session: r.session ? { ...r.session } : undefined,
      values: k?.result ?? {},
      value: k?.result["text/plain"],
      displays,
      error: k?.error ? { name: k.error.name, value: k.error.value, traceback: k.error.traceback } : undefined,
      executionCount: k?.executionCount ?? 0,
      ok: status === "OK",
      text: () => stdout.text(),
      raiseForStatus: () => {
        if (status !== "OK") throw new RunFailed(res);
        return res;
      },
    };
    return res;
  }

  /** @internal The events of a run's stream, with its Result last. */
  async *events(method: string, request: unknown, signal?: AbortSignal): AsyncGenerator<Event> {
    let started: Started | undefined;
    const stdout: Uint8Array[] = [];
    const stderr: Uint8Array[] = [];
    for await (const ev of this.stream<unknown, RunEvent>(method, request, signal)) {
      const e = ev.event;
      if (!e) continue;
      if (e.$case === "started") {
        started = startedOf(e.value);
        yield { type: "started", started };
      } else if (e.$case === "stdout") {
        stdout.push(e.value);
        yield { type: "stdout", data: e.value };
      } else if (e.$case === "stderr") {
        stderr.push(e.value);
        yield { type: "stderr", data: e.value };
      } else if (e.$case === "network") {
        yield { type: "network", event: networkEventOf(e.value) };
      } else if (e.$case === "result") {
        yield { type: "result", result: this.result(e.value, concat(stdout), concat(stderr), started) };
        return;
      }
    }
    throw new Unavailable(14, "the daemon ended the run's stream without a result");
  }

  /** @internal Not retried: what was typed cannot be typed again. */
  attachProcess(): ClientDuplexStream<AttachProcessRequest, AttachProcessEvent> {
    return this.stub.attachProcess(this.metadata(false));
  }

  /** @internal */
  async collect(events: AsyncIterable<Event>, opts: RunOptions = {}): Promise<Result> {
    for await (const ev of events) {
      if (ev.type === "stdout") opts.onStdout?.(ev.data);
      else if (ev.type === "stderr") opts.onStderr?.(ev.data);
      else if (ev.type === "result") return ev.result;
    }
    throw new Unavailable(14, "the daemon ended the run's stream without a result");
  }

  private async detach(method: string, request: unknown): Promise<RunHandle> {
    for await (const ev of this.stream<unknown, RunEvent>(method, request)) {
      if (ev.event?.$case === "started") return new RunHandle(this, ev.event.value.runId, startedOf(ev.event.value));
      // Ended without starting (a keyed retry of a LOST run).
      if (ev.event?.$case === "result") return new RunHandle(this, ev.event.value.runId);
    }
    throw new Unavailable(14, "the daemon answered a detached run without its start");
  }

  /** Run code in a fresh container. With {detach: true}, a RunHandle once it started. */
  runCode(code: string, opts: RunOptions & { language?: string; detach: true }): Promise<RunHandle>;
  runCode(code: string, opts?: RunOptions & { language?: string; detach?: false }): Promise<Result>;
  async runCode(code: string, opts: RunOptions & { language?: string; detach?: boolean } = {}): Promise<Result | RunHandle> {
    const request = { language: opts.language ?? "python", code, options: runOptions(opts, opts.detach) };
    if (answersTools(opts)) return this.withTools({ $case: "code", value: request }, opts);
    if (opts.detach) return this.detach("runCode", request);
    return this.collect(this.events("runCode", request, opts.signal), opts);
  }

  /** Run code, yielding its events as they come, the Result last. */
  streamCode(code: string, opts: RunOptions & { language?: string } = {}): AsyncGenerator<Event> {
    return this.events("runCode", { language: opts.language ?? "python", code, options: runOptions(opts) }, opts.signal);
  }

  /** Run a command: an argv, or {shell: "a line"}. */
  runCommand(command: string[] | { shell: string }, opts: RunOptions & { detach: true }): Promise<RunHandle>;
  runCommand(command: string[] | { shell: string }, opts?: RunOptions & { detach?: false }): Promise<Result>;
  async runCommand(command: string[] | { shell: string }, opts: RunOptions & { detach?: boolean } = {}): Promise<Result | RunHandle> {
    const request = commandRequest(command, runOptions(opts, opts.detach));
    if (answersTools(opts)) return this.withTools({ $case: "command", value: request }, opts);
    if (opts.detach) return this.detach("runCommand", request);
    return this.collect(this.events("runCommand", request, opts.signal), opts);
  }

  /**
   * Run on a RunWithTools stream: each call of one of the caller's tools runs
   * its handler, each confirmation asks opts.confirm, and the answers go back
   * on the stream as they are ready. Refusals before the run started are
   * retried as the other calls' are.
   */
  /** Judge code against cases: a verdict per case, each in a fresh sandbox (isolation "shared": all in one). Throws the error of a submission that cannot be judged. */
  async evaluate(code: string, cases: CaseSpec[], opts: Omit<SubmissionSpec, "code" | "cases"> = {}): Promise<Judgement> {
    const [out] = await this.evaluateMany([{ ...opts, code, cases }]);
    if (!("verdict" in out)) throw out;
    return out;
  }

  /**
   * Judge a batch on one stream at the daemon's concurrency; each submission's
   * Judgement, or the error it could not be judged for, in the batch's order.
   * Submissions refused with a delay are sent again after it, within
   * retryWithinMs: a refused submission was not judged.
   */
  async evaluateMany(submissions: SubmissionSpec[], opts: { progress?: Progress; signal?: AbortSignal } = {}): Promise<Outcome[]> {
    const batch = new Batch(submissions, opts.progress);
    const requests = submissions.map((s, i) => submissionOf(s, batch.ids[i]));
    const deadline = Date.now() + this.retryWithinMs;
    let send = requests.map((_, i) => i);
    while (send.length > 0) {
      const call: ClientDuplexStream<EvaluateRequest, EvaluateEvent> = this.stub.evaluate(this.metadata(false));
      const abort = () => call.cancel();
      opts.signal?.addEventListener("abort", abort);
      try {
        for (const i of send) call.write({ submission: requests[i] });
        call.end();
        for await (const ev of call as AsyncIterable<EvaluateEvent>) batch.event(ev);
      } catch (e) {
        const err = fromServiceError(e);
        for (const i of batch.pending()) batch.outcomes[i] = err;
      } finally {
        opts.signal?.removeEventListener("abort", abort);
        call.cancel();
      }
      const { again, waitMs } = batch.retriable(deadline);
      send = again;
      if (send.length > 0) await sleep(waitMs);
    }
    return batch.outcomes.map((o) => o ?? new Unavailable(14, "the daemon ended the batch before this submission's judgement"));
  }

  /** @internal */
  async withTools(run: { $case: "code"; value: RunCodeRequest } | { $case: "command"; value: RunCommandRequest }, opts: RunOptions & { detach?: boolean }): Promise<Result> {
    if (opts.detach) throw new TypeError("detach: a run whose tools the caller answers cannot go on without the caller");
    const declared = (opts.tools ?? []).filter((t): t is Tool => typeof t !== "string");
    const byName = new Map(declared.map((t) => [t.name, t]));
    const first: RunWithToolsRequest = { message: run, tools: declared.map(toolSpec), confirms: opts.confirm !== undefined };
    const again = this.retrier();
    let stub = this.stub;
    let followed = false;
    for (;;) {
      const call: ClientDuplexStream<RunWithToolsRequest, RunWithToolsEvent> = stub.runWithTools(this.metadata(followed));
      const abort = () => call.cancel();
      opts.signal?.addEventListener("abort", abort);
      const reply = (make: () => Promise<RunWithToolsRequest["message"]>) => {
        make().then((message) => call.write({ message, tools: [], confirms: false }), () => undefined);
      };
      let received = false;
      let err: SandboxdError;
      try {
        call.write(first);
        let started: Started | undefined;
        const stdout: Uint8Array[] = [];
        const stderr: Uint8Array[] = [];
        for await (const ev of call as AsyncIterable<RunWithToolsEvent>) {
          received = true;
          const e = ev.event;
          if (e?.$case === "toolCall") {
            reply(() => answerCall(byName, e.value));
          } else if (e?.$case === "confirm") {
            const c = e.value;
            reply(async () => {
              let confirmed = false;
              try {
                confirmed = Boolean(await opts.confirm?.(c.tool, JSON.parse(c.argumentsJson || "{}")));
              } catch {
                // A confirm that throws is a no.
              }
              return { $case: "confirmation", value: { callId: c.callId, confirmed } };
            });
          } else if (e?.$case === "run") {
            const r = e.value.event;
            if (r?.$case === "started") started = startedOf(r.value);
            else if (r?.$case === "stdout") {
              stdout.push(r.value);
              opts.onStdout?.(r.value);
            } else if (r?.$case === "stderr") {
              stderr.push(r.value);
              opts.onStderr?.(r.value);
            } else if (r?.$case === "result") return this.result(r.value, concat(stdout), concat(stderr), started);
          }
        }
        throw new Unavailable(14, "the daemon ended the run's stream without a result");
      } catch (e) {
        if (e instanceof Unavailable && received) throw e;
        err = fromServiceError(e);
      } finally {
        opts.signal?.removeEventListener("abort", abort);
        call.end();
        call.cancel();
      }
      if (received) throw err;
      [stub, followed] = await again(err, stub, followed);
    }
  }

  streamCommand(command: string[] | { shell: string }, opts: RunOptions = {}): AsyncGenerator<Event> {
    return this.events("runCommand", commandRequest(command, runOptions(opts)), opts.signal);
  }

  /** Follow a run, live or ended, from the offsets of its streams. */
  attach(runId: string, offsets: { stdout?: number; stderr?: number } = {}): AsyncGenerator<Event> {
    return this.events("attachRun", { runId, stdoutOffset: offsets.stdout ?? 0, stderrOffset: offsets.stderr ?? 0 });
  }

  async getRun(runId: string): Promise<RunInfo> {
    return this.runInfo(await this.unary<object, GetRunResponse>("getRun", { runId }));
  }

  /** Wait until a run has ended. */
  async waitRun(runId: string): Promise<RunInfo> {
    return this.runInfo(await this.unary<object, GetRunResponse>("waitRun", { runId }));
  }

  async cancelRun(runId: string): Promise<RunState> {
    const res = await this.unary<object, { state: PbRunState }>("cancelRun", { runId });
    return PbRunState[res.state] as RunState;
  }

  async listRuns(): Promise<RunInfo[]> {
    const res = await this.unary<object, { runs: GetRunResponse[] }>("listRuns", {});
    return res.runs.map((r) => this.runInfo(r));
  }

  private runInfo(r: GetRunResponse): RunInfo {
    const started = r.started ? startedOf(r.started) : undefined;
    return {
      runId: r.runId,
      state: PbRunState[r.state] as RunState,
      started,
      result: r.result ? this.result(r.result, new Output(0), new Output(0), started) : undefined,
      labels: r.labels,
      error: r.error,
      tenant: r.tenant,
      network: r.network.map(networkEventOf),
    };
  }

  /** The daemon's languages, images, runtimes and limits. */
  async inventory(): Promise<Inventory> {
    const m = await this.unary<object, ListImagesResponse>("listImages", {});
    return {
      languages: Object.fromEntries(m.languages.map((l) => [l.name, l.image])),
      images: m.images.map((i) => ({ name: i.name, digest: i.digest, present: i.present, recipeDigest: i.recipeDigest })),
      runtimes: m.runtimes.filter((r) => r.allowed).map((r) => r.name),
      defaultRuntime: m.runtimes.find((r) => r.isDefault)?.name ?? "",
      backend: m.backend,
      defaultLimits: limitsOf(m.defaultLimits),
      maxLimits: limitsOf(m.maxLimits),
      tools: m.tools.map((t) => ({
        name: t.name,
        description: t.description,
        risk: t.risk === ToolRisk.TOOL_RISK_READ ? "read" : t.risk === ToolRisk.TOOL_RISK_WRITE ? "write" : "high",
        inputSchema: t.inputSchemaJson ? JSON.parse(t.inputSchemaJson) : {},
      })),
    };
  }

  /** Create a session: one container, and a kernel that keeps its variables. */
  async session(opts: RunOptions & { language?: string; ttlMs?: number; idleTtlMs?: number } = {}): Promise<Session> {
    const dur = (v?: number) => (v === undefined ? undefined : { seconds: Math.floor(v / 1000), nanos: (v % 1000) * 1e6 });
    const info = await this.unary<object, PbSessionInfo>("createSession", {
      language: opts.language ?? "python",
      options: runOptions(opts),
      ttl: dur(opts.ttlMs),
      idleTtl: dur(opts.idleTtlMs),
    });
    return new Session(this, sessionInfo(info));
  }

  async getSession(sessionId: string): Promise<Session> {
    return new Session(this, sessionInfo(await this.unary<object, PbSessionInfo>("getSession", { sessionId })));
  }

  async listSessions(): Promise<SessionInfo[]> {
    const res = await this.unary<object, { sessions: PbSessionInfo[] }>("listSessions", {});
    return res.sessions.map(sessionInfo);
  }

  /** A new session in the state a call's bundle left its session in. */
  async fork(bundleDigest: string): Promise<Session> {
    const res = await this.unary<object, { session: PbSessionInfo; reproduced: boolean; warnings: string[] }>("forkSession", {
      fromBundle: bundleDigest,
    });
    return new Session(this, sessionInfo(res.session), res.reproduced, res.warnings);
  }

  /** A stored bundle's bytes (.tar.zst), or its attestation's. */
  async getBundle(digest: string, attestation = false): Promise<Uint8Array> {
    const chunks: Uint8Array[] = [];
    for await (const c of this.stream<object, { data: Uint8Array }>("getBundle", { digest, attestation })) chunks.push(c.data);
    return concat(chunks);
  }

  /** Fetch a bundle and verify it: its manifest and entries as data. */
  async bundle(digest: string): Promise<Bundle> {
    return verifyBundle(await this.getBundle(digest), digest);
  }

  /** An output file of a stored bundle. */
  async getFile(bundleDigest: string, path: string): Promise<Uint8Array> {
    const chunks: Uint8Array[] = [];
    for await (const c of this.stream<object, { data: Uint8Array }>("getFile", { bundleDigest, path })) chunks.push(c.data);
    return concat(chunks);
  }

  /** @internal Upload is client-streaming: not retried, its parts cannot be sent again. */
  upload(parts: UploadFileRequest[]): Promise<{ path: string; size: number; sha256: string }> {
    return new Promise((resolve, reject) => {
      const call = (this.stub as any).uploadFile(this.metadata(false), (err: unknown, res: any) =>
        err ? reject(fromServiceError(err)) : resolve(res),
      );
      for (const p of parts) call.write(p);
      call.end();
    });
  }
}

/** Whether a run's tools or confirmations are answered by the caller. */
function answersTools(o: RunOptions): boolean {
  return o.confirm !== undefined || (o.tools ?? []).some((t) => typeof t !== "string");
}

const RISKS = { read: ToolRisk.TOOL_RISK_READ, write: ToolRisk.TOOL_RISK_WRITE, high: ToolRisk.TOOL_RISK_HIGH };

function toolSpec(t: Tool): ToolSpec {
  if (t.risk !== undefined && !(t.risk in RISKS)) throw new TypeError(`tools: ${t.name}: risk "${t.risk}" is not "read", "write" or "high"`);
  if (typeof t.handler !== "function") throw new TypeError(`tools: ${t.name}: handler is not a function`);
  return {
    name: t.name,
    description: t.description ?? "",
    inputSchemaJson: t.inputSchema ? JSON.stringify(t.inputSchema) : "",
    risk: RISKS[t.risk ?? "write"],
  };
}

/** Runs the tool a call names: its result as JSON, or its error as text. */
async function answerCall(byName: Map<string, Tool>, c: ToolCall): Promise<RunWithToolsRequest["message"]> {
  const result = { callId: c.callId, resultJson: "", error: "" };
  try {
    const t = byName.get(c.tool);
    if (!t) throw new Error(`the caller has no tool ${c.tool}`);
    const value = await t.handler(JSON.parse(c.argumentsJson || "{}"), { idempotencyKey: c.idempotencyKey });
    result.resultJson = JSON.stringify(value === undefined ? null : value);
  } catch (e) {
    result.error = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  }
  return { $case: "toolResult", value: result };
}

function commandRequest(command: string[] | { shell: string }, options: PbRunOptions) {
  if (Array.isArray(command)) return { argv: command, shell: "", options };
  if (typeof command?.shell !== "string") throw new TypeError("runCommand: give an argv array or {shell: \"a line\"}");
  return { argv: [], shell: command.shell, options };
}

function network(n: RunOptions["network"]): PbNetwork | undefined {
  if (n === undefined) return undefined;
  const allow = (spec: NetworkSpec): PbNetwork => ({
    mode: NetworkMode.NETWORK_MODE_ALLOWLIST,
    policy: spec.policy ?? "",
    rules: (spec.allow ?? []).map((r) => ({ host: r.host ?? "", cidr: r.cidr ?? "", ports: r.ports ?? [] })),
    caps: { bytesOut: spec.bytesOut ?? 0, bytesIn: spec.bytesIn ?? 0, connections: spec.connections ?? 0 },
    secrets: spec.secrets ?? [],
  });
  if (n === "none") return { mode: NetworkMode.NETWORK_MODE_NONE, policy: "", rules: [], caps: undefined, secrets: [] };
  if (typeof n === "string") return allow({ policy: n });
  if (Array.isArray(n)) {
    return allow({
      allow: n.map((dest) => {
        const m = /^(.*?)(?::(\d+))?$/.exec(dest)!;
        const ports = m[2] ? [Number(m[2])] : [];
        return m[1].includes("/") ? { cidr: m[1], ports } : { host: m[1], ports };
      }),
    });
  }
  return allow(n);
}

/** The API's RunOptions of a caller's options; a TypeError names a bad one. */
function runOptions(o: RunOptions, detach = false): PbRunOptions {
  checkLimitNames("limits", o.limits);
  if (o.interpreter !== undefined && o.interpreter !== "fresh" && o.interpreter !== "prestarted") {
    throw new TypeError(`interpreter: "${o.interpreter}" is not "fresh" or "prestarted"`);
  }
  const lim = { ...limitsOf(undefined), ...o.limits };
  if (o.timeoutMs !== undefined) lim.timeoutMs = o.timeoutMs;
  const files = Array.isArray(o.files)
    ? o.files
    : Object.entries(o.files ?? {}).map(([path, content]) => ({ path, content, executable: false }));
  return {
    image: o.image ?? "",
    runtime: o.runtime ?? "",
    limits: lim,
    network: network(o.network),
    files: files.map((f) => ({ path: f.path, content: Buffer.from(encode(f.content)), executable: f.executable ?? false })),
    mounts: o.mounts ?? [],
    env: o.env ?? {},
    stdin: Buffer.from(encode(o.stdin ?? "")),
    workdir: o.workdir ?? "",
    labels: o.labels ?? {},
    seed: o.seed,
    sessionId: "",
    detach,
    idempotencyKey: o.idempotencyKey ?? "",
    tools: (o.tools ?? []).filter((t): t is string => typeof t === "string"),
    toolRecord: Buffer.alloc(0),
    liveReadTools: false,
    replayOf: "",
    interpreter:
      o.interpreter === "fresh"
        ? Interpreter.INTERPRETER_FRESH
        : o.interpreter === "prestarted"
          ? Interpreter.INTERPRETER_PRESTARTED
          : Interpreter.INTERPRETER_UNSPECIFIED,
  };
}

function sessionInfo(s: PbSessionInfo): SessionInfo {
  return {
    sessionId: s.sessionId,
    state: PbSessionState[s.state].replace(/^SESSION_STATE_(?!UNSPECIFIED)/, "") as SessionInfo["state"],
    reason: s.reason,
    language: s.language,
    image: s.image,
    imageDigest: s.imageDigest,
    runtime: s.runtime,
    limits: limitsOf(s.limits),
    labels: s.labels,
    createdAt: s.createdAt,
    expiresAt: s.expiresAt,
    idleExpiresAt: s.idleExpiresAt,
    calls: s.calls,
    lastBundle: s.lastBundle,
    tenant: s.tenant,
    networkRules: (s.network?.rules ?? []).map((r) => {
      const target = r.host || r.cidr;
      return r.ports.length > 0 ? `${target}:${r.ports.join(",")}` : target;
    }),
    networkSecrets: s.network?.secrets ?? [],
  };
}

/** A detached run: it goes on without its caller until it ends or is cancelled. */
export class RunHandle {
  constructor(
    private readonly client: Client,
    readonly runId: string,
    readonly started?: Started,
  ) {}

  attach(offsets: { stdout?: number; stderr?: number } = {}): AsyncGenerator<Event> {
    return this.client.attach(this.runId, offsets);
  }

  /** Wait for the end: the Result with all its output. */
  wait(): Promise<Result> {
    return this.client.collect(this.attach());
  }

  info(): Promise<RunInfo> {
    return this.client.getRun(this.runId);
  }

  cancel(): Promise<RunState> {
    return this.client.cancelRun(this.runId);
  }
}

/** A session's /workspace. */
export class Files {
  constructor(
    private readonly client: Client,
    private readonly sessionId: string,
  ) {}

  /** Write a file (folders made on its way); paths are relative. */
  async write(path: string, data: string | Uint8Array, executable = false): Promise<FileInfo> {
    const content = Buffer.from(encode(data));
    const parts: UploadFileRequest[] = [{ part: { $case: "header", value: { sessionId: this.sessionId, path, executable } } }];
    for (let i = 0; i < content.length; i += CHUNK) parts.push({ part: { $case: "data", value: content.subarray(i, i + CHUNK) } });
    const res = await this.client.upload(parts);
    return { path: res.path, type: "file", size: res.size, sha256: res.sha256 };
  }

  async read(path: string): Promise<Uint8Array> {
    const chunks: Uint8Array[] = [];
    for await (const c of this.client.stream<object, { data: Uint8Array }>("readFile", { sessionId: this.sessionId, path })) {
      chunks.push(c.data);
    }
    return concat(chunks);
  }

  async list(path = ""): Promise<FileInfo[]> {
    const res = await this.client.unary<object, { files: FileInfo[] }>("listFiles", { sessionId: this.sessionId, path });
    return res.files.map((f) => ({ path: f.path, type: f.type, size: f.size, sha256: f.sha256 }));
  }
}

/** A session: calls run one after another in one container, and Python's
 * and JavaScript's kernels keep their variables between them. */
export class Session {
  readonly id: string;
  readonly language: string;
  readonly files: Files;
  private lastBundle: string;

  constructor(
    private readonly client: Client,
    public info: SessionInfo,
    /** For a fork: whether replaying its chain reproduced every call. */
    readonly reproduced = true,
    readonly warnings: string[] = [],
  ) {
    this.id = info.sessionId;
    this.language = info.language;
    this.files = new Files(client, this.id);
    this.lastBundle = info.lastBundle;
  }

  /**
   * Run code in the session's kernel; `value` is the last expression's. Each
   * call names its own tools (and confirm), as runCode's do.
   */
  async run(code: string, opts: RunOptions = {}): Promise<Result> {
    const request = { language: this.language, code, options: { ...runOptions(opts), sessionId: this.id } };
    const res = answersTools(opts)
      ? await this.client.withTools({ $case: "code", value: request }, opts)
      : await this.client.collect(this.client.events("runCode", request, opts.signal), opts);
    this.lastBundle = res.bundleDigest || this.lastBundle;
    return res;
  }

  /** Run a command in the session's container, as run. */
  async command(command: string[] | { shell: string }, opts: RunOptions = {}): Promise<Result> {
    const request = commandRequest(command, { ...runOptions(opts), sessionId: this.id });
    const res = answersTools(opts)
      ? await this.client.withTools({ $case: "command", value: request }, opts)
      : await this.client.collect(this.client.events("runCommand", request, opts.signal), opts);
    this.lastBundle = res.bundleDigest || this.lastBundle;
    return res;
  }

  /**
   * Start a process in the session's background: it runs beside the calls
   * until it exits or the session ends. terminal gives it one of [rows,
   * cols] (its output then all on stdout).
   */
  async start(
    command: string[] | { shell: string },
    opts: { env?: Record<string, string>; workdir?: string; terminal?: [number, number]; term?: string } = {},
  ): Promise<Process> {
    const request = {
      sessionId: this.id,
      argv: Array.isArray(command) ? command : [],
      shell: Array.isArray(command) ? "" : command.shell,
      env: opts.env ?? {},
      workdir: opts.workdir ?? "",
      terminal: opts.terminal ? { rows: opts.terminal[0], cols: opts.terminal[1], term: opts.term ?? "" } : undefined,
    };
    return new Process(this.client, processInfo(await this.client.unary<object, PbProcessInfo>("startProcess", request)));
  }

  /** Its background processes, running and ended, oldest first. */
  async processes(): Promise<ProcessInfo[]> {
    const res = await this.client.unary<object, ListProcessesResponse>("listProcesses", { sessionId: this.id });
    return res.processes.map(processInfo);
  }

  /** Open a port to the daemon's inbound proxy: what listens on it in the
   * session is reached at the returned url. */
  async openPort(p: number): Promise<Port> {
    return port(await this.client.unary<object, PortInfo>("openPort", { sessionId: this.id, port: p }));
  }

  async closePort(p: number): Promise<void> {
    await this.client.unary("closePort", { sessionId: this.id, port: p });
  }

  async ports(): Promise<Port[]> {
    return (await this.client.unary<object, ListPortsResponse>("listPorts", { sessionId: this.id })).ports.map(port);
  }

  /** A new session in this one's state after its last call. */
  fork(): Promise<Session> {
    if (!this.lastBundle) throw new Error("fork: the session has made no call yet, so there is no state to fork");
    return this.client.fork(this.lastBundle);
  }

  async refresh(): Promise<SessionInfo> {
    this.info = (await this.client.getSession(this.id)).info;
    return this.info;
  }

  /**
   * Change the session's allow-list from now on, as a run's network is given: connections under way that it no
   * longer allows are cut, and the next call's bundle records the change. "none" takes every rule away.
   */
  async setNetwork(n: NonNullable<RunOptions["network"]>): Promise<SessionInfo> {
    this.info = sessionInfo(
      await this.client.unary<object, PbSessionInfo>("updateSessionNetwork", { sessionId: this.id, network: network(n) }),
    );
    return this.info;
  }

  /**
   * Save the session to disk between calls (its variables, background processes and files) and free its container:
   * it takes no call until resume(). Under gVisor on the direct backend; elsewhere a FailedPrecondition says why.
   */
  async pause(): Promise<SessionInfo> {
    this.info = sessionInfo(await this.client.unary<object, PbSessionInfo>("pauseSession", { sessionId: this.id }));
    return this.info;
  }

  /** Restore a paused session into a new container, as it was. */
  async resume(): Promise<SessionInfo> {
    this.info = sessionInfo(await this.client.unary<object, PbSessionInfo>("resumeSession", { sessionId: this.id }));
    return this.info;
  }

  /** Remove the session's container; its bundles stay. */
  async delete(): Promise<SessionInfo> {
    return sessionInfo(await this.client.unary<object, PbSessionInfo>("deleteSession", { sessionId: this.id }));
  }

  /** `await using s = await client.session()` deletes the session at the end of the block, as delete(). */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.delete();
  }
}

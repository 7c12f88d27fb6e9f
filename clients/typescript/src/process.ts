// A session's background processes, their terminals, and its ports (see
// docs/processes.md).

import type { ClientDuplexStream } from "@grpc/grpc-js";

import { fromServiceError } from "./errors.js";
import {
  ProcessState,
  type AttachProcessEvent,
  type AttachProcessRequest,
  type PortInfo,
  type ProcessInfo as PbProcessInfo,
  type ReadProcessOutputResponse,
} from "./gen/sandboxd/v1/sandboxd.js";

/** What a process's client needs of the Client. @internal */
export interface ProcessCalls {
  unary<Req, Res>(method: string, request: Req): Promise<Res>;
  attachProcess(): ClientDuplexStream<AttachProcessRequest, AttachProcessEvent>;
}

/** A background process as the daemon reports it. */
export interface ProcessInfo {
  processId: string;
  sessionId: string;
  argv: string[];
  /** RUNNING, EXITED or KILLED (ended with its session). */
  state: "RUNNING" | "EXITED" | "KILLED" | "UNSPECIFIED";
  /** A shell's (128+N for signal N), once it ended. */
  exitCode?: number;
  terminal: boolean;
  startedAt?: Date;
  endedAt?: Date;
  stdoutBytes: number;
  stderrBytes: number;
}

/** A read of a process's output: what came since the last read, and the
 * bytes the daemon no longer kept before it. */
export interface ProcessOutput {
  stdout: Uint8Array;
  stderr: Uint8Array;
  dropped: number;
  process: ProcessInfo;
}

/** A session's port opened to the daemon's inbound proxy: HTTP and
 * WebSocket reach it at url, whose token is its only key. */
export interface Port {
  sessionId: string;
  port: number;
  url: string;
  token: string;
}

const states: Record<number, ProcessInfo["state"]> = {
  [ProcessState.PROCESS_RUNNING]: "RUNNING",
  [ProcessState.PROCESS_EXITED]: "EXITED",
  [ProcessState.PROCESS_KILLED]: "KILLED",
};

/** @internal */
export function processInfo(m: PbProcessInfo): ProcessInfo {
  const state = states[m.state] ?? "UNSPECIFIED";
  return {
    processId: m.processId,
    sessionId: m.sessionId,
    argv: m.argv,
    state,
    exitCode: state === "RUNNING" ? undefined : m.exitCode,
    terminal: m.terminal,
    startedAt: m.startedAt,
    endedAt: m.endedAt,
    stdoutBytes: m.stdoutBytes,
    stderrBytes: m.stderrBytes,
  };
}

/** @internal */
export function port(m: PortInfo): Port {
  return { sessionId: m.sessionId, port: m.port, url: m.url, token: m.token };
}

/** A background process of a session; read() reads on from where the last
 * read stopped. */
export class Process {
  readonly id: string;
  readonly sessionId: string;
  private stdoutOffset = 0;
  private stderrOffset = 0;

  constructor(
    private readonly calls: ProcessCalls,
    public info: ProcessInfo,
  ) {
    this.id = info.processId;
    this.sessionId = info.sessionId;
  }

  private get names() {
    return { sessionId: this.sessionId, processId: this.id };
  }

  /** The output since the last read, waiting up to waitMs (at most 30 s)
   * for some while the process runs. */
  async read(waitMs = 0): Promise<ProcessOutput> {
    const r = await this.calls.unary<object, ReadProcessOutputResponse>("readProcessOutput", {
      ...this.names,
      stdoutOffset: this.stdoutOffset,
      stderrOffset: this.stderrOffset,
      maxBytes: 0,
      waitMs,
    });
    const dropped = r.stdoutStart - this.stdoutOffset + r.stderrStart - this.stderrOffset;
    this.stdoutOffset = r.nextStdoutOffset;
    this.stderrOffset = r.nextStderrOffset;
    this.info = processInfo(r.process!);
    return { stdout: r.stdout, stderr: r.stderr, dropped, process: this.info };
  }

  /** Write to its stdin; with close, end it after. */
  async write(data: string | Uint8Array, close = false): Promise<void> {
    await this.calls.unary("writeProcessStdin", { ...this.names, data: Buffer.from(data), close });
  }

  /** Send a signal to its process group (default SIGTERM). */
  async signal(signal = 15): Promise<ProcessInfo> {
    this.info = processInfo(await this.calls.unary<object, PbProcessInfo>("signalProcess", { ...this.names, signal }));
    return this.info;
  }

  /** Wait for it to end. */
  async wait(): Promise<ProcessInfo> {
    this.info = processInfo(await this.calls.unary<object, PbProcessInfo>("waitProcess", this.names));
    return this.info;
  }

  /** Change the size of its terminal. */
  async resize(rows: number, cols: number): Promise<void> {
    await this.calls.unary("resizeProcess", { ...this.names, size: { rows, cols, term: "" } });
  }

  /** Its streams both ways, as a terminal needs them. */
  attach(from: { stdoutOffset?: number; stderrOffset?: number } = {}): Attachment {
    const call = this.calls.attachProcess();
    call.write({
      part: {
        $case: "start",
        value: { ...this.names, stdoutOffset: from.stdoutOffset ?? 0, stderrOffset: from.stderrOffset ?? 0 },
      },
    });
    return new Attachment(call);
  }
}

/** A process's streams both ways: `for await` yields its output as it
 * comes; exited is its record once it ended. Sends go in the order they
 * are made. */
export class Attachment {
  exited?: ProcessInfo;
  dropped = 0;

  constructor(private readonly call: ClientDuplexStream<AttachProcessRequest, AttachProcessEvent>) {}

  write(data: string | Uint8Array): void {
    this.call.write({ part: { $case: "stdin", value: Buffer.from(data) } });
  }

  /** End its stdin (a Ctrl-D with a terminal). */
  closeStdin(): void {
    this.call.write({ part: { $case: "closeStdin", value: true } });
  }

  resize(rows: number, cols: number): void {
    this.call.write({ part: { $case: "resize", value: { rows, cols, term: "" } } });
  }

  signal(signal: number): void {
    this.call.write({ part: { $case: "signal", value: signal } });
  }

  /** Stop sending; the output goes on until the process ends. */
  close(): void {
    this.call.end();
  }

  /** Leave: the process goes on. */
  cancel(): void {
    this.call.cancel();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<{ stream: "stdout" | "stderr"; data: Uint8Array }> {
    try {
      for await (const ev of this.call as AsyncIterable<AttachProcessEvent>) {
        const e = ev.event;
        if (e?.$case === "stdout") yield { stream: "stdout", data: e.value };
        else if (e?.$case === "stderr") yield { stream: "stderr", data: e.value };
        else if (e?.$case === "dropped") this.dropped += e.value;
        else if (e?.$case === "exited") this.exited = processInfo(e.value);
      }
    } catch (err) {
      throw fromServiceError(err);
    } finally {
      this.call.end();
    }
  }
}

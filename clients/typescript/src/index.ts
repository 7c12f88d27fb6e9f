// sandboxd's TypeScript client: run untrusted, model-written code in fresh
// containers.
//
//   import { Client } from "@sandboxd/client";
//   const c = new Client();                      // SANDBOXD_ADDR, or the daemon's socket
//   console.log((await c.runCode("print(6 * 7)")).text());

export { verifyBundle, type Bundle } from "./bundle.js";
export {
  Client,
  DEFAULT_RETRY_WITHIN_MS,
  DEFAULT_SOCKET,
  Files,
  Output,
  RunHandle,
  Session,
  type ClientOptionsSpec,
  type Display,
  type Event,
  type FileInfo,
  type FileSpec,
  type Inventory,
  type KernelError,
  type Limits,
  type NetworkEvent,
  type NetworkSpec,
  type OutputFile,
  type Result,
  type RunInfo,
  type RunOptions,
  type RunState,
  type SessionInfo,
  type Started,
  type Status,
  type Tool,
} from "./client.js";
export * from "./errors.js";
export { Attachment, Process, type Port, type ProcessInfo, type ProcessOutput } from "./process.js";
export type { CaseResult, CaseSpec, Judgement, Outcome, Progress, SubmissionSpec, Verdict } from "./judge.js";

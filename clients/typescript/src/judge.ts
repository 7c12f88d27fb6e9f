// Judging for rewards: a submission and its test cases, each case's
// verdict, and a batch's events, as the Client's evaluate() and
// evaluateMany() send and read them on one Evaluate stream.

import { errorFor, ResourceExhausted, Unavailable, type SandboxdError } from "./errors.js";
import {
  Comparison_Kind,
  Isolation,
  Judgement_Verdict,
  Status as PbStatus,
  type CaseResult as PbCaseResult,
  type EvaluateEvent,
  type Judgement as PbJudgement,
  type Limits as PbLimits,
  type Submission as PbSubmission,
  type SubmissionError,
  type TestCase,
} from "./gen/sandboxd/v1/sandboxd.js";
import type { Duration } from "./gen/google/protobuf/duration.js";

/** What a case's run says of the program. SANDBOX_ERROR is sandboxd's or the host's failure: retry, never reward. */
export type Verdict =
  | "ACCEPTED"
  | "WRONG_ANSWER"
  | "TIME_LIMIT"
  | "MEMORY_LIMIT"
  | "RUNTIME_ERROR"
  | "OUTPUT_LIMIT"
  | "COMPILE_ERROR"
  | "SANDBOX_ERROR"
  | "SKIPPED"
  | "VERDICT_UNSPECIFIED";

/**
 * One test: stdin, args and files (path -> content under /input) and the stdout
 * it must print, held against it by compare ("lines", the default, ignores
 * trailing whitespace; "exact"; "numbers" within absolute + relative × |expected|;
 * "checker"). Or test: code run after the submission's, whose exit decides.
 */
export interface CaseSpec {
  stdin?: string | Uint8Array;
  expected?: string | Uint8Array;
  args?: string[];
  files?: Record<string, string | Uint8Array>;
  compare?: "lines" | "exact" | "numbers" | "checker";
  absolute?: number;
  relative?: number;
  test?: string;
  name?: string;
  timeoutMs?: number;
  limits?: Partial<Record<keyof PbLimits, number>>;
}

/** A program and its cases: code in a language, or argv and files. */
export interface SubmissionSpec {
  code?: string;
  language?: string;
  cases: CaseSpec[];
  id?: string;
  argv?: string[];
  files?: Record<string, string | Uint8Array>;
  /** A program that decides "checker" cases: it reads /input/input, /input/expected, /input/output; exit 0 accepts, 1 rejects. */
  checker?: { code: string; language?: string };
  image?: string;
  runtime?: string;
  timeoutMs?: number;
  limits?: Partial<Record<keyof PbLimits, number>>;
  env?: Record<string, string>;
  seed?: number;
  stopOnFailure?: boolean;
  /** "fresh" (a sandbox per case, the default) or "shared" (all cases in one, cheaper). */
  isolation?: "fresh" | "shared";
  idempotencyKey?: string;
}

export interface CaseResult {
  index: number;
  name: string;
  verdict: Verdict;
  message: string;
  status: string;
  exitCode: number;
  signal: number;
  durationMs: number;
  peakMemoryBytes: number;
  /** The first KiB of each stream; the bundle keeps them whole. */
  stdout: Uint8Array;
  stderr: Uint8Array;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  runId: string;
  bundleDigest: string;
}

/** A submission's judging: ACCEPTED when every case is, SANDBOX_ERROR when any met one, else the first failing case's. */
export interface Judgement {
  submissionId: string;
  judgementId: string;
  verdict: Verdict;
  passed: number;
  total: number;
  /** The first case not accepted, or undefined. */
  firstFailing?: number;
  cases: CaseResult[];
  compile?: { ok: boolean; message: string; durationMs: number; stderr: Uint8Array; bundleDigest: string };
  isolation: "fresh" | "shared";
  image: string;
  runtime: string;
  durationMs: number;
  bundleDigest: string;
  retried: boolean;
  /** Every case accepted. */
  accepted: boolean;
  /** The share of cases accepted. */
  score: number;
}

/** What a batch gives back for each submission: its judgement, or the error it could not be judged for. */
export type Outcome = Judgement | SandboxdError;

const COMPARE = { lines: Comparison_Kind.LINES, exact: Comparison_Kind.EXACT, numbers: Comparison_Kind.NUMBERS, checker: Comparison_Kind.CHECKER };

function bytes(v: string | Uint8Array): Buffer {
  return Buffer.from(typeof v === "string" ? new TextEncoder().encode(v) : v);
}

function files(f: Record<string, string | Uint8Array> | undefined) {
  return Object.entries(f ?? {}).map(([path, content]) => ({ path, content: bytes(content), executable: false }));
}

const LIMITS = ["memoryBytes", "cpuMillis", "pids", "timeoutMs", "stdoutBytes", "stderrBytes", "diskBytes"] as const;

/** Throws a TypeError naming the first key of l that is not a limit, and the limit it likely meant. */
export function checkLimitNames(field: string, l: object | undefined): void {
  const unknown = Object.keys(l ?? {}).find((k) => !(LIMITS as readonly string[]).includes(k));
  if (unknown === undefined) return;
  // memory, memory_bytes and MemoryBytes all mean memoryBytes.
  const flat = (s: string) => s.replaceAll("_", "").toLowerCase();
  const near = LIMITS.filter((n) => flat(n).startsWith(flat(unknown)));
  const hint = near.length === 1 ? ` (did you mean "${near[0]}"?)` : "";
  throw new TypeError(`${field}: no such limit "${unknown}"${hint}; limits are ${LIMITS.join(", ")}`);
}

function limits(l: SubmissionSpec["limits"], timeoutMs: number | undefined, field: string): PbLimits | undefined {
  checkLimitNames(field, l);
  if (l === undefined && timeoutMs === undefined) return undefined;
  const out = Object.fromEntries(LIMITS.map((k) => [k, l?.[k] ?? 0])) as unknown as PbLimits;
  if (timeoutMs !== undefined) out.timeoutMs = timeoutMs;
  return out;
}

function testCase(c: CaseSpec, i: number): TestCase {
  const compare = c.compare ?? "lines";
  if (!(compare in COMPARE)) throw new TypeError(`cases[${i}].compare: "${compare}" is not one of ${Object.keys(COMPARE).join(", ")}`);
  return {
    name: c.name ?? "",
    stdin: c.stdin === undefined ? undefined : bytes(c.stdin),
    args: c.args ?? [],
    files: files(c.files),
    expectedStdout: c.expected === undefined ? undefined : bytes(c.expected),
    compare: { kind: COMPARE[compare], absolute: c.absolute ?? 0, relative: c.relative ?? 0 },
    test: c.test ?? "",
    limits: limits(c.limits, c.timeoutMs, `cases[${i}].limits`),
  };
}

/** @internal The API's message of a submission. */
export function submissionOf(s: SubmissionSpec, id: string): PbSubmission {
  if (s.isolation !== undefined && s.isolation !== "fresh" && s.isolation !== "shared") {
    throw new TypeError(`isolation: "${s.isolation}" is not "fresh" or "shared"`);
  }
  return {
    id,
    language: s.code ? (s.language ?? "python") : "",
    code: s.code ?? "",
    argv: s.argv ?? [],
    files: files(s.files),
    cases: s.cases.map(testCase),
    checker: s.checker ? { language: s.checker.language ?? "python", code: s.checker.code } : undefined,
    image: s.image ?? "",
    runtime: s.runtime ?? "",
    limits: limits(s.limits, s.timeoutMs, "limits"),
    env: s.env ?? {},
    seed: s.seed,
    stopOnFailure: s.stopOnFailure ?? false,
    isolation: s.isolation === "shared" ? Isolation.ISOLATION_SHARED : Isolation.ISOLATION_FRESH,
    idempotencyKey: s.idempotencyKey ?? "",
  };
}

function ms(d: Duration | undefined): number {
  return d ? d.seconds * 1000 + d.nanos / 1e6 : 0;
}

function caseResult(c: PbCaseResult): CaseResult {
  return {
    index: c.index,
    name: c.name,
    verdict: (Judgement_Verdict[c.verdict] ?? "VERDICT_UNSPECIFIED") as Verdict,
    message: c.message,
    status: PbStatus[c.status] ?? "STATUS_UNSPECIFIED",
    exitCode: c.exitCode,
    signal: c.signal,
    durationMs: ms(c.duration),
    peakMemoryBytes: c.peakMemoryBytes,
    stdout: new Uint8Array(c.stdout),
    stderr: new Uint8Array(c.stderr),
    stdoutTruncated: c.stdoutTruncated,
    stderrTruncated: c.stderrTruncated,
    runId: c.runId,
    bundleDigest: c.bundleDigest,
  };
}

function judgementOf(j: PbJudgement): Judgement {
  const verdict = (Judgement_Verdict[j.verdict] ?? "VERDICT_UNSPECIFIED") as Verdict;
  const c = j.compile;
  return {
    submissionId: j.submissionId,
    judgementId: j.judgementId,
    verdict,
    passed: j.passed,
    total: j.total,
    firstFailing: j.firstFailing >= 0 ? j.firstFailing : undefined,
    cases: j.cases.map(caseResult),
    compile: c ? { ok: c.ok, message: c.message, durationMs: ms(c.duration), stderr: new Uint8Array(c.stderr), bundleDigest: c.bundleDigest } : undefined,
    isolation: j.isolation === Isolation.ISOLATION_SHARED ? "shared" : "fresh",
    image: j.image,
    runtime: j.runtime,
    durationMs: ms(j.duration),
    bundleDigest: j.bundleDigest,
    retried: j.retried,
    accepted: verdict === "ACCEPTED",
    score: j.total > 0 ? j.passed / j.total : 0,
  };
}

function submissionError(e: SubmissionError): SandboxdError {
  return errorFor(e.code, e.message, e.retryAfter ? { retryDelayMs: ms(e.retryAfter) } : {});
}

/** Progress as cases are decided: cases decided, cases in all, and a submission's end when one came. */
export type Progress = (done: number, total: number, end?: Outcome) => void;

/** @internal A batch's state: each submission's outcome in the batch's order, and its progress. */
export class Batch {
  readonly ids: string[];
  readonly outcomes: (Outcome | undefined)[];
  readonly total: number;
  private done = 0;
  private readonly reported = new Map<string, number>();
  private readonly index: Map<string, number>;

  constructor(
    readonly subs: SubmissionSpec[],
    private readonly progress?: Progress,
  ) {
    this.ids = subs.map((s, i) => s.id ?? String(i));
    if (new Set(this.ids).size !== this.ids.length) throw new TypeError("submissions: two share an id; give each its own");
    this.index = new Map(this.ids.map((id, i) => [id, i]));
    this.outcomes = subs.map(() => undefined);
    this.total = subs.reduce((n, s) => n + s.cases.length, 0);
  }

  event(ev: EvaluateEvent): void {
    const e = ev.event;
    let end: Outcome | undefined;
    if (e?.$case === "caseDone") {
      const id = e.value.submissionId;
      this.reported.set(id, (this.reported.get(id) ?? 0) + 1);
      this.done++;
    } else if (e?.$case === "judgement") {
      end = judgementOf(e.value);
      this.end(e.value.submissionId, end);
    } else if (e?.$case === "error") {
      end = submissionError(e.value);
      this.end(e.value.submissionId, end);
    }
    this.progress?.(Math.min(this.done, this.total), this.total, end);
  }

  private end(id: string, outcome: Outcome): void {
    const i = this.index.get(id);
    if (i === undefined) return;
    this.outcomes[i] = outcome;
    // Every case of an ended submission counts: skipped, a compile error's, a refused one's.
    this.done += this.subs[i].cases.length - (this.reported.get(id) ?? 0);
    this.reported.delete(id);
  }

  pending(): number[] {
    return this.outcomes.flatMap((o, i) => (o === undefined ? [i] : []));
  }

  /** The submissions refused with a delay, to send again after waitMs, if within the deadline. */
  retriable(deadline: number): { again: number[]; waitMs: number } {
    const again: number[] = [];
    let waitMs = 0;
    this.outcomes.forEach((o, i) => {
      if ((o instanceof ResourceExhausted || o instanceof Unavailable) && o.retryDelayMs !== undefined) {
        again.push(i);
        waitMs = Math.max(waitMs, o.retryDelayMs);
      }
    });
    if (again.length === 0 || Date.now() + waitMs > deadline) return { again: [], waitMs: 0 };
    for (const i of again) {
      this.outcomes[i] = undefined;
      this.done -= this.subs[i].cases.length;
    }
    return { again, waitMs };
  }
}

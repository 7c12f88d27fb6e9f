// Errors: one class per gRPC status class, carrying what the daemon's
// refusal says a caller can act on. What a program does is never an error:
// a program that exits 1 or times out is a Result with that status.

import { Metadata, status as Code, type ServiceError } from "@grpc/grpc-js";

import { BadRequest, ErrorInfo, QuotaFailure, RetryInfo } from "./gen/sandboxd/rpc/error_details.js";
import { Status as RpcStatus } from "./gen/sandboxd/rpc/status.js";

/** The ErrorInfo reason of a run or session another daemon holds. */
export const REASON_ELSEWHERE = "ELSEWHERE";

/** One quota a refusal met: subject "sandboxd" or "tenant:NAME". */
export interface QuotaViolation {
  subject: string;
  description: string;
}

/** Another daemon of the cluster holds the run or session. */
export interface Redirect {
  address: string;
  daemon: string;
  kind: string;
  id: string;
}

/** The details a status carries, decoded. */
export interface ErrorDetails {
  retryDelayMs?: number;
  quota?: QuotaViolation[];
  reason?: string;
  metadata?: Record<string, string>;
  fieldViolations?: Record<string, string>;
}

// A field path as the daemon's messages start with it:
// "files[0].path: ...", "options.limits.memory_bytes: ...".
const FIELD = /^([a-z_][a-z0-9_]*(?:\[\d+\])?(?:\.[a-z_][a-z0-9_]*(?:\[\d+\])?)*): /;

/** An answer of the daemon that is not a run's result. */
export class SandboxdError extends Error {
  /** The gRPC status code, e.g. 3 for INVALID_ARGUMENT. */
  readonly code: number;
  /** The code's name, e.g. "INVALID_ARGUMENT". */
  readonly codeName: string;
  /** Milliseconds the daemon asks the caller to wait before retrying. */
  readonly retryDelayMs?: number;
  /** The quotas met (RESOURCE_EXHAUSTED). */
  readonly quota: QuotaViolation[];
  /** The ErrorInfo reason, e.g. "ELSEWHERE" or "IMAGE_NOT_PRESENT". */
  readonly reason: string;
  readonly metadata: Record<string, string>;
  readonly fieldViolations: Record<string, string>;

  constructor(code: number, message: string, details: ErrorDetails = {}) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.codeName = Code[code] ?? "UNKNOWN";
    this.retryDelayMs = details.retryDelayMs;
    this.quota = details.quota ?? [];
    this.reason = details.reason ?? "";
    this.metadata = details.metadata ?? {};
    this.fieldViolations = details.fieldViolations ?? {};
  }

  /** The request field the error names, e.g. "files[0].path". */
  get field(): string | undefined {
    const named = Object.keys(this.fieldViolations);
    if (named.length > 0) return named[0];
    return FIELD.exec(this.message)?.[1];
  }

  /** Where the run or session is, when another daemon holds it. */
  get redirect(): Redirect | undefined {
    if (this.reason !== REASON_ELSEWHERE) return undefined;
    const m = this.metadata;
    return { address: m.address ?? "", daemon: m.daemon ?? "", kind: m.kind ?? "", id: m.id ?? "" };
  }
}

/** The request is wrong; `field` names what. */
export class InvalidArgument extends SandboxdError {}
/** No such run, session, bundle or file (or not the caller's). */
export class NotFound extends SandboxdError {}
/** An idempotency key already names another request's run. */
export class AlreadyExists extends SandboxdError {}
/** The caller is not granted what it asked for. */
export class PermissionDenied extends SandboxdError {}
/** No bearer token or client certificate that names a caller. */
export class Unauthenticated extends SandboxdError {}
/** Busy or a quota met: `retryDelayMs` says when, `quota` which. */
export class ResourceExhausted extends SandboxdError {}
/** An image not built, a runtime not installed, a run held elsewhere. */
export class FailedPrecondition extends SandboxdError {}
/** The daemon is not reachable, or draining (`retryDelayMs`). */
export class Unavailable extends SandboxdError {}
/** The call's own deadline passed (a program's timeout is a Result). */
export class DeadlineExceeded extends SandboxdError {}
/** The call was cancelled. */
export class Cancelled extends SandboxdError {}
/** sandboxd's own failure. */
export class Internal extends SandboxdError {}

const CLASSES: Record<number, new (code: number, message: string, details?: ErrorDetails) => SandboxdError> = {
  [Code.INVALID_ARGUMENT]: InvalidArgument,
  [Code.NOT_FOUND]: NotFound,
  [Code.ALREADY_EXISTS]: AlreadyExists,
  [Code.PERMISSION_DENIED]: PermissionDenied,
  [Code.UNAUTHENTICATED]: Unauthenticated,
  [Code.RESOURCE_EXHAUSTED]: ResourceExhausted,
  [Code.FAILED_PRECONDITION]: FailedPrecondition,
  [Code.UNAVAILABLE]: Unavailable,
  [Code.DEADLINE_EXCEEDED]: DeadlineExceeded,
  [Code.CANCELLED]: Cancelled,
  [Code.INTERNAL]: Internal,
};

const TYPE_PREFIX = "type.googleapis.com/google.rpc.";

/** The error of a status code and message, as a call's would be. */
export function errorFor(code: number, message: string, details: ErrorDetails = {}): SandboxdError {
  const cls = CLASSES[code] ?? SandboxdError;
  return new cls(code, message, details);
}

/** The error for a failed call, its status details decoded. */
export function fromServiceError(err: unknown): SandboxdError {
  if (err instanceof SandboxdError) return err;
  const e = err as Partial<ServiceError>;
  if (typeof e.code !== "number") {
    return new SandboxdError(Code.UNKNOWN, err instanceof Error ? err.message : String(err));
  }
  const details: ErrorDetails = {};
  const raw = e.metadata instanceof Metadata ? e.metadata.get("grpc-status-details-bin")[0] : undefined;
  if (raw instanceof Buffer) {
    for (const any of RpcStatus.decode(raw).details) {
      const name = any.typeUrl.startsWith(TYPE_PREFIX) ? any.typeUrl.slice(TYPE_PREFIX.length) : "";
      if (name === "RetryInfo") {
        const d = RetryInfo.decode(any.value).retryDelay;
        details.retryDelayMs = d ? d.seconds * 1000 + d.nanos / 1e6 : 0;
      } else if (name === "QuotaFailure") {
        details.quota = QuotaFailure.decode(any.value).violations.map((v) => ({ subject: v.subject, description: v.description }));
      } else if (name === "ErrorInfo") {
        const info = ErrorInfo.decode(any.value);
        details.reason = info.reason;
        details.metadata = { ...info.metadata };
      } else if (name === "BadRequest") {
        details.fieldViolations = Object.fromEntries(
          BadRequest.decode(any.value).fieldViolations.map((v) => [v.field, v.description]),
        );
      }
    }
  }
  const cls = CLASSES[e.code] ?? SandboxdError;
  return new cls(e.code, e.details ?? e.message ?? "", details);
}

/** Thrown by Result.raiseForStatus for a run that was not OK. */
export class RunFailed extends Error {
  constructor(readonly result: { runId: string; status: string; message: string }) {
    super(`run ${result.runId}: ${result.status}: ${result.message}`);
    this.name = "RunFailed";
  }
}

/** A bundle that does not verify; the message says why. */
export class BundleInvalid extends Error {
  constructor(message: string) {
    super(message);
    this.name = "BundleInvalid";
  }
}

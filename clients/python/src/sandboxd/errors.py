"""Errors: one exception class per gRPC status class, carrying what the
daemon's refusal says a caller can act on.

What a program does is never an exception: a program that exits 1, times
out or runs out of memory is a :class:`~sandboxd.Result` with that status.
These are sandboxd's own answers: a bad request (the field named), a caller
not granted, a daemon busy (when to retry, the quota met), a run held by
another daemon of a cluster (where it is).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import grpc

from sandboxd.rpc import error_details_pb2, status_pb2

# The ErrorInfo reasons of sandboxd's domain (server/errors.go).
REASON_ELSEWHERE = "ELSEWHERE"
REASON_IMAGE_NOT_PRESENT = "IMAGE_NOT_PRESENT"

# A field path as the daemon's messages start with it:
# "options.limits.memory_bytes: ...", "files[0].path: ...".
_FIELD = re.compile(r"^([a-z_][a-z0-9_]*(?:\[\d+\])?(?:\.[a-z_][a-z0-9_]*(?:\[\d+\])?)*): ")


@dataclass(frozen=True)
class QuotaViolation:
    """One quota a refusal met: ``subject`` is ``sandboxd`` or
    ``tenant:NAME``, ``description`` starts with the quota's name."""

    subject: str
    description: str


@dataclass(frozen=True)
class Redirect:
    """Another daemon of the cluster holds the run or session: call
    ``address``. The clients follow it once by themselves."""

    address: str
    daemon: str
    kind: str
    id: str


class SandboxdError(Exception):
    """An answer of the daemon that is not a run's result.

    ``code`` is the gRPC status code, ``message`` the daemon's words; the
    details it attached are decoded into ``retry_delay``, ``quota``,
    ``reason``/``metadata`` and ``redirect`` when present.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        retry_delay: float | None = None,
        quota: list[QuotaViolation] | None = None,
        reason: str = "",
        metadata: dict[str, str] | None = None,
        field_violations: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        #: Seconds the daemon asks the caller to wait before retrying.
        self.retry_delay = retry_delay
        #: The quotas met (RESOURCE_EXHAUSTED).
        self.quota = quota or []
        #: The ErrorInfo reason, e.g. ``ELSEWHERE`` or ``IMAGE_NOT_PRESENT``.
        self.reason = reason
        self.metadata = metadata or {}
        #: Fields named by a BadRequest detail, field -> description.
        self.field_violations = field_violations or {}

    @property
    def field(self) -> str | None:
        """The request field the error names, e.g. ``files[0].path``."""
        if self.field_violations:
            return next(iter(self.field_violations))
        m = _FIELD.match(self.message)
        return m.group(1) if m else None

    @property
    def redirect(self) -> Redirect | None:
        """Where the run or session is, when another daemon holds it."""
        if self.reason != REASON_ELSEWHERE:
            return None
        md = self.metadata
        return Redirect(md.get("address", ""), md.get("daemon", ""), md.get("kind", ""), md.get("id", ""))

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


class InvalidArgument(SandboxdError):
    """The request is wrong; :attr:`field` names what."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(SandboxdError):
    """No such run, session, bundle or file (or not the caller's)."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(SandboxdError):
    """An idempotency key already names another request's run."""

    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(SandboxdError):
    """The caller is not granted what it asked for."""

    code = grpc.StatusCode.PERMISSION_DENIED


class Unauthenticated(SandboxdError):
    """No bearer token or client certificate that names a caller."""

    code = grpc.StatusCode.UNAUTHENTICATED


class ResourceExhausted(SandboxdError):
    """Busy, or a quota met: :attr:`retry_delay` says when to retry and
    :attr:`quota` which quota."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(SandboxdError):
    """The daemon cannot do it in its state: an image not built, a runtime
    not installed, a run held by another daemon (:attr:`redirect`)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(SandboxdError):
    """The daemon is not reachable, or draining (:attr:`retry_delay`)."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(SandboxdError):
    """The call's own timeout passed (not the program's: that is a result)."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Cancelled(SandboxdError):
    """The call was cancelled."""

    code = grpc.StatusCode.CANCELLED


class Internal(SandboxdError):
    """sandboxd's own failure."""

    code = grpc.StatusCode.INTERNAL


class BundleInvalid(Exception):
    """A bundle that does not verify; the message says why."""


_CLASSES: dict[grpc.StatusCode, type[SandboxdError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        Unauthenticated,
        ResourceExhausted,
        FailedPrecondition,
        Unavailable,
        DeadlineExceeded,
        Cancelled,
        Internal,
    )
}

_TYPE_PREFIX = "type.googleapis.com/google.rpc."


def from_rpc_error(err: grpc.RpcError) -> SandboxdError:
    """The exception for a failed call, its status details decoded."""
    code: grpc.StatusCode = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN  # type: ignore[attr-defined]
    message: str = err.details() if hasattr(err, "details") else str(err)  # type: ignore[attr-defined]
    kw: dict[str, Any] = {}
    for detail in _details(err):
        name = detail.type_url[len(_TYPE_PREFIX):] if detail.type_url.startswith(_TYPE_PREFIX) else ""
        if name == "RetryInfo":
            info = error_details_pb2.RetryInfo.FromString(detail.value)
            kw["retry_delay"] = info.retry_delay.ToTimedelta().total_seconds()
        elif name == "QuotaFailure":
            q = error_details_pb2.QuotaFailure.FromString(detail.value)
            kw["quota"] = [QuotaViolation(v.subject, v.description) for v in q.violations]
        elif name == "ErrorInfo":
            e = error_details_pb2.ErrorInfo.FromString(detail.value)
            kw["reason"], kw["metadata"] = e.reason, dict(e.metadata)
        elif name == "BadRequest":
            b = error_details_pb2.BadRequest.FromString(detail.value)
            kw["field_violations"] = {v.field: v.description for v in b.field_violations}
    cls = _CLASSES.get(code, SandboxdError)
    return cls(message or "", code=code, **kw)


def _details(err: grpc.RpcError) -> list[Any]:
    """The google.rpc.Status details in a call's trailers."""
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None  # type: ignore[attr-defined]
    for key, value in trailers or ():
        if key == "grpc-status-details-bin":
            return list(status_pb2.Status.FromString(value).details)
    return []

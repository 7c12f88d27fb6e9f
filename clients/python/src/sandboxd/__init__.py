"""sandboxd: run untrusted, model-written code in fresh containers.

    >>> from sandboxd import Client
    >>> with Client() as c:
    ...     print(c.run_code("print(6 * 7)").text)
    42

:class:`Client` is synchronous; :mod:`sandboxd.aio` has the same surface
for asyncio. Errors are in :mod:`sandboxd.errors`, bundles in
:mod:`sandboxd.bundle`.
"""

from sandboxd._judge import Case, CaseResult, Checker, Compile, Judgement, Submission, Verdict
from sandboxd._process import Attachment, Output as ProcessOutput, Port, Process, ProcessInfo
from sandboxd._request import File, Network, Rule
from sandboxd._types import (
    Display,
    FileInfo,
    Inventory,
    KernelError,
    Limits,
    NetworkEvent,
    Output,
    OutputFile,
    Result,
    RunFailed,
    RunInfo,
    RunState,
    SessionCall,
    SessionInfo,
    SessionState,
    Started,
    Status,
    Stderr,
    Stdout,
)
from sandboxd._tools import Tool, tool
from sandboxd.bundle import Bundle, verify
from sandboxd.client import Client, Files, RunHandle, Session
from sandboxd.errors import (
    AlreadyExists,
    BundleInvalid,
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuotaViolation,
    Redirect,
    ResourceExhausted,
    SandboxdError,
    Unauthenticated,
    Unavailable,
)

__all__ = [
    "AlreadyExists",
    "Attachment",
    "Case",
    "CaseResult",
    "Checker",
    "Compile",
    "Judgement",
    "Submission",
    "Verdict",
    "Bundle",
    "BundleInvalid",
    "Cancelled",
    "Client",
    "DeadlineExceeded",
    "Display",
    "FailedPrecondition",
    "File",
    "FileInfo",
    "Files",
    "Internal",
    "InvalidArgument",
    "Inventory",
    "KernelError",
    "Limits",
    "Network",
    "NetworkEvent",
    "NotFound",
    "Output",
    "OutputFile",
    "PermissionDenied",
    "Port",
    "Process",
    "ProcessInfo",
    "ProcessOutput",
    "QuotaViolation",
    "Redirect",
    "ResourceExhausted",
    "Result",
    "Rule",
    "RunFailed",
    "RunHandle",
    "RunInfo",
    "RunState",
    "SandboxdError",
    "Session",
    "SessionCall",
    "SessionInfo",
    "SessionState",
    "Started",
    "Status",
    "Stderr",
    "Stdout",
    "Tool",
    "Unauthenticated",
    "Unavailable",
    "tool",
    "verify",
]

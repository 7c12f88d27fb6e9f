"""The values a client hands back: results, events, sessions, files. They
are plain dataclasses made from the API's messages, so that a caller never
meets a protobuf type, a Duration object or a missing zero."""

from __future__ import annotations

import base64
import enum
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Optional

from sandboxd.v1 import sandboxd_pb2 as pb


class Output(bytes):
    """A stream's bytes as the program wrote them (any bytes, not only
    UTF-8); :attr:`text` decodes them."""

    @property
    def text(self) -> str:
        return self.decode("utf-8", errors="replace")


class Status(enum.Enum):
    """How a run ended."""

    UNSPECIFIED = 0
    OK = 1
    NONZERO_EXIT = 2
    TIMEOUT = 3
    OOM_KILLED = 4
    OUTPUT_LIMIT = 5
    CANCELLED = 6
    KILLED_BY_SIGNAL = 7
    RUNTIME_ERROR = 8
    KERNEL_DIED = 9
    LOST = 10
    COMPILE_ERROR = 11


class RunState(enum.Enum):
    UNSPECIFIED = 0
    RUNNING = 1
    FINISHED = 2


class SessionState(enum.Enum):
    UNSPECIFIED = 0
    ACTIVE = 1
    DELETED = 2
    EXPIRED = 3
    FAILED = 4
    LOST = 5
    PAUSED = 6


@dataclass(frozen=True)
class Limits:
    """A run's limits. Zero fields are the daemon's defaults in a request;
    in an answer, every field is what the run got."""

    memory_bytes: int = 0
    cpu_millis: int = 0
    pids: int = 0
    timeout: float = 0.0  # seconds
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    disk_bytes: int = 0

    def to_proto(self) -> pb.Limits:
        return pb.Limits(
            memory_bytes=self.memory_bytes,
            cpu_millis=self.cpu_millis,
            pids=self.pids,
            timeout_ms=round(self.timeout * 1000),
            stdout_bytes=self.stdout_bytes,
            stderr_bytes=self.stderr_bytes,
            disk_bytes=self.disk_bytes,
        )

    @classmethod
    def from_proto(cls, m: pb.Limits) -> Limits:
        return cls(m.memory_bytes, m.cpu_millis, m.pids, m.timeout_ms / 1000, m.stdout_bytes, m.stderr_bytes, m.disk_bytes)


@dataclass(frozen=True)
class Started:
    """The first event of a run: its id and what it runs on."""

    run_id: str
    limits: Limits
    image: str
    image_digest: str
    runtime: str
    runtime_version: str
    backend: str
    started_at: Optional[datetime]
    prestarted: bool
    preimported: list[str]

    @classmethod
    def from_proto(cls, m: pb.Started) -> Started:
        return cls(
            m.run_id,
            Limits.from_proto(m.limits),
            m.image,
            m.image_digest,
            m.runtime,
            m.runtime_version,
            m.backend,
            m.started_at.ToDatetime() if m.HasField("started_at") else None,
            m.prestarted,
            list(m.preimported),
        )


@dataclass(frozen=True)
class Stdout:
    """Bytes the program wrote to stdout, as they came."""

    data: bytes


@dataclass(frozen=True)
class Stderr:
    """Bytes the program wrote to stderr, as they came."""

    data: bytes


@dataclass(frozen=True)
class NetworkEvent:
    """A decision of the egress gateway for an allow-listed run, as it now
    stands: streamed when it is made, and again with the same ``index``
    when its connection ends (its bytes) or is cut."""

    index: int
    time: Optional[datetime]
    #: ``dns`` or ``connect``.
    kind: str
    name: str
    #: Where the name came from: dns, connect, http, sni, host or address.
    via: str
    port: int
    addr: str
    allowed: bool
    rule: str
    reason: str
    bytes_out: int
    bytes_in: int
    #: The operator's secrets the gateway added to the connection's
    #: requests (names, never values), how many requests got one, and how
    #: many times a response carried one back, masked.
    secrets: tuple[str, ...] = ()
    injections: int = 0
    masked: int = 0

    @classmethod
    def from_proto(cls, m: pb.NetworkEvent) -> NetworkEvent:
        return cls(
            m.index,
            m.time.ToDatetime() if m.HasField("time") else None,
            m.kind,
            m.name,
            m.via,
            m.port,
            m.addr,
            m.allowed,
            m.rule,
            m.reason,
            m.bytes_out,
            m.bytes_in,
            tuple(m.secrets),
            m.injections,
            m.masked,
        )


@dataclass(frozen=True)
class OutputFile:
    """A file the run left in /workspace, stored in its bundle unless
    ``omitted`` says why not."""

    path: str
    type: str
    size: int
    sha256: str
    omitted: str

    @classmethod
    def from_proto(cls, m: pb.OutputFile) -> OutputFile:
        return cls(m.path, m.type, m.size, m.sha256, m.omitted)


@dataclass
class Display:
    """What a session's code displayed (``display(...)``, a chart): its
    data by MIME type; binary types are files of the call's bundle."""

    data: dict[str, str]
    files: dict[str, str]  # MIME type -> path in the bundle's output
    _fetch: Optional[Callable[[str], bytes]] = field(default=None, repr=False, compare=False)

    def bytes(self, mime: str) -> bytes | None:
        """The display's bytes of one MIME type, if it has that type."""
        if mime in self.files and self._fetch is not None:
            return self._fetch(self.files[mime])
        if mime in self.data:
            value = self.data[mime]
            return value.encode() if mime.startswith("text/") else base64.b64decode(value)
        return None

    @property
    def png(self) -> bytes | None:
        """The PNG image of a chart, fetched from the call's bundle."""
        return self.bytes("image/png")


@dataclass(frozen=True)
class KernelError:
    """The exception a session call's code raised."""

    name: str
    value: str
    traceback: list[str]


@dataclass(frozen=True)
class SessionCall:
    """A call's place in its session's chain of bundles."""

    session_id: str
    seq: int
    parent_bundle: str
    workspace_before: str
    workspace_after: str


class RunFailed(Exception):
    """Raised by :meth:`Result.raise_for_status` for a run that was not OK."""

    def __init__(self, result: Result) -> None:
        super().__init__(f"run {result.run_id}: {result.status.name}: {result.message}")
        self.result = result


@dataclass
class Result:
    """How a run ended, with all it wrote (up to its byte caps)."""

    run_id: str
    status: Status
    exit_code: int
    signal: int
    message: str
    stdout: Output
    stderr: Output
    stdout_total: int
    stderr_total: int
    stdout_truncated: bool
    stderr_truncated: bool
    duration: float  # seconds
    queued: float  # seconds
    peak_memory_bytes: int
    limits: Limits
    outputs: list[OutputFile]
    bundle_digest: str
    bundle_error: str
    reproducible_digest: str
    start: str
    cold_reason: str
    tenant: str
    network_connections: int
    network_denied: int
    #: Bytes the program sent and received through the egress gateway.
    network_bytes_out: int = 0
    network_bytes_in: int = 0
    #: How many tools the program called.
    tool_calls: int = 0
    started: Optional[Started] = None
    session: Optional[SessionCall] = None
    #: A session call's kernel reply: the last value by MIME type.
    values: dict[str, str] = field(default_factory=dict)
    displays: list[Display] = field(default_factory=list)
    error: Optional[KernelError] = None
    execution_count: int = 0

    @property
    def ok(self) -> bool:
        """The program ran and exited 0."""
        return self.status is Status.OK

    @property
    def text(self) -> str:
        """stdout as text."""
        return self.stdout.text

    @property
    def value(self) -> str | None:
        """A session call's last expression, as Python's or Node's REPL
        prints it (``text/plain``)."""
        return self.values.get("text/plain")

    def raise_for_status(self) -> Result:
        """Raise :class:`RunFailed` unless the run is OK; return self."""
        if not self.ok:
            raise RunFailed(self)
        return self


def result_from_proto(
    m: pb.Result,
    stdout: bytes,
    stderr: bytes,
    started: Started | None,
    fetch: Callable[[str, str], bytes] | None = None,
) -> Result:
    """The Result of a run's result message and the output it streamed;
    fetch(bundle_digest, path) reads a display's file when asked."""
    digest = m.bundle_digest
    displays = []
    for d in m.kernel.displays:
        files = {f.mime: f.path for f in d.files}
        getter = (lambda path, digest=digest: fetch(digest, path)) if fetch and digest else None
        displays.append(Display(dict(d.data), files, getter))
    err = m.kernel.error
    session = m.session
    return Result(
        run_id=m.run_id,
        status=Status(m.status),
        exit_code=m.exit_code,
        signal=m.signal,
        message=m.message,
        stdout=Output(stdout),
        stderr=Output(stderr),
        stdout_total=m.stdout_total,
        stderr_total=m.stderr_total,
        stdout_truncated=m.stdout_truncated,
        stderr_truncated=m.stderr_truncated,
        duration=m.duration.ToTimedelta().total_seconds(),
        queued=m.queued.ToTimedelta().total_seconds(),
        peak_memory_bytes=m.peak_memory_bytes,
        limits=Limits.from_proto(m.limits),
        outputs=[OutputFile.from_proto(f) for f in m.files],
        bundle_digest=digest,
        bundle_error=m.bundle_error,
        reproducible_digest=m.reproducible_digest,
        start=m.start,
        cold_reason=m.cold_reason,
        tenant=m.tenant,
        network_connections=m.network_connections,
        network_denied=m.network_denied,
        network_bytes_out=m.network_bytes_out,
        network_bytes_in=m.network_bytes_in,
        tool_calls=m.tool_calls,
        started=started,
        session=SessionCall(session.session_id, session.seq, session.parent_bundle, session.workspace_before, session.workspace_after)
        if m.HasField("session")
        else None,
        values=dict(m.kernel.result),
        displays=displays,
        error=KernelError(err.name, err.value, list(err.traceback)) if m.kernel.HasField("error") else None,
        execution_count=m.kernel.execution_count,
    )


@dataclass(frozen=True)
class RunInfo:
    """A run as GetRun, WaitRun and ListRuns report it (without output)."""

    run_id: str
    state: RunState
    started: Optional[Started]
    result: Optional[Result]
    labels: dict[str, str]
    error: str
    tenant: str
    #: An allow-listed run's network log (GetRun and WaitRun): so far while
    #: it runs, all of it once it has ended.
    network: list[NetworkEvent] = field(default_factory=list)

    @classmethod
    def from_proto(cls, m: pb.GetRunResponse) -> RunInfo:
        started = Started.from_proto(m.started) if m.HasField("started") else None
        result = result_from_proto(m.result, b"", b"", started) if m.HasField("result") else None
        network = [NetworkEvent.from_proto(e) for e in m.network]
        return cls(m.run_id, RunState(m.state), started, result, dict(m.labels), m.error, m.tenant, network)


@dataclass(frozen=True)
class SessionInfo:
    """A session as the daemon reports it."""

    session_id: str
    state: SessionState
    reason: str
    language: str
    image: str
    image_digest: str
    runtime: str
    limits: Limits
    labels: dict[str, str]
    created_at: Optional[datetime]
    expires_at: Optional[datetime]
    idle_expires_at: Optional[datetime]
    calls: int
    last_bundle: str
    tenant: str
    #: The rules in force ("host:ports" or "cidr:ports"), and the secrets
    #: the gateway adds: the session's own, or what set_network changed
    #: them to.
    network_rules: tuple[str, ...] = ()
    network_secrets: tuple[str, ...] = ()

    @classmethod
    def from_proto(cls, m: pb.SessionInfo) -> SessionInfo:
        def when(name: str) -> datetime | None:
            return getattr(m, name).ToDatetime() if m.HasField(name) else None

        return cls(
            m.session_id,
            SessionState(m.state),
            m.reason,
            m.language,
            m.image,
            m.image_digest,
            m.runtime,
            Limits.from_proto(m.limits),
            dict(m.labels),
            when("created_at"),
            when("expires_at"),
            when("idle_expires_at"),
            m.calls,
            m.last_bundle,
            m.tenant,
            tuple(_rule(r) for r in m.network.rules),
            tuple(m.network.secrets),
        )


def _rule(r: pb.NetworkRule) -> str:
    target = r.host or r.cidr
    return f"{target}:{','.join(str(p) for p in r.ports)}" if r.ports else target


@dataclass(frozen=True)
class FileInfo:
    """A file of a session's /workspace."""

    path: str
    type: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Inventory:
    """What the daemon offers: languages, images, runtimes, limits."""

    languages: dict[str, str]  # language -> image
    images: list[dict[str, Any]]
    runtimes: list[str]
    default_runtime: str
    backend: str
    default_limits: Limits
    max_limits: Limits
    #: The operator's tools the caller may let programs call: name,
    #: description, risk ("read", "write", "high") and input_schema.
    tools: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_proto(cls, m: pb.ListImagesResponse) -> Inventory:
        return cls(
            {lang.name: lang.image for lang in m.languages},
            [{"name": i.name, "digest": i.digest, "present": i.present, "recipe_digest": i.recipe_digest} for i in m.images],
            [r.name for r in m.runtimes if r.allowed],
            next((r.name for r in m.runtimes if r.is_default), ""),
            m.backend,
            Limits.from_proto(m.default_limits),
            Limits.from_proto(m.max_limits),
            [
                {
                    "name": t.name,
                    "description": t.description,
                    "risk": pb.ToolRisk.Name(t.risk).removeprefix("TOOL_RISK_").lower(),
                    "input_schema": json.loads(t.input_schema_json or "{}"),
                }
                for t in m.tools
            ],
        )

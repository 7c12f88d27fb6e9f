"""Judging for rewards: a submission and its test cases, the verdict of
each case, and a batch's events. Shared by :class:`sandboxd.Client` and
:class:`sandboxd.aio.Client`, which send the messages made here on one
``Evaluate`` stream."""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

import grpc

from sandboxd._request import FilesArg, LimitsArg, _files, _limits
from sandboxd._types import Output, Status
from sandboxd.errors import _CLASSES, SandboxdError
from sandboxd.v1 import sandboxd_pb2 as pb

Text = Union[str, bytes]


def _bytes(v: Optional[Text]) -> Optional[bytes]:
    if v is None:
        return None
    return v.encode() if isinstance(v, str) else bytes(v)


class Verdict(enum.Enum):
    """What a case's run says of the program. ``SANDBOX_ERROR`` is
    sandboxd's or the host's failure, never the program's: retry the
    submission, never reward it."""

    UNSPECIFIED = 0
    ACCEPTED = 1
    WRONG_ANSWER = 2
    TIME_LIMIT = 3
    MEMORY_LIMIT = 4
    RUNTIME_ERROR = 5
    OUTPUT_LIMIT = 6
    COMPILE_ERROR = 7
    SANDBOX_ERROR = 8
    SKIPPED = 9


_COMPARE = {"lines": pb.Comparison.LINES, "exact": pb.Comparison.EXACT, "numbers": pb.Comparison.NUMBERS, "checker": pb.Comparison.CHECKER}
_ISOLATION = {"fresh": pb.ISOLATION_FRESH, "shared": pb.ISOLATION_SHARED}


@dataclass(frozen=True)
class Case:
    """One test: ``stdin``, ``args`` and ``files`` ({path: content} under
    /input) for the program, and the stdout it must print, held against it
    by ``compare`` ("lines", the default, ignores trailing whitespace;
    "exact"; "numbers" within ``absolute`` + ``relative`` × |expected|;
    "checker": the submission's checker decides). Or ``test``: code run
    after the submission's (HumanEval's ``check(entry_point)``), whose exit
    decides. ``timeout`` (seconds) and ``limits`` override the
    submission's."""

    stdin: Optional[Text] = None
    expected: Optional[Text] = None
    args: Sequence[str] = ()
    files: FilesArg = None
    compare: str = "lines"
    absolute: float = 0.0
    relative: float = 0.0
    test: str = ""
    name: str = ""
    timeout: Optional[float] = None
    limits: LimitsArg = None

    def to_proto(self) -> pb.TestCase:
        if self.compare not in _COMPARE:
            raise ValueError(f"compare: {self.compare!r} is not one of {', '.join(_COMPARE)}")
        m = pb.TestCase(
            name=self.name,
            args=list(self.args),
            files=_files(self.files),
            test=self.test,
            compare=pb.Comparison(kind=_COMPARE[self.compare], absolute=self.absolute, relative=self.relative),
        )
        limits = _limits(self.limits, self.timeout)
        if limits is not None:
            m.limits.CopyFrom(limits)
        stdin, expected = _bytes(self.stdin), _bytes(self.expected)
        if stdin is not None:
            m.stdin = stdin
        if expected is not None:
            m.expected_stdout = expected
        return m


@dataclass(frozen=True)
class Checker:
    """A program that decides a case in a sandbox of its own: it reads
    /input/input, /input/expected and /input/output and exits 0 to accept,
    1 to reject (its first line says why)."""

    code: str
    language: str = "python"


@dataclass(frozen=True)
class Submission:
    """A program and its cases: ``code`` in ``language``, or ``argv`` and
    ``files`` (a command). ``isolation`` is "fresh" (a sandbox per case,
    the default) or "shared" (all cases in one, cheaper). A retry with the
    same ``idempotency_key`` gets the first judgement."""

    code: str = ""
    cases: Sequence[Case] = ()
    language: str = "python"
    id: str = ""
    argv: Sequence[str] = ()
    files: FilesArg = None
    checker: Optional[Checker] = None
    image: str = ""
    runtime: str = ""
    timeout: Optional[float] = None
    limits: LimitsArg = None
    env: Mapping[str, str] = field(default_factory=dict)
    seed: Optional[int] = None
    stop_on_failure: bool = False
    isolation: str = "fresh"
    idempotency_key: str = ""

    def to_proto(self) -> pb.Submission:
        if self.isolation not in _ISOLATION:
            raise ValueError(f"isolation: {self.isolation!r} is not fresh or shared")
        m = pb.Submission(
            id=self.id,
            language=self.language if self.code else "",
            code=self.code,
            argv=list(self.argv),
            files=_files(self.files),
            cases=[c.to_proto() for c in self.cases],
            image=self.image,
            runtime=self.runtime,
            env=dict(self.env),
            stop_on_failure=self.stop_on_failure,
            isolation=_ISOLATION[self.isolation],
            idempotency_key=self.idempotency_key,
        )
        if self.checker is not None:
            m.checker.CopyFrom(pb.Checker(language=self.checker.language, code=self.checker.code))
        limits = _limits(self.limits, self.timeout)
        if limits is not None:
            m.limits.CopyFrom(limits)
        if self.seed is not None:
            m.seed = self.seed
        return m


@dataclass(frozen=True)
class CaseResult:
    """How one case went: its verdict and why, how its run ended, its time
    and peak memory, and the first KiB of its output."""

    index: int
    name: str
    verdict: Verdict
    message: str
    status: Status
    exit_code: int
    signal: int
    duration: float
    peak_memory_bytes: int
    stdout: Output
    stderr: Output
    stdout_truncated: bool
    stderr_truncated: bool
    run_id: str
    bundle_digest: str

    @classmethod
    def from_proto(cls, m: pb.CaseResult) -> CaseResult:
        return cls(
            m.index, m.name, Verdict(m.verdict), m.message, Status(m.status), m.exit_code, m.signal,
            m.duration.ToTimedelta().total_seconds(), m.peak_memory_bytes, Output(m.stdout), Output(m.stderr),
            m.stdout_truncated, m.stderr_truncated, m.run_id, m.bundle_digest,
        )


@dataclass(frozen=True)
class Compile:
    """A compiled submission's one compile."""

    ok: bool
    message: str
    duration: float
    stdout: Output
    stderr: Output
    bundle_digest: str


@dataclass(frozen=True)
class Judgement:
    """A submission's judging. :attr:`verdict` is ACCEPTED when every case
    is, SANDBOX_ERROR when any case met one (retry it), else the first
    failing case's; :attr:`score` is the share of cases accepted."""

    submission_id: str
    judgement_id: str
    verdict: Verdict
    passed: int
    total: int
    first_failing: Optional[int]
    cases: list[CaseResult]
    compile: Optional[Compile]
    isolation: str
    image: str
    runtime: str
    duration: float
    bundle_digest: str
    retried: bool

    @property
    def accepted(self) -> bool:
        return self.verdict is Verdict.ACCEPTED

    @property
    def score(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def sandbox_error(self) -> bool:
        """Whether sandboxd failed on some case: the judgement says nothing
        of the program; judge it again."""
        return self.verdict is Verdict.SANDBOX_ERROR

    @classmethod
    def from_proto(cls, m: pb.Judgement) -> Judgement:
        comp = None
        if m.HasField("compile"):
            c = m.compile
            comp = Compile(c.ok, c.message, c.duration.ToTimedelta().total_seconds(), Output(c.stdout), Output(c.stderr), c.bundle_digest)
        return cls(
            m.submission_id, m.judgement_id, Verdict(m.verdict), m.passed, m.total,
            m.first_failing if m.first_failing >= 0 else None,
            [CaseResult.from_proto(c) for c in m.cases], comp,
            {pb.ISOLATION_FRESH: "fresh", pb.ISOLATION_SHARED: "shared"}.get(m.isolation, "fresh"),
            m.image, m.runtime, m.duration.ToTimedelta().total_seconds(), m.bundle_digest, m.retried,
        )


def submission_error(m: pb.SubmissionError) -> SandboxdError:
    """The error a submission alone would have failed with."""
    code = grpc.StatusCode.UNKNOWN
    for c in grpc.StatusCode:
        if c.value[0] == m.code:
            code = c
    kw: dict[str, Any] = {}
    if m.HasField("retry_after"):
        kw["retry_delay"] = m.retry_after.ToTimedelta().total_seconds()
    return _CLASSES.get(code, SandboxdError)(m.message, code=code, **kw)


#: What a batch returns for each submission: its judgement, or the error it
#: could not be judged for.
Outcome = Union[Judgement, SandboxdError]
Progress = Callable[[int, int, Optional[Outcome]], Any]


def submissions(items: Iterable[Union[Submission, Mapping[str, Any]]]) -> list[Submission]:
    """Submissions from Submission values or dicts of their fields, each
    with an id (its place in the batch when it has none)."""
    out = []
    for i, s in enumerate(items):
        if isinstance(s, Mapping):
            s = Submission(**s)
        if not s.id:
            s = Submission(**{**s.__dict__, "id": str(i)})
        out.append(s)
    ids = [s.id for s in out]
    if len(set(ids)) != len(ids):
        raise ValueError("submissions: two share an id; give each its own")
    return out


class Batch:
    """The state of one batch: what each submission came to, in the
    batch's order, and the progress as cases are decided."""

    def __init__(self, subs: list[Submission], progress: Union[bool, Progress, None]) -> None:
        self.subs = subs
        self.by_id = {s.id: i for i, s in enumerate(subs)}
        self.outcomes: list[Optional[Outcome]] = [None] * len(subs)
        self.total = sum(len(s.cases) for s in subs)
        self.done = 0
        self.reported: dict[str, int] = {}
        self.progress: Optional[Progress] = _bar if progress is True else (progress or None)

    def event(self, ev: pb.EvaluateEvent) -> None:
        kind = ev.WhichOneof("event")
        outcome: Optional[Outcome] = None
        if kind == "case_done":
            sid = ev.case_done.submission_id
            self.reported[sid] = self.reported.get(sid, 0) + 1
            self.done += 1
        elif kind == "judgement":
            outcome = Judgement.from_proto(ev.judgement)
            self._end(ev.judgement.submission_id, outcome)
        elif kind == "error":
            outcome = submission_error(ev.error)
            self._end(ev.error.submission_id, outcome)
        if self.progress is not None:
            self.progress(min(self.done, self.total), self.total, outcome)

    def _end(self, sid: str, outcome: Outcome) -> None:
        i = self.by_id.get(sid)
        if i is None:
            return
        self.outcomes[i] = outcome
        # A submission's cases all count once it has ended: those skipped,
        # a compile error's, a refused submission's.
        self.done += len(self.subs[i].cases) - self.reported.pop(sid, 0)

    def pending(self) -> list[int]:
        return [i for i, o in enumerate(self.outcomes) if o is None]

    def retriable(self, within_deadline: Callable[[float], bool]) -> tuple[list[int], float]:
        """The refused submissions a retry may send again (refused with a
        delay, before any of them was judged), and how long to wait."""
        again, wait = [], 0.0
        for i, o in enumerate(self.outcomes):
            if isinstance(o, SandboxdError) and o.retry_delay is not None and o.code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE):
                again.append(i)
                wait = max(wait, o.retry_delay)
        if again and not within_deadline(wait):
            return [], 0.0
        for i in again:
            self.outcomes[i] = None
            self.done -= len(self.subs[i].cases)
        return again, wait


def _bar(done: int, total: int, _: Optional[Outcome]) -> None:
    """A progress bar on stderr: cases decided of the batch's."""
    width = 30
    filled = width * done // total if total else width
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} cases")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()

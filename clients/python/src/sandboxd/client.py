"""The synchronous client: runs, streams, detached runs, sessions, files
and bundles over one gRPC channel. :mod:`sandboxd.aio` is the same for
asyncio."""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator, Literal, Optional, Union, overload

import grpc

from sandboxd import _judge, _request, _tools
from sandboxd._judge import Case, Judgement, Outcome, Progress, Submission
from sandboxd._process import Port, Process, ProcessInfo
from sandboxd._connect import DEFAULT_RETRY_WITHIN, Retry, Settings, resolve
from sandboxd._tools import Confirm, Tool
from sandboxd._types import (
    FileInfo,
    Inventory,
    NetworkEvent,
    Result,
    RunInfo,
    RunState,
    SessionInfo,
    Started,
    Stderr,
    Stdout,
    result_from_proto,
)
from sandboxd.bundle import Bundle, verify
from sandboxd.errors import SandboxdError, Unavailable, from_rpc_error
from sandboxd.v1 import sandboxd_pb2 as pb
from sandboxd.v1 import sandboxd_pb2_grpc as pb_grpc

Event = Union[Started, Stdout, Stderr, NetworkEvent, Result]
OutputCallback = Callable[[bytes], Any]

#: Bytes per message when uploading a file.
_CHUNK = 1 << 20


class Client:
    """A client of a sandboxd daemon.

    ``addr`` is a unix socket path (``/run/sandboxd/sandboxd.sock``, the
    default, or ``unix:PATH``) or a TCP ``HOST:PORT``; without it,
    ``SANDBOXD_ADDR``. ``token`` (or ``token_file``, or ``SANDBOXD_TOKEN``,
    ``SANDBOXD_TOKEN_FILE``) is the bearer token a TCP listener asks for;
    ``tls_ca``, ``tls_cert`` and ``tls_key`` (or ``SANDBOXD_TLS_*``) make
    the connection TLS, mutual with a certificate. Refusals that name a
    delay (busy, draining) are retried for ``retry_within`` seconds (0: not
    at all); a call for a run or session another daemon of a cluster holds
    is made there, once.
    """

    def __init__(
        self,
        addr: Optional[str] = None,
        *,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        tls_ca: Optional[str] = None,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        retry_within: float = DEFAULT_RETRY_WITHIN,
    ) -> None:
        self._settings = resolve(addr, token, token_file, tls_ca, tls_cert, tls_key)
        self.retry_within = retry_within
        self._channel = self._dial(self._settings.target, peer=False)
        self._stub = pb_grpc.SandboxServiceStub(self._channel)
        self._peers: dict[str, pb_grpc.SandboxServiceStub] = {}
        self._peer_channels: list[grpc.Channel] = []
        self._lock = threading.Lock()

    def _dial(self, target: str, peer: bool) -> grpc.Channel:
        s: Settings = self._settings
        if s.credentials is not None:
            return grpc.secure_channel(target, s.credentials, options=s.options(peer))
        return grpc.insecure_channel(target, options=s.options(peer))

    def close(self) -> None:
        """Close the connections; a stream still open is cancelled."""
        with self._lock:
            for ch in self._peer_channels:
                ch.close()
            self._peer_channels.clear()
            self._peers.clear()
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # The one way every call is made: retried while refused, sent on once
    # when another daemon holds what it names.

    def _peer(self, address: str) -> pb_grpc.SandboxServiceStub:
        with self._lock:
            stub = self._peers.get(address)
            if stub is None:
                ch = self._dial(address, peer=True)
                self._peer_channels.append(ch)
                stub = self._peers[address] = pb_grpc.SandboxServiceStub(ch)
            return stub

    def _unary(self, method: str, request: Any) -> Any:
        policy = Retry(self.retry_within)
        stub, followed = self._stub, False
        while True:
            try:
                return getattr(stub, method)(request, metadata=self._settings.metadata(followed))
            except grpc.RpcError as e:
                stub, followed = self._again(policy, from_rpc_error(e), stub, followed)

    def _again(
        self, policy: Retry, err: SandboxdError, stub: pb_grpc.SandboxServiceStub, followed: bool
    ) -> tuple[pb_grpc.SandboxServiceStub, bool]:
        """Where to make a failed call again: on the same daemon after the
        refusal's delay, or once on the daemon that holds what it names.
        Otherwise the error is the call's answer."""
        wait = policy.wait(err)
        if wait is not None:
            time.sleep(wait)
            return stub, followed
        if err.redirect is not None and not followed:
            return self._peer(err.redirect.address), True
        raise err from None

    def _stream(self, method: str, request: Any) -> Iterator[Any]:
        policy = Retry(self.retry_within)
        stub, followed = self._stub, False
        while True:
            call = getattr(stub, method)(request, metadata=self._settings.metadata(followed))
            received = False
            try:
                for message in call:
                    received = True
                    yield message
                return
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            finally:
                # A caller that stops reading ends the call, and the
                # daemon cancels its run.
                call.cancel()
            if received:
                raise err
            stub, followed = self._again(policy, err, stub, followed)

    # Runs.

    def _events(self, method: str, request: Any) -> Iterator[Event]:
        return self._run_events(self._stream(method, request))

    def _run_events(self, messages: Iterable[pb.RunEvent]) -> Iterator[Event]:
        """A run's events from its stream's messages, the Result last."""
        started: Optional[Started] = None
        stdout: list[bytes] = []
        stderr: list[bytes] = []
        for ev in messages:
            kind = ev.WhichOneof("event")
            if kind == "started":
                started = Started.from_proto(ev.started)
                yield started
            elif kind == "stdout":
                stdout.append(ev.stdout)
                yield Stdout(ev.stdout)
            elif kind == "stderr":
                stderr.append(ev.stderr)
                yield Stderr(ev.stderr)
            elif kind == "network":
                yield NetworkEvent.from_proto(ev.network)
            elif kind == "result":
                yield result_from_proto(ev.result, b"".join(stdout), b"".join(stderr), started, self.get_file)
                return
        raise Unavailable("the daemon ended the run's stream without a result")

    def _collect(
        self, events: Iterable[Event], on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback]
    ) -> Result:
        for ev in events:
            if isinstance(ev, Stdout) and on_stdout is not None:
                on_stdout(ev.data)
            elif isinstance(ev, Stderr) and on_stderr is not None:
                on_stderr(ev.data)
            elif isinstance(ev, Result):
                return ev
        raise Unavailable("the daemon ended the run's stream without a result")

    def _detach(self, method: str, request: Any) -> RunHandle:
        for ev in self._stream(method, request):
            kind = ev.WhichOneof("event")
            if kind == "started":
                return RunHandle(self, ev.started.run_id, Started.from_proto(ev.started))
            if kind == "result":
                # Ended without starting (a keyed retry of a LOST run).
                return RunHandle(self, ev.result.run_id, None)
        raise Unavailable("the daemon answered a detached run without its start")

    @overload
    def run_code(self, code: str, language: str = ..., *, detach: Literal[False] = ..., **options: Any) -> Result: ...
    @overload
    def run_code(self, code: str, language: str = ..., *, detach: Literal[True], **options: Any) -> RunHandle: ...

    def run_code(
        self,
        code: str,
        language: str = "python",
        *,
        detach: bool = False,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        tools: Iterable[Union[str, Tool, Callable[..., Any]]] = (),
        confirm: Optional[Confirm] = None,
        **options: Any,
    ) -> Union[Result, RunHandle]:
        """Run ``code`` in a fresh container and return its :class:`Result`.

        Options: ``files`` ({path: bytes} under /input), ``limits``
        (:class:`Limits` or a dict), ``timeout`` (seconds), ``network``
        ("none", a policy name, ["host:port", ...] or :class:`Network`),
        ``env``, ``stdin``, ``workdir``, ``labels``, ``seed``, ``image``,
        ``runtime``, ``mounts``, ``interpreter`` ("fresh", "prestarted"),
        ``idempotency_key``. ``on_stdout``/``on_stderr`` get output as it
        comes. With ``detach=True`` the run goes on without the caller:
        a :class:`RunHandle` is returned once it started.

        ``tools`` are what the program may call with ``from sandboxd
        import tools``: names of the operator's tools ("orders.search",
        "orders.*"), and the caller's own functions (or :func:`tool`
        declarations), which it calls as ``tools.caller.NAME`` and which
        run here; ``confirm(tool, arguments)`` answers high-risk calls.
        """
        names, declared = _tools.split(tools)
        req = pb.RunCodeRequest(language=language, code=code, options=_request.options(detach=detach, tools=names, **options))
        if declared or confirm is not None:
            if detach:
                raise ValueError("detach: a run whose tools the caller answers cannot go on without the caller")
            return self._with_tools(req, declared, confirm, on_stdout, on_stderr)
        if detach:
            return self._detach("RunCode", req)
        return self._collect(self._events("RunCode", req), on_stdout, on_stderr)

    def _with_tools(
        self,
        req: Union[pb.RunCodeRequest, pb.RunCommandRequest],
        declared: list[Tool],
        confirm: Optional[Confirm],
        on_stdout: Optional[OutputCallback],
        on_stderr: Optional[OutputCallback],
    ) -> Result:
        """Run req on a RunWithTools stream, answering its calls of the
        caller's tools and its confirmations in threads as they come."""
        by_name = {t.name: t for t in declared}
        first = _tools.first_message(req, declared, confirm is not None)
        policy = Retry(self.retry_within)
        stub, followed = self._stub, False
        while True:
            answers: queue.Queue[Optional[pb.RunWithToolsRequest]] = queue.Queue()
            answers.put(first)

            def requests() -> Iterator[pb.RunWithToolsRequest]:
                while (m := answers.get()) is not None:
                    yield m

            call = stub.RunWithTools(requests(), metadata=self._settings.metadata(followed))
            pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="sandboxd-tool")
            received = False
            try:
                events = self._tool_events(call, by_name, confirm, answers, pool)
                for ev in events:
                    received = True
                    if isinstance(ev, Stdout) and on_stdout is not None:
                        on_stdout(ev.data)
                    elif isinstance(ev, Stderr) and on_stderr is not None:
                        on_stderr(ev.data)
                    elif isinstance(ev, Result):
                        return ev
                raise Unavailable("the daemon ended the run's stream without a result")
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            finally:
                answers.put(None)
                call.cancel()
                pool.shutdown(wait=False, cancel_futures=True)
            if received:
                raise err
            stub, followed = self._again(policy, err, stub, followed)

    def _tool_events(
        self, call: Any, by_name: dict[str, Tool], confirm: Optional[Confirm], answers: queue.Queue, pool: ThreadPoolExecutor
    ) -> Iterator[Event]:
        """The run's events of a RunWithTools stream; its questions are
        answered in pool, the answers put in answers."""

        def runs() -> Iterator[pb.RunEvent]:
            for ev in call:
                kind = ev.WhichOneof("event")
                if kind == "tool_call":
                    pool.submit(lambda c=ev.tool_call: answers.put(_tools.answer(by_name, c)))
                elif kind == "confirm":
                    pool.submit(lambda c=ev.confirm: answers.put(_tools.confirmation(confirm, c)))
                else:
                    yield ev.run

        return self._run_events(runs())

    def stream_code(self, code: str, language: str = "python", **options: Any) -> Iterator[Event]:
        """Run ``code``, yielding :class:`Started`, :class:`Stdout` and
        :class:`Stderr` events as they come (and an allow-listed run's
        :class:`NetworkEvent` s), then the :class:`Result`.
        Leaving the loop early cancels the run."""
        req = pb.RunCodeRequest(language=language, code=code, options=_request.options(**options))
        return self._events("RunCode", req)

    @overload
    def run_command(
        self, argv: Optional[Iterable[str]] = ..., *, shell: Optional[str] = ..., detach: Literal[False] = ..., **options: Any
    ) -> Result: ...
    @overload
    def run_command(
        self, argv: Optional[Iterable[str]] = ..., *, shell: Optional[str] = ..., detach: Literal[True], **options: Any
    ) -> RunHandle: ...

    def run_command(
        self,
        argv: Optional[Iterable[str]] = None,
        *,
        shell: Optional[str] = None,
        detach: bool = False,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        tools: Iterable[Union[str, Tool, Callable[..., Any]]] = (),
        confirm: Optional[Confirm] = None,
        **options: Any,
    ) -> Union[Result, RunHandle]:
        """Run a command, ``argv`` (a list) or a ``shell`` line, as
        :meth:`run_code` runs code; ``image`` picks its image."""
        names, declared = _tools.split(tools)
        req = _request.command(argv, shell, _request.options(detach=detach, tools=names, **options))
        if declared or confirm is not None:
            if detach:
                raise ValueError("detach: a run whose tools the caller answers cannot go on without the caller")
            return self._with_tools(req, declared, confirm, on_stdout, on_stderr)
        if detach:
            return self._detach("RunCommand", req)
        return self._collect(self._events("RunCommand", req), on_stdout, on_stderr)

    def stream_command(self, argv: Optional[Iterable[str]] = None, *, shell: Optional[str] = None, **options: Any) -> Iterator[Event]:
        """Run a command, yielding its events as :meth:`stream_code` does."""
        return self._events("RunCommand", _request.command(argv, shell, _request.options(**options)))

    def attach(self, run_id: str, stdout_offset: int = 0, stderr_offset: int = 0) -> Iterator[Event]:
        """Follow a run, live or ended, from the offsets of its streams:
        its start, its output from there, its result."""
        req = pb.AttachRunRequest(run_id=run_id, stdout_offset=stdout_offset, stderr_offset=stderr_offset)
        return self._events("AttachRun", req)

    def get_run(self, run_id: str) -> RunInfo:
        return RunInfo.from_proto(self._unary("GetRun", pb.GetRunRequest(run_id=run_id)))

    def wait_run(self, run_id: str) -> RunInfo:
        """Wait until a run has ended."""
        return RunInfo.from_proto(self._unary("WaitRun", pb.WaitRunRequest(run_id=run_id)))

    def cancel_run(self, run_id: str) -> RunState:
        return RunState(self._unary("CancelRun", pb.CancelRunRequest(run_id=run_id)).state)

    def list_runs(self) -> list[RunInfo]:
        """The caller's running and recent runs, newest first."""
        return [RunInfo.from_proto(r) for r in self._unary("ListRuns", pb.ListRunsRequest()).runs]

    def inventory(self) -> Inventory:
        """The daemon's languages, images, runtimes and limits."""
        return Inventory.from_proto(self._unary("ListImages", pb.ListImagesRequest()))

    # Judging.

    def evaluate(self, code: str, cases: Iterable[Case], language: str = "python", **options: Any) -> Judgement:
        """Judge ``code`` against ``cases`` and return its :class:`Judgement`:
        a verdict per case, each case in a fresh sandbox (``isolation=
        "shared"``: all in one). Options are :class:`Submission`'s
        (``checker``, ``timeout``, ``limits``, ``stop_on_failure``,
        ``idempotency_key``, ...). A submission that cannot be judged (bad
        input, a busy daemon past ``retry_within``) raises its error."""
        out = self.evaluate_many([Submission(code=code, cases=tuple(cases), language=language, **options)])[0]
        if isinstance(out, SandboxdError):
            raise out
        return out

    def evaluate_many(
        self, submissions: Iterable[Union[Submission, dict[str, Any]]], *, progress: Union[bool, Progress, None] = None
    ) -> list[Outcome]:
        """Judge a batch on one stream, at the daemon's concurrency, and
        return what each submission came to, in the batch's order: its
        :class:`Judgement`, or the :class:`SandboxdError` it could not be
        judged for (the batch goes on). Submissions refused with a delay
        (busy, a quota) are sent again after it, within ``retry_within``:
        a refused submission was not judged. ``progress=True`` draws a bar
        on stderr; a callable gets (cases decided, cases, the submission's
        end or None) as cases are decided."""
        batch = _judge.Batch(_judge.submissions(submissions), progress)
        deadline = time.monotonic() + self.retry_within
        send = list(range(len(batch.subs)))
        while send:
            requests = (pb.EvaluateRequest(submission=batch.subs[i].to_proto()) for i in send)
            call = self._stub.Evaluate(requests, metadata=self._settings.metadata(False))
            try:
                for ev in call:
                    batch.event(ev)
            except grpc.RpcError as e:
                err = from_rpc_error(e)
                for i in batch.pending():
                    batch.outcomes[i] = err
            finally:
                call.cancel()
            send, wait = batch.retriable(lambda w: time.monotonic() + w <= deadline)
            if send:
                time.sleep(wait)
        return [o if o is not None else Unavailable("the daemon ended the batch before this submission's judgement") for o in batch.outcomes]

    # Sessions.

    def session(
        self, language: str = "python", *, ttl: Optional[float] = None, idle_ttl: Optional[float] = None, **options: Any
    ) -> Session:
        """Create a session: one container, and a kernel that keeps its
        variables across calls. Use it as a context manager to delete it
        at the end. ``ttl`` and ``idle_ttl`` are seconds."""
        req = _request.create_session(language, ttl, idle_ttl, _request.options(**options))
        return Session(self, SessionInfo.from_proto(self._unary("CreateSession", req)))

    def get_session(self, session_id: str) -> Session:
        """A session created earlier, by its id."""
        return Session(self, SessionInfo.from_proto(self._unary("GetSession", pb.GetSessionRequest(session_id=session_id))))

    def list_sessions(self) -> list[SessionInfo]:
        return [SessionInfo.from_proto(s) for s in self._unary("ListSessions", pb.ListSessionsRequest()).sessions]

    def fork(self, bundle_digest: str) -> Session:
        """A new session in the state a call's bundle left its session
        in, rebuilt by replaying the chain of calls up to it."""
        resp = self._unary("ForkSession", pb.ForkSessionRequest(from_bundle=bundle_digest))
        return Session(self, SessionInfo.from_proto(resp.session), reproduced=resp.reproduced, warnings=list(resp.warnings))

    # Bundles and files.

    def get_bundle(self, digest: str, attestation: bool = False) -> bytes:
        """A stored bundle's bytes (``.tar.zst``), or its signed
        attestation's with ``attestation=True``."""
        req = pb.GetBundleRequest(digest=digest, attestation=attestation)
        return b"".join(chunk.data for chunk in self._stream("GetBundle", req))

    def bundle(self, digest: str) -> Bundle:
        """Fetch a bundle and verify it: its manifest and entries as data."""
        return verify(self.get_bundle(digest), digest)

    def get_file(self, bundle_digest: str, path: str) -> bytes:
        """An output file of a stored bundle (of a run or a session call)."""
        req = pb.GetFileRequest(bundle_digest=bundle_digest, path=path)
        return b"".join(chunk.data for chunk in self._stream("GetFile", req))


class RunHandle:
    """A detached run: it goes on without its caller until it ends or is
    cancelled; follow it from here, from another process, or later."""

    def __init__(self, client: Client, run_id: str, started: Optional[Started]) -> None:
        self._client = client
        self.run_id = run_id
        self.started = started

    def attach(self, stdout_offset: int = 0, stderr_offset: int = 0) -> Iterator[Event]:
        return self._client.attach(self.run_id, stdout_offset, stderr_offset)

    def wait(self) -> Result:
        """Wait for the end and return the Result with all its output."""
        return self._client._collect(self.attach(), None, None)

    def info(self) -> RunInfo:
        return self._client.get_run(self.run_id)

    def cancel(self) -> RunState:
        return self._client.cancel_run(self.run_id)

    def __repr__(self) -> str:
        return f"RunHandle({self.run_id!r})"


class Files:
    """A session's /workspace."""

    def __init__(self, client: Client, session_id: str) -> None:
        self._client = client
        self._session_id = session_id

    def write(self, path: str, data: Union[bytes, str], executable: bool = False) -> FileInfo:
        """Write a file (folders made on its way); paths are relative."""
        content = data.encode() if isinstance(data, str) else bytes(data)

        def parts() -> Iterator[pb.UploadFileRequest]:
            yield pb.UploadFileRequest(header=pb.UploadHeader(session_id=self._session_id, path=path, executable=executable))
            for i in range(0, len(content), _CHUNK):
                yield pb.UploadFileRequest(data=content[i : i + _CHUNK])

        # Not retried: a stream of parts cannot be sent again for its caller.
        c = self._client
        try:
            resp = c._stub.UploadFile(parts(), metadata=c._settings.metadata())
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        return FileInfo(resp.path, "file", resp.size, resp.sha256)

    def read(self, path: str) -> bytes:
        req = pb.ReadFileRequest(session_id=self._session_id, path=path)
        return b"".join(chunk.data for chunk in self._client._stream("ReadFile", req))

    def list(self, path: str = "") -> list[FileInfo]:
        resp = self._client._unary("ListFiles", pb.ListFilesRequest(session_id=self._session_id, path=path))
        return [FileInfo(f.path, f.type, f.size, f.sha256) for f in resp.files]


class Session:
    """A session: calls run one after another in one container, and
    Python's and JavaScript's kernels keep their variables between them."""

    def __init__(self, client: Client, info: SessionInfo, reproduced: bool = True, warnings: Optional[list[str]] = None) -> None:
        self._client = client
        self.info = info
        self.id = info.session_id
        self.language = info.language
        self.files = Files(client, self.id)
        #: For a fork: whether replaying its chain reproduced every call.
        self.reproduced = reproduced
        self.warnings = warnings or []
        self._last_bundle = info.last_bundle

    def run(self, code: str, **options: Any) -> Result:
        """Run code in the session's kernel; ``.value`` is the last
        expression, ``.displays`` what it displayed (charts as ``.png``).
        Options as :meth:`Client.run_code`'s a call may set, ``tools``
        and ``confirm`` included: each call names its own tools."""
        res = self._client.run_code(code, self.language, session_id=self.id, **options)
        self._last_bundle = res.bundle_digest or self._last_bundle
        return res

    def command(self, argv: Optional[Iterable[str]] = None, *, shell: Optional[str] = None, **options: Any) -> Result:
        """Run a command in the session's container, as :meth:`run`."""
        res = self._client.run_command(argv, shell=shell, session_id=self.id, **options)
        self._last_bundle = res.bundle_digest or self._last_bundle
        return res

    def start(
        self,
        argv: Optional[Iterable[str]] = None,
        *,
        shell: Optional[str] = None,
        env: Optional[dict[str, str]] = None,
        workdir: str = "",
        terminal: Optional[tuple[int, int]] = None,
        term: str = "",
    ) -> Process:
        """Start a process in the session's background: it runs beside the
        calls until it exits or the session ends. ``terminal=(rows,
        cols)`` gives it a terminal (its output then all on stdout)."""
        req = pb.StartProcessRequest(session_id=self.id, argv=list(argv or []), shell=shell or "", env=env or {}, workdir=workdir)
        if terminal is not None:
            req.terminal.CopyFrom(pb.TerminalSize(rows=terminal[0], cols=terminal[1], term=term))
        return Process(self._client, ProcessInfo.from_proto(self._client._unary("StartProcess", req)))

    def processes(self) -> list[ProcessInfo]:
        """Its background processes, running and ended, oldest first."""
        resp = self._client._unary("ListProcesses", pb.ListProcessesRequest(session_id=self.id))
        return [ProcessInfo.from_proto(p) for p in resp.processes]

    def open_port(self, port: int) -> Port:
        """Open a port to the daemon's inbound proxy: what listens on it in
        the session is reached at the returned ``url``."""
        return Port.from_proto(self._client._unary("OpenPort", pb.OpenPortRequest(session_id=self.id, port=port)))

    def close_port(self, port: int) -> None:
        self._client._unary("ClosePort", pb.ClosePortRequest(session_id=self.id, port=port))

    def ports(self) -> list[Port]:
        return [Port.from_proto(p) for p in self._client._unary("ListPorts", pb.ListPortsRequest(session_id=self.id)).ports]

    def fork(self) -> Session:
        """A new session in this one's state after its last call."""
        if not self._last_bundle:
            raise ValueError("fork: the session has made no call yet, so there is no state to fork")
        return self._client.fork(self._last_bundle)

    def refresh(self) -> SessionInfo:
        self.info = SessionInfo.from_proto(self._client._unary("GetSession", pb.GetSessionRequest(session_id=self.id)))
        return self.info

    def set_network(self, network: _request.NetworkArg) -> SessionInfo:
        """Change the session's allow-list from now on, as a run's network is
        given (rules, a policy name, a ``Network`` with secrets): connections
        under way that it no longer allows are cut, and the next call's
        bundle records the change. ``"none"`` takes every rule away."""
        n = _request._network(network)
        if n is None:
            raise ValueError('network: give the new allow-list, or "none"')
        req = pb.UpdateSessionNetworkRequest(session_id=self.id, network=n)
        self.info = SessionInfo.from_proto(self._client._unary("UpdateSessionNetwork", req))
        return self.info

    def pause(self) -> SessionInfo:
        """Save the session to disk between calls (its variables, background
        processes and files) and free its container: it takes no call until
        ``resume``. Under gVisor on the direct backend; elsewhere it raises
        ``FailedPrecondition`` saying why."""
        self.info = SessionInfo.from_proto(self._client._unary("PauseSession", pb.PauseSessionRequest(session_id=self.id)))
        return self.info

    def resume(self) -> SessionInfo:
        """Restore a paused session into a new container, as it was."""
        self.info = SessionInfo.from_proto(self._client._unary("ResumeSession", pb.ResumeSessionRequest(session_id=self.id)))
        return self.info

    def delete(self) -> SessionInfo:
        """Remove the session's container; its bundles stay."""
        return SessionInfo.from_proto(self._client._unary("DeleteSession", pb.DeleteSessionRequest(session_id=self.id)))

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()

    def __repr__(self) -> str:
        return f"Session({self.id!r}, language={self.language!r})"

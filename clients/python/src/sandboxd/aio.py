"""The asyncio client: :class:`sandboxd.Client`'s surface on ``grpc.aio``.

    >>> from sandboxd.aio import Client
    >>> async with Client() as c:
    ...     print((await c.run_code("print(6 * 7)")).text)
    42

Streams are async iterators; everything else is awaited. Requests,
results, errors and the retry policy are the synchronous client's.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Iterable, Literal, Optional, Union, overload

import grpc
import grpc.aio

from sandboxd import _judge, _request, _tools
from sandboxd._judge import Case, Judgement, Outcome, Progress, Submission
from sandboxd._process import AsyncProcess, Port, ProcessInfo
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

_CHUNK = 1 << 20


class Client:
    """An asyncio client of a sandboxd daemon; its arguments are
    :class:`sandboxd.Client`'s."""

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
        self._peer_channels: list[grpc.aio.Channel] = []

    def _dial(self, target: str, peer: bool) -> grpc.aio.Channel:
        s: Settings = self._settings
        if s.credentials is not None:
            return grpc.aio.secure_channel(target, s.credentials, options=s.options(peer))
        return grpc.aio.insecure_channel(target, options=s.options(peer))

    async def close(self) -> None:
        for ch in self._peer_channels:
            await ch.close()
        self._peer_channels.clear()
        self._peers.clear()
        await self._channel.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _peer(self, address: str) -> pb_grpc.SandboxServiceStub:
        stub = self._peers.get(address)
        if stub is None:
            ch = self._dial(address, peer=True)
            self._peer_channels.append(ch)
            stub = self._peers[address] = pb_grpc.SandboxServiceStub(ch)
        return stub

    async def _unary(self, method: str, request: Any) -> Any:
        policy = Retry(self.retry_within)
        stub, followed = self._stub, False
        while True:
            try:
                return await getattr(stub, method)(request, metadata=self._settings.metadata(followed))
            except grpc.RpcError as e:
                stub, followed = await self._again(policy, from_rpc_error(e), stub, followed)

    async def _again(
        self, policy: Retry, err: SandboxdError, stub: pb_grpc.SandboxServiceStub, followed: bool
    ) -> tuple[pb_grpc.SandboxServiceStub, bool]:
        """See :meth:`sandboxd.Client._again`."""
        wait = policy.wait(err)
        if wait is not None:
            await asyncio.sleep(wait)
            return stub, followed
        if err.redirect is not None and not followed:
            return self._peer(err.redirect.address), True
        raise err from None

    async def _stream(self, method: str, request: Any) -> AsyncIterator[Any]:
        policy = Retry(self.retry_within)
        stub, followed = self._stub, False
        while True:
            call = getattr(stub, method)(request, metadata=self._settings.metadata(followed))
            received = False
            try:
                async for message in call:
                    received = True
                    yield message
                return
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            finally:
                call.cancel()
            if received:
                raise err
            stub, followed = await self._again(policy, err, stub, followed)

    async def _events(self, method: str, request: Any) -> AsyncIterator[Event]:
        started: Optional[Started] = None
        stdout: list[bytes] = []
        stderr: list[bytes] = []
        async for ev in self._stream(method, request):
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
                # A display's file is fetched on demand by the sync
                # client; here it is fetched with Client.get_file.
                yield result_from_proto(ev.result, b"".join(stdout), b"".join(stderr), started)
                return
        raise Unavailable("the daemon ended the run's stream without a result")

    async def _collect(self, events: AsyncIterator[Event]) -> Result:
        async for ev in events:
            if isinstance(ev, Result):
                return ev
        raise Unavailable("the daemon ended the run's stream without a result")

    async def _detach(self, method: str, request: Any) -> RunHandle:
        async for ev in self._stream(method, request):
            kind = ev.WhichOneof("event")
            if kind == "started":
                return RunHandle(self, ev.started.run_id, Started.from_proto(ev.started))
            if kind == "result":
                return RunHandle(self, ev.result.run_id, None)
        raise Unavailable("the daemon answered a detached run without its start")

    @overload
    async def run_code(self, code: str, language: str = ..., *, detach: Literal[False] = ..., **options: Any) -> Result: ...
    @overload
    async def run_code(self, code: str, language: str = ..., *, detach: Literal[True], **options: Any) -> RunHandle: ...

    async def run_code(
        self,
        code: str,
        language: str = "python",
        *,
        detach: bool = False,
        tools: Iterable[Union[str, Tool, Callable[..., Any]]] = (),
        confirm: Optional[Confirm] = None,
        **options: Any,
    ) -> Union[Result, RunHandle]:
        """Run code; see :meth:`sandboxd.Client.run_code`. The caller's
        tools may be coroutine functions; plain ones run in a thread."""
        names, declared = _tools.split(tools)
        req = pb.RunCodeRequest(language=language, code=code, options=_request.options(detach=detach, tools=names, **options))
        if declared or confirm is not None:
            if detach:
                raise ValueError("detach: a run whose tools the caller answers cannot go on without the caller")
            return await self._with_tools(req, declared, confirm)
        if detach:
            return await self._detach("RunCode", req)
        return await self._collect(self._events("RunCode", req))

    async def _with_tools(self, req: Union[pb.RunCodeRequest, pb.RunCommandRequest], declared: list[Tool], confirm: Optional[Confirm]) -> Result:
        """See :meth:`sandboxd.Client._with_tools`: the answers are tasks."""
        by_name = {t.name: t for t in declared}
        first = _tools.first_message(req, declared, confirm is not None)
        policy = Retry(self.retry_within)
        stub, followed = self._stub, False
        while True:
            call = stub.RunWithTools(metadata=self._settings.metadata(followed))
            tasks: set[asyncio.Task[None]] = set()
            received = False

            async def reply(make: Any) -> None:
                await call.write(await make)

            try:
                await call.write(first)
                started: Optional[Started] = None
                stdout: list[bytes] = []
                stderr: list[bytes] = []
                async for ev in call:
                    received = True
                    kind = ev.WhichOneof("event")
                    if kind == "tool_call":
                        task = asyncio.create_task(reply(_tools.answer_async(by_name, ev.tool_call)))
                    elif kind == "confirm":
                        task = asyncio.create_task(reply(asyncio.to_thread(_tools.confirmation, confirm, ev.confirm)))
                    else:
                        run = ev.run
                        kind = run.WhichOneof("event")
                        if kind == "started":
                            started = Started.from_proto(run.started)
                        elif kind == "stdout":
                            stdout.append(run.stdout)
                        elif kind == "stderr":
                            stderr.append(run.stderr)
                        elif kind == "result":
                            return result_from_proto(run.result, b"".join(stdout), b"".join(stderr), started)
                        continue
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                raise Unavailable("the daemon ended the run's stream without a result")
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            finally:
                for task in tasks:
                    task.cancel()
                call.cancel()
            if received:
                raise err
            stub, followed = await self._again(policy, err, stub, followed)

    def stream_code(self, code: str, language: str = "python", **options: Any) -> AsyncIterator[Event]:
        """Run code, yielding its events as they come (``async for``)."""
        return self._events("RunCode", pb.RunCodeRequest(language=language, code=code, options=_request.options(**options)))

    async def run_command(
        self,
        argv: Optional[Iterable[str]] = None,
        *,
        shell: Optional[str] = None,
        detach: bool = False,
        tools: Iterable[Union[str, Tool, Callable[..., Any]]] = (),
        confirm: Optional[Confirm] = None,
        **options: Any,
    ) -> Union[Result, RunHandle]:
        """Run a command; see :meth:`sandboxd.Client.run_command`."""
        names, declared = _tools.split(tools)
        req = _request.command(argv, shell, _request.options(detach=detach, tools=names, **options))
        if declared or confirm is not None:
            if detach:
                raise ValueError("detach: a run whose tools the caller answers cannot go on without the caller")
            return await self._with_tools(req, declared, confirm)
        if detach:
            return await self._detach("RunCommand", req)
        return await self._collect(self._events("RunCommand", req))

    def stream_command(self, argv: Optional[Iterable[str]] = None, *, shell: Optional[str] = None, **options: Any) -> AsyncIterator[Event]:
        return self._events("RunCommand", _request.command(argv, shell, _request.options(**options)))

    def attach(self, run_id: str, stdout_offset: int = 0, stderr_offset: int = 0) -> AsyncIterator[Event]:
        req = pb.AttachRunRequest(run_id=run_id, stdout_offset=stdout_offset, stderr_offset=stderr_offset)
        return self._events("AttachRun", req)

    async def get_run(self, run_id: str) -> RunInfo:
        return RunInfo.from_proto(await self._unary("GetRun", pb.GetRunRequest(run_id=run_id)))

    async def wait_run(self, run_id: str) -> RunInfo:
        return RunInfo.from_proto(await self._unary("WaitRun", pb.WaitRunRequest(run_id=run_id)))

    async def cancel_run(self, run_id: str) -> RunState:
        return RunState((await self._unary("CancelRun", pb.CancelRunRequest(run_id=run_id))).state)

    async def list_runs(self) -> list[RunInfo]:
        return [RunInfo.from_proto(r) for r in (await self._unary("ListRuns", pb.ListRunsRequest())).runs]

    async def evaluate(self, code: str, cases: Iterable[Case], language: str = "python", **options: Any) -> Judgement:
        """See :meth:`sandboxd.Client.evaluate`."""
        out = (await self.evaluate_many([Submission(code=code, cases=tuple(cases), language=language, **options)]))[0]
        if isinstance(out, SandboxdError):
            raise out
        return out

    async def evaluate_many(
        self, submissions: Iterable[Union[Submission, dict[str, Any]]], *, progress: Union[bool, Progress, None] = None
    ) -> list[Outcome]:
        """See :meth:`sandboxd.Client.evaluate_many`."""
        batch = _judge.Batch(_judge.submissions(submissions), progress)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_within
        send = list(range(len(batch.subs)))
        while send:
            requests = [pb.EvaluateRequest(submission=batch.subs[i].to_proto()) for i in send]
            call = self._stub.Evaluate(iter(requests), metadata=self._settings.metadata(False))
            try:
                async for ev in call:
                    batch.event(ev)
            except grpc.RpcError as e:
                err = from_rpc_error(e)
                for i in batch.pending():
                    batch.outcomes[i] = err
            finally:
                call.cancel()
            send, wait = batch.retriable(lambda w: loop.time() + w <= deadline)
            if send:
                await asyncio.sleep(wait)
        return [o if o is not None else Unavailable("the daemon ended the batch before this submission's judgement") for o in batch.outcomes]

    async def inventory(self) -> Inventory:
        return Inventory.from_proto(await self._unary("ListImages", pb.ListImagesRequest()))

    async def session(
        self, language: str = "python", *, ttl: Optional[float] = None, idle_ttl: Optional[float] = None, **options: Any
    ) -> Session:
        """Create a session (``async with await client.session() as s``)."""
        req = _request.create_session(language, ttl, idle_ttl, _request.options(**options))
        return Session(self, SessionInfo.from_proto(await self._unary("CreateSession", req)))

    async def get_session(self, session_id: str) -> Session:
        info = await self._unary("GetSession", pb.GetSessionRequest(session_id=session_id))
        return Session(self, SessionInfo.from_proto(info))

    async def list_sessions(self) -> list[SessionInfo]:
        return [SessionInfo.from_proto(s) for s in (await self._unary("ListSessions", pb.ListSessionsRequest())).sessions]

    async def fork(self, bundle_digest: str) -> Session:
        resp = await self._unary("ForkSession", pb.ForkSessionRequest(from_bundle=bundle_digest))
        return Session(self, SessionInfo.from_proto(resp.session), reproduced=resp.reproduced, warnings=list(resp.warnings))

    async def get_bundle(self, digest: str, attestation: bool = False) -> bytes:
        req = pb.GetBundleRequest(digest=digest, attestation=attestation)
        return b"".join([chunk.data async for chunk in self._stream("GetBundle", req)])

    async def bundle(self, digest: str) -> Bundle:
        return verify(await self.get_bundle(digest), digest)

    async def get_file(self, bundle_digest: str, path: str) -> bytes:
        req = pb.GetFileRequest(bundle_digest=bundle_digest, path=path)
        return b"".join([chunk.data async for chunk in self._stream("GetFile", req)])


class RunHandle:
    """A detached run; see :class:`sandboxd.RunHandle`."""

    def __init__(self, client: Client, run_id: str, started: Optional[Started]) -> None:
        self._client = client
        self.run_id = run_id
        self.started = started

    def attach(self, stdout_offset: int = 0, stderr_offset: int = 0) -> AsyncIterator[Event]:
        return self._client.attach(self.run_id, stdout_offset, stderr_offset)

    async def wait(self) -> Result:
        return await self._client._collect(self.attach())

    async def info(self) -> RunInfo:
        return await self._client.get_run(self.run_id)

    async def cancel(self) -> RunState:
        return await self._client.cancel_run(self.run_id)

    def __repr__(self) -> str:
        return f"RunHandle({self.run_id!r})"


class Files:
    """A session's /workspace."""

    def __init__(self, client: Client, session_id: str) -> None:
        self._client = client
        self._session_id = session_id

    async def write(self, path: str, data: Union[bytes, str], executable: bool = False) -> FileInfo:
        content = data.encode() if isinstance(data, str) else bytes(data)

        async def parts() -> AsyncIterator[pb.UploadFileRequest]:
            yield pb.UploadFileRequest(header=pb.UploadHeader(session_id=self._session_id, path=path, executable=executable))
            for i in range(0, len(content), _CHUNK):
                yield pb.UploadFileRequest(data=content[i : i + _CHUNK])

        c = self._client
        try:
            resp = await c._stub.UploadFile(parts(), metadata=c._settings.metadata())
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        return FileInfo(resp.path, "file", resp.size, resp.sha256)

    async def read(self, path: str) -> bytes:
        req = pb.ReadFileRequest(session_id=self._session_id, path=path)
        return b"".join([chunk.data async for chunk in self._client._stream("ReadFile", req)])

    async def list(self, path: str = "") -> list[FileInfo]:
        resp = await self._client._unary("ListFiles", pb.ListFilesRequest(session_id=self._session_id, path=path))
        return [FileInfo(f.path, f.type, f.size, f.sha256) for f in resp.files]


class Session:
    """A session; see :class:`sandboxd.Session`."""

    def __init__(self, client: Client, info: SessionInfo, reproduced: bool = True, warnings: Optional[list[str]] = None) -> None:
        self._client = client
        self.info = info
        self.id = info.session_id
        self.language = info.language
        self.files = Files(client, self.id)
        self.reproduced = reproduced
        self.warnings = warnings or []
        self._last_bundle = info.last_bundle

    async def run(self, code: str, **options: Any) -> Result:
        """Run code in the session; see :meth:`sandboxd.Session.run`."""
        res = await self._client.run_code(code, self.language, session_id=self.id, **options)
        self._last_bundle = res.bundle_digest or self._last_bundle
        return res

    async def command(self, argv: Optional[Iterable[str]] = None, *, shell: Optional[str] = None, **options: Any) -> Result:
        res = await self._client.run_command(argv, shell=shell, session_id=self.id, **options)
        self._last_bundle = res.bundle_digest or self._last_bundle
        return res

    async def display_bytes(self, result: Result, index: int, mime: str = "image/png") -> bytes:
        """The bytes of a call's display (``mime``, a PNG by default)."""
        d = result.displays[index]
        if mime in d.files:
            return await self._client.get_file(result.bundle_digest, d.files[mime])
        data = d.bytes(mime)
        if data is None:
            raise KeyError(f"display {index} has no {mime}")
        return data

    async def start(
        self,
        argv: Optional[Iterable[str]] = None,
        *,
        shell: Optional[str] = None,
        env: Optional[dict[str, str]] = None,
        workdir: str = "",
        terminal: Optional[tuple[int, int]] = None,
        term: str = "",
    ) -> AsyncProcess:
        """See :meth:`sandboxd.Session.start`."""
        req = pb.StartProcessRequest(session_id=self.id, argv=list(argv or []), shell=shell or "", env=env or {}, workdir=workdir)
        if terminal is not None:
            req.terminal.CopyFrom(pb.TerminalSize(rows=terminal[0], cols=terminal[1], term=term))
        return AsyncProcess(self._client, ProcessInfo.from_proto(await self._client._unary("StartProcess", req)))

    async def processes(self) -> list[ProcessInfo]:
        resp = await self._client._unary("ListProcesses", pb.ListProcessesRequest(session_id=self.id))
        return [ProcessInfo.from_proto(p) for p in resp.processes]

    async def open_port(self, port: int) -> Port:
        """See :meth:`sandboxd.Session.open_port`."""
        return Port.from_proto(await self._client._unary("OpenPort", pb.OpenPortRequest(session_id=self.id, port=port)))

    async def close_port(self, port: int) -> None:
        await self._client._unary("ClosePort", pb.ClosePortRequest(session_id=self.id, port=port))

    async def ports(self) -> list[Port]:
        return [Port.from_proto(p) for p in (await self._client._unary("ListPorts", pb.ListPortsRequest(session_id=self.id))).ports]

    async def fork(self) -> Session:
        if not self._last_bundle:
            raise ValueError("fork: the session has made no call yet, so there is no state to fork")
        return await self._client.fork(self._last_bundle)

    async def refresh(self) -> SessionInfo:
        self.info = SessionInfo.from_proto(await self._client._unary("GetSession", pb.GetSessionRequest(session_id=self.id)))
        return self.info

    async def set_network(self, network: _request.NetworkArg) -> SessionInfo:
        """Change the session's allow-list from now on, as a run's network is
        given (rules, a policy name, a ``Network`` with secrets): connections
        under way that it no longer allows are cut, and the next call's
        bundle records the change. ``"none"`` takes every rule away."""
        n = _request._network(network)
        if n is None:
            raise ValueError('network: give the new allow-list, or "none"')
        req = pb.UpdateSessionNetworkRequest(session_id=self.id, network=n)
        self.info = SessionInfo.from_proto(await self._client._unary("UpdateSessionNetwork", req))
        return self.info

    async def pause(self) -> SessionInfo:
        """Save the session to disk between calls (its variables, background
        processes and files) and free its container: it takes no call until
        ``resume``. Under gVisor on the direct backend; elsewhere it raises
        ``FailedPrecondition`` saying why."""
        self.info = SessionInfo.from_proto(await self._client._unary("PauseSession", pb.PauseSessionRequest(session_id=self.id)))
        return self.info

    async def resume(self) -> SessionInfo:
        """Restore a paused session into a new container, as it was."""
        self.info = SessionInfo.from_proto(await self._client._unary("ResumeSession", pb.ResumeSessionRequest(session_id=self.id)))
        return self.info

    async def delete(self) -> SessionInfo:
        return SessionInfo.from_proto(await self._client._unary("DeleteSession", pb.DeleteSessionRequest(session_id=self.id)))

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.delete()

    def __repr__(self) -> str:
        return f"Session({self.id!r}, language={self.language!r})"

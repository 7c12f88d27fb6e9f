"""A session's background processes, their terminals, and its ports."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterator, Optional, Union

import grpc

from sandboxd.errors import from_rpc_error
from sandboxd.v1 import sandboxd_pb2 as pb

if TYPE_CHECKING:
    from sandboxd.client import Client

_STATES = {pb.PROCESS_RUNNING: "RUNNING", pb.PROCESS_EXITED: "EXITED", pb.PROCESS_KILLED: "KILLED"}


@dataclass(frozen=True)
class ProcessInfo:
    """A background process as the daemon reports it. ``state`` is
    RUNNING, EXITED or KILLED (ended with its session); ``exit_code`` is
    a shell's (128+N for signal N)."""

    process_id: str
    session_id: str
    argv: list[str]
    state: str
    exit_code: Optional[int]
    terminal: bool
    started_at: Optional[datetime]
    ended_at: Optional[datetime]
    stdout_bytes: int
    stderr_bytes: int

    @classmethod
    def from_proto(cls, m: pb.ProcessInfo) -> ProcessInfo:
        state = _STATES.get(m.state, "UNSPECIFIED")
        return cls(
            m.process_id,
            m.session_id,
            list(m.argv),
            state,
            None if state == "RUNNING" else m.exit_code,
            m.terminal,
            m.started_at.ToDatetime() if m.HasField("started_at") else None,
            m.ended_at.ToDatetime() if m.HasField("ended_at") else None,
            m.stdout_bytes,
            m.stderr_bytes,
        )


@dataclass(frozen=True)
class Output:
    """What a read of a process's output got: the bytes since the last
    read, and ``dropped``, those the daemon no longer kept before them."""

    stdout: bytes
    stderr: bytes
    dropped: int
    process: ProcessInfo


@dataclass(frozen=True)
class Port:
    """A session's port opened to the daemon's inbound proxy: HTTP and
    WebSocket reach it at ``url``, whose ``token`` is its only key."""

    session_id: str
    port: int
    url: str
    token: str

    @classmethod
    def from_proto(cls, m: pb.PortInfo) -> Port:
        return cls(m.session_id, m.port, m.url, m.token)


class Process:
    """A background process of a session. :meth:`read` reads on from
    where the last read stopped."""

    def __init__(self, client: Client, info: ProcessInfo) -> None:
        self._client = client
        self.info = info
        self.id = info.process_id
        self.session_id = info.session_id
        self._stdout_offset = 0
        self._stderr_offset = 0

    def _req(self) -> dict[str, str]:
        return {"session_id": self.session_id, "process_id": self.id}

    def read(self, wait: float = 0) -> Output:
        """The output since the last read, waiting up to ``wait`` seconds
        (at most 30) for some while the process runs."""
        resp = self._client._unary(
            "ReadProcessOutput",
            pb.ReadProcessOutputRequest(
                **self._req(), stdout_offset=self._stdout_offset, stderr_offset=self._stderr_offset, wait_ms=int(wait * 1000)
            ),
        )
        dropped = resp.stdout_start - self._stdout_offset + resp.stderr_start - self._stderr_offset
        self._stdout_offset, self._stderr_offset = resp.next_stdout_offset, resp.next_stderr_offset
        self.info = ProcessInfo.from_proto(resp.process)
        return Output(resp.stdout, resp.stderr, dropped, self.info)

    def write(self, data: Union[bytes, str], close: bool = False) -> None:
        """Write to its stdin; with ``close``, end it after."""
        b = data.encode() if isinstance(data, str) else bytes(data)
        self._client._unary("WriteProcessStdin", pb.WriteProcessStdinRequest(**self._req(), data=b, close=close))

    def signal(self, signal: int = 15) -> ProcessInfo:
        """Send a signal to its process group (default SIGTERM)."""
        self.info = ProcessInfo.from_proto(self._client._unary("SignalProcess", pb.SignalProcessRequest(**self._req(), signal=signal)))
        return self.info

    def wait(self) -> ProcessInfo:
        """Wait for it to end."""
        self.info = ProcessInfo.from_proto(self._client._unary("WaitProcess", pb.WaitProcessRequest(**self._req())))
        return self.info

    def resize(self, rows: int, cols: int) -> None:
        """Change the size of its terminal."""
        self._client._unary("ResizeProcess", pb.ResizeProcessRequest(**self._req(), size=pb.TerminalSize(rows=rows, cols=cols)))

    def attach(self, stdout_offset: int = 0, stderr_offset: int = 0) -> Attachment:
        """Its streams both ways, as a terminal needs them (see
        :class:`Attachment`)."""
        return Attachment(self._client, self.session_id, self.id, stdout_offset, stderr_offset)

    def __repr__(self) -> str:
        return f"Process({self.id!r}, {self.info.state})"


class Attachment:
    """A process's streams both ways. Iterating yields ``("stdout",
    bytes)`` and ``("stderr", bytes)`` as they come; when it ends,
    :attr:`exited` is its record. Sends go in the order they are made,
    from any thread."""

    def __init__(self, client: Client, session_id: str, process_id: str, stdout_offset: int, stderr_offset: int) -> None:
        self._sends: queue.Queue[Optional[pb.AttachProcessRequest]] = queue.Queue()
        self._sends.put(
            pb.AttachProcessRequest(
                start=pb.AttachStart(
                    session_id=session_id, process_id=process_id, stdout_offset=stdout_offset, stderr_offset=stderr_offset
                )
            )
        )
        self._lock = threading.Lock()
        self._closed = False
        self.exited: Optional[ProcessInfo] = None
        self.dropped = 0
        # Not retried: what was typed cannot be typed again for the caller.
        self._call = client._stub.AttachProcess(self._requests(), metadata=client._settings.metadata())

    def _requests(self) -> Iterator[pb.AttachProcessRequest]:
        while True:
            m = self._sends.get()
            if m is None:
                return
            yield m

    def _send(self, m: pb.AttachProcessRequest) -> None:
        with self._lock:
            if not self._closed:
                self._sends.put(m)

    def write(self, data: Union[bytes, str]) -> None:
        self._send(pb.AttachProcessRequest(stdin=data.encode() if isinstance(data, str) else bytes(data)))

    def close_stdin(self) -> None:
        """End its stdin (a Ctrl-D with a terminal)."""
        self._send(pb.AttachProcessRequest(close_stdin=True))

    def resize(self, rows: int, cols: int) -> None:
        self._send(pb.AttachProcessRequest(resize=pb.TerminalSize(rows=rows, cols=cols)))

    def signal(self, signal: int) -> None:
        self._send(pb.AttachProcessRequest(signal=signal))

    def close(self) -> None:
        """Stop sending; the output goes on until the process ends."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._sends.put(None)

    def cancel(self) -> None:
        """Leave: the process goes on."""
        self.close()
        self._call.cancel()

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        try:
            for ev in self._call:
                kind = ev.WhichOneof("event")
                if kind == "stdout":
                    yield "stdout", ev.stdout
                elif kind == "stderr":
                    yield "stderr", ev.stderr
                elif kind == "dropped":
                    self.dropped += ev.dropped
                elif kind == "exited":
                    self.exited = ProcessInfo.from_proto(ev.exited)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED and self._closed:
                return
            raise from_rpc_error(e) from None
        finally:
            self.close()


class AsyncProcess:
    """:class:`Process` for :mod:`sandboxd.aio`."""

    def __init__(self, client: Any, info: ProcessInfo) -> None:
        self._client = client
        self.info = info
        self.id = info.process_id
        self.session_id = info.session_id
        self._stdout_offset = 0
        self._stderr_offset = 0

    def _req(self) -> dict[str, str]:
        return {"session_id": self.session_id, "process_id": self.id}

    async def read(self, wait: float = 0) -> Output:
        resp = await self._client._unary(
            "ReadProcessOutput",
            pb.ReadProcessOutputRequest(
                **self._req(), stdout_offset=self._stdout_offset, stderr_offset=self._stderr_offset, wait_ms=int(wait * 1000)
            ),
        )
        dropped = resp.stdout_start - self._stdout_offset + resp.stderr_start - self._stderr_offset
        self._stdout_offset, self._stderr_offset = resp.next_stdout_offset, resp.next_stderr_offset
        self.info = ProcessInfo.from_proto(resp.process)
        return Output(resp.stdout, resp.stderr, dropped, self.info)

    async def write(self, data: Union[bytes, str], close: bool = False) -> None:
        b = data.encode() if isinstance(data, str) else bytes(data)
        await self._client._unary("WriteProcessStdin", pb.WriteProcessStdinRequest(**self._req(), data=b, close=close))

    async def signal(self, signal: int = 15) -> ProcessInfo:
        resp = await self._client._unary("SignalProcess", pb.SignalProcessRequest(**self._req(), signal=signal))
        self.info = ProcessInfo.from_proto(resp)
        return self.info

    async def wait(self) -> ProcessInfo:
        self.info = ProcessInfo.from_proto(await self._client._unary("WaitProcess", pb.WaitProcessRequest(**self._req())))
        return self.info

    async def resize(self, rows: int, cols: int) -> None:
        await self._client._unary("ResizeProcess", pb.ResizeProcessRequest(**self._req(), size=pb.TerminalSize(rows=rows, cols=cols)))

    async def attach(self, stdout_offset: int = 0, stderr_offset: int = 0) -> AsyncAttachment:
        a = AsyncAttachment(self._client._stub.AttachProcess(metadata=self._client._settings.metadata()))
        await a._call.write(
            pb.AttachProcessRequest(
                start=pb.AttachStart(session_id=self.session_id, process_id=self.id, stdout_offset=stdout_offset, stderr_offset=stderr_offset)
            )
        )
        return a

    def __repr__(self) -> str:
        return f"AsyncProcess({self.id!r}, {self.info.state})"


class AsyncAttachment:
    """:class:`Attachment` for :mod:`sandboxd.aio`: ``async for`` yields
    the output."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self.exited: Optional[ProcessInfo] = None
        self.dropped = 0

    async def write(self, data: Union[bytes, str]) -> None:
        await self._call.write(pb.AttachProcessRequest(stdin=data.encode() if isinstance(data, str) else bytes(data)))

    async def close_stdin(self) -> None:
        await self._call.write(pb.AttachProcessRequest(close_stdin=True))

    async def resize(self, rows: int, cols: int) -> None:
        await self._call.write(pb.AttachProcessRequest(resize=pb.TerminalSize(rows=rows, cols=cols)))

    async def signal(self, signal: int) -> None:
        await self._call.write(pb.AttachProcessRequest(signal=signal))

    async def close(self) -> None:
        """Stop sending; the output goes on until the process ends."""
        await self._call.done_writing()

    def cancel(self) -> None:
        self._call.cancel()

    async def __aiter__(self) -> AsyncIterator[tuple[str, bytes]]:
        try:
            async for ev in self._call:
                kind = ev.WhichOneof("event")
                if kind == "stdout":
                    yield "stdout", ev.stdout
                elif kind == "stderr":
                    yield "stderr", ev.stderr
                elif kind == "dropped":
                    self.dropped += ev.dropped
                elif kind == "exited":
                    self.exited = ProcessInfo.from_proto(ev.exited)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

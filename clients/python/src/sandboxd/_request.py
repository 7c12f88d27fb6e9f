"""Requests from keyword arguments: the one place the clients' Python
arguments become the API's messages, checked so that a mistake is named
before anything is sent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Union

from sandboxd._types import Limits
from sandboxd.v1 import sandboxd_pb2 as pb


@dataclass(frozen=True)
class File:
    """A file placed under /input (for a run) before the program starts."""

    path: str
    content: Union[bytes, str]
    executable: bool = False


@dataclass(frozen=True)
class Rule:
    """An allowed destination: a host name or a CIDR, and its ports
    (none: every port)."""

    host: str = ""
    cidr: str = ""
    ports: tuple[int, ...] = ()


@dataclass(frozen=True)
class Network:
    """A run's network: none (the default), or egress to an allow-list —
    the operator's named ``policy``, ``rules`` of the request's own, or
    both — within ``caps``; ``secrets`` names the operator's secrets the
    gateway adds to its HTTPS requests (the program holds placeholders)."""

    allow: tuple[Rule, ...] = ()
    policy: str = ""
    bytes_out: int = 0
    bytes_in: int = 0
    connections: int = 0
    secrets: tuple[str, ...] = ()

    @classmethod
    def none(cls) -> "Network":
        return cls()

    def to_proto(self) -> pb.Network:
        if not self.allow and not self.policy:
            return pb.Network(mode=pb.NETWORK_MODE_NONE)
        return pb.Network(
            mode=pb.NETWORK_MODE_ALLOWLIST,
            policy=self.policy,
            rules=[pb.NetworkRule(host=r.host, cidr=r.cidr, ports=list(r.ports)) for r in self.allow],
            caps=pb.NetworkCaps(bytes_out=self.bytes_out, bytes_in=self.bytes_in, connections=self.connections),
            secrets=list(self.secrets),
        )


FilesArg = Union[Mapping[str, Union[bytes, str]], Iterable[File], None]
LimitsArg = Union[Limits, Mapping[str, float], None]
NetworkArg = Union[Network, str, Iterable[str], None]

_INTERPRETERS = {
    None: pb.INTERPRETER_UNSPECIFIED,
    "fresh": pb.INTERPRETER_FRESH,
    "prestarted": pb.INTERPRETER_PRESTARTED,
}


def _limits(limits: LimitsArg, timeout: Optional[float]) -> Optional[pb.Limits]:
    if isinstance(limits, Mapping):
        names = list(Limits.__dataclass_fields__)
        unknown = sorted(set(limits) - set(names))
        if unknown:
            # memory and memoryBytes both mean memory_bytes.
            near = [n for n in names if n.replace("_", "").startswith(unknown[0].replace("_", "").lower())]
            hint = f" (did you mean {near[0]!r}?)" if len(near) == 1 else ""
            raise ValueError(f"limits: no such limit {unknown[0]!r}{hint}; limits are {', '.join(names)}")
        limits = Limits(**limits)  # type: ignore[arg-type]
    if timeout is not None:
        if timeout <= 0:
            raise ValueError(f"timeout: {timeout} is not a positive number of seconds")
        limits = Limits(**{**(limits.__dict__ if limits else {}), "timeout": float(timeout)})
    return limits.to_proto() if limits is not None else None


def _network(network: NetworkArg) -> Optional[pb.Network]:
    if network is None:
        return None
    if isinstance(network, Network):
        return network.to_proto()
    if isinstance(network, str):
        # A single word: "none", or the name of an operator's policy.
        return Network.none().to_proto() if network == "none" else Network(policy=network).to_proto()
    rules = []
    for dest in network:
        host, _, port = dest.rpartition(":") if dest.count(":") == 1 else (dest, "", "")
        if port and not port.isdigit():
            raise ValueError(f"network: {dest!r} is not HOST, HOST:PORT or a CIDR")
        ports = (int(port),) if port else ()
        rules.append(Rule(cidr=host, ports=ports) if "/" in host else Rule(host=host, ports=ports))
    return Network(allow=tuple(rules)).to_proto()


def _files(files: FilesArg) -> list[pb.File]:
    if files is None:
        return []
    items = [File(p, c) for p, c in files.items()] if isinstance(files, Mapping) else list(files)
    out = []
    for f in items:
        content = f.content.encode() if isinstance(f.content, str) else bytes(f.content)
        out.append(pb.File(path=f.path, content=content, executable=f.executable))
    return out


def options(
    *,
    image: str = "",
    runtime: str = "",
    limits: LimitsArg = None,
    timeout: Optional[float] = None,
    network: NetworkArg = None,
    files: FilesArg = None,
    mounts: Iterable[str] = (),
    env: Optional[Mapping[str, str]] = None,
    stdin: Union[bytes, str, None] = None,
    workdir: str = "",
    labels: Optional[Mapping[str, str]] = None,
    seed: Optional[int] = None,
    interpreter: Optional[str] = None,
    idempotency_key: str = "",
    session_id: str = "",
    detach: bool = False,
    tools: Iterable[str] = (),
) -> pb.RunOptions:
    """The RunOptions of keyword arguments; ValueError names a bad one."""
    if interpreter not in _INTERPRETERS:
        raise ValueError(f"interpreter: {interpreter!r} is not 'fresh' or 'prestarted'")
    opts = pb.RunOptions(
        image=image,
        runtime=runtime,
        files=_files(files),
        mounts=list(mounts),
        env=dict(env or {}),
        stdin=stdin.encode() if isinstance(stdin, str) else (stdin or b""),
        workdir=workdir,
        labels=dict(labels or {}),
        session_id=session_id,
        detach=detach,
        idempotency_key=idempotency_key,
        interpreter=_INTERPRETERS[interpreter],
        tools=list(tools),
    )
    lim = _limits(limits, timeout)
    if lim is not None:
        opts.limits.CopyFrom(lim)
    net = _network(network)
    if net is not None:
        opts.network.CopyFrom(net)
    if seed is not None:
        opts.seed = seed
    return opts


def command(argv: Optional[Iterable[str]], shell: Optional[str], opts: pb.RunOptions) -> pb.RunCommandRequest:
    if (argv is None) == (shell is None):
        raise ValueError("run_command: give exactly one of argv and shell")
    if isinstance(argv, str):
        raise ValueError("argv: a list of words, not a string (for a shell line use shell=...)")
    return pb.RunCommandRequest(argv=list(argv or ()), shell=shell or "", options=opts)


def create_session(language: str, ttl: Optional[float], idle_ttl: Optional[float], opts: pb.RunOptions) -> pb.CreateSessionRequest:
    req = pb.CreateSessionRequest(language=language, options=opts)
    if ttl is not None:
        req.ttl.FromMilliseconds(round(ttl * 1000))
    if idle_ttl is not None:
        req.idle_ttl.FromMilliseconds(round(idle_ttl * 1000))
    return req

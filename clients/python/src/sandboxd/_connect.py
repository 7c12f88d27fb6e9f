"""How a client reaches a daemon (address, token, TLS, from arguments or
the environment), and the retry policy every sandboxd client shares."""

from __future__ import annotations

import logging
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import grpc

from sandboxd.errors import ResourceExhausted, SandboxdError, Unavailable

#: The daemon's socket when neither an address nor SANDBOXD_ADDR is given.
DEFAULT_SOCKET = "/run/sandboxd/sandboxd.sock"
#: How long refused calls are retried by default, as the CLI does.
DEFAULT_RETRY_WITHIN = 60.0
#: Marks a call made on the daemon another one sent it to.
FOLLOWED_HEADER = "sandboxd-followed"

log = logging.getLogger("sandboxd")

_Path = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Settings:
    target: str
    token: Optional[str]
    credentials: Optional[grpc.ChannelCredentials]
    # The name the daemon's certificate has, for peers reached by address.
    server_name: Optional[str]

    def options(self, peer: bool = False) -> list[tuple[str, Any]]:
        opts: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.max_send_message_length", 64 << 20),
        ]
        if peer and self.credentials is not None and self.server_name:
            opts.append(("grpc.ssl_target_name_override", self.server_name))
        return opts

    def metadata(self, followed: bool = False) -> tuple[tuple[str, str], ...]:
        md: list[tuple[str, str]] = []
        if self.token:
            md.append(("authorization", "Bearer " + self.token))
        if followed:
            md.append((FOLLOWED_HEADER, "1"))
        return tuple(md)


def _read(path: _Path) -> bytes:
    return Path(path).expanduser().read_bytes()


def resolve(
    addr: Optional[str],
    token: Optional[str],
    token_file: Optional[_Path],
    tls_ca: Optional[_Path],
    tls_cert: Optional[_Path],
    tls_key: Optional[_Path],
) -> Settings:
    """The settings of arguments, falling back on SANDBOXD_ADDR,
    SANDBOXD_TOKEN, SANDBOXD_TOKEN_FILE and SANDBOXD_TLS_{CA,CERT,KEY}."""
    env = os.environ
    addr = addr or env.get("SANDBOXD_ADDR") or DEFAULT_SOCKET
    if token is None:
        token = env.get("SANDBOXD_TOKEN")
    token_file = token_file or env.get("SANDBOXD_TOKEN_FILE")
    if token is None and token_file:
        # Token files end in a newline more often than not.
        token = _read(token_file).decode().strip()
    if token is not None:
        token = token.strip()
        if any(c.isspace() for c in token):
            raise ValueError("token: holds white space inside; a bearer token is one word")
    tls_ca = tls_ca or env.get("SANDBOXD_TLS_CA")
    tls_cert = tls_cert or env.get("SANDBOXD_TLS_CERT")
    tls_key = tls_key or env.get("SANDBOXD_TLS_KEY")

    if addr.startswith("unix:"):
        target, tcp = addr, False
    elif addr.startswith(("/", ".", "~")):
        target, tcp = "unix:" + str(Path(addr).expanduser().absolute()), False
    else:
        target, tcp = addr, True
    creds = None
    server_name = None
    if tls_ca or tls_cert or tls_key:
        if not tcp:
            raise ValueError("tls_ca, tls_cert and tls_key are for a TCP address: the socket needs no TLS")
        if bool(tls_cert) != bool(tls_key):
            raise ValueError("tls_cert and tls_key go together: a client certificate needs its key")
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(tls_ca) if tls_ca else None,
            private_key=_read(tls_key) if tls_key else None,
            certificate_chain=_read(tls_cert) if tls_cert else None,
        )
        server_name = target.rsplit(":", 1)[0].strip("[]")
    return Settings(target, token or None, creds, server_name)


class Retry:
    """One call's retrying of refusals: a RESOURCE_EXHAUSTED or UNAVAILABLE
    answer with a retry delay is made again after that delay, stretched by
    up to a fifth at random, until ``within`` seconds from the first
    refusal. A refusal comes before a run starts, so a run is never made
    twice; callers retry only answers that came before any event."""

    def __init__(self, within: float) -> None:
        self.within = within
        self.deadline: Optional[float] = None

    def wait(self, err: SandboxdError) -> Optional[float]:
        """Seconds to wait before the next try, or None not to retry."""
        if self.within <= 0 or err.retry_delay is None or not isinstance(err, (ResourceExhausted, Unavailable)):
            return None
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + self.within
        wait = err.retry_delay * (1 + random.random() / 5)
        if now + wait > self.deadline:
            return None
        log.info("sandboxd: %s; retrying in %.2fs", err.message, wait)
        return wait

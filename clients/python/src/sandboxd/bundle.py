"""Bundles as data: verify a run's bundle (the bytes GetBundle streams, a
``.tar.zst``) and read its manifest and entries.

A bundle's digest is the SHA-256 of its uncompressed tar; its manifest
lists every other entry with its size and SHA-256, and its ``reproducible``
section has a digest of its own. :func:`verify` checks all three, and
refuses what a canonical bundle never holds (links, devices, ``..``,
absolute names, duplicates), as ``sandboxd verify`` does, before a caller
reads anything from it.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import zstandard

from sandboxd.errors import BundleInvalid

#: The largest bundle verify decompresses, as the daemon's own reader.
MAX_UNCOMPRESSED = 512 << 20
_FORMAT = "sandboxd.bundle/v1"


@dataclass(frozen=True)
class Bundle:
    """A verified bundle: its digest, its manifest and its entries."""

    digest: str
    manifest: dict[str, Any]
    entries: dict[str, bytes]

    @property
    def reproducible(self) -> dict[str, Any]:
        """What a run that reproduces has the same: request, image,
        runtime, outcome, outputs."""
        return self.manifest["reproducible"]

    @property
    def run(self) -> dict[str, Any]:
        """This run's own: id, times, peak memory."""
        return self.manifest["run"]

    @property
    def stdout(self) -> bytes:
        return self.entries.get("stdout", b"")

    @property
    def stderr(self) -> bytes:
        return self.entries.get("stderr", b"")

    def output(self, path: str) -> bytes:
        """An output file the run left in /workspace."""
        return self.entries["output/" + path]


def _outside_strings(text: str) -> Iterator[tuple[int, str, bool]]:
    """Each character of JSON text with its index, and whether it is
    outside every string (so white space there is between tokens)."""
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            yield i, ch, False
        else:
            in_string = ch == '"'
            yield i, ch, not in_string


def _compact(raw: str) -> bytes:
    """JSON without the white space between tokens, strings untouched, as
    Go's json.Compact writes it: what the reproducible digest is of."""
    return "".join(ch for _, ch, outside in _outside_strings(raw) if not (outside and ch in " \t\r\n")).encode()


def _reproducible_section(manifest_text: str) -> str:
    """The raw text of the manifest's top-level "reproducible" value."""
    key = '"reproducible"'
    depth = 0
    last = ""  # the last character between tokens: a key follows { or ,
    for i, ch, outside in _outside_strings(manifest_text):
        if outside and ch in "{[":
            depth += 1
        elif outside and ch in "}]":
            depth -= 1
        elif ch == '"' and last in "{," and depth == 1 and manifest_text.startswith(key, i):
            start = manifest_text.index(":", i + len(key)) + 1
            while manifest_text[start] in " \t\r\n":
                start += 1
            _, end = json.JSONDecoder().raw_decode(manifest_text, start)
            return manifest_text[start:end]
        if outside and ch not in " \t\r\n":
            last = ch
        elif ch == '"':
            last = '"'
    raise BundleInvalid("manifest: no reproducible section")


def verify(data: bytes, digest: Optional[str] = None) -> Bundle:
    """Verify a bundle's bytes (zstd-compressed tar) and return it; raise
    :class:`BundleInvalid` naming what is wrong. With ``digest``, the bundle
    must be that one."""
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data))
        chunks, size = [], 0
        # read() may answer short of its size: read to the end.
        while size <= MAX_UNCOMPRESSED:
            chunk = reader.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        tar_bytes = b"".join(chunks)
    except zstandard.ZstdError as e:
        raise BundleInvalid(f"not a zstd stream: {e}") from None
    if len(tar_bytes) > MAX_UNCOMPRESSED:
        raise BundleInvalid(f"more than {MAX_UNCOMPRESSED} bytes uncompressed")
    got = "sha256:" + hashlib.sha256(tar_bytes).hexdigest()
    if digest is not None and got != digest:
        raise BundleInvalid(f"the bundle's digest is {got}, not {digest}")

    entries: dict[str, bytes] = {}
    modes: dict[str, bool] = {}
    manifest_raw: Optional[bytes] = None
    try:
        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tf:
            for member in tf:
                name = member.name
                if name.startswith("/") or ".." in name.split("/"):
                    raise BundleInvalid(f"entry {name!r} leaves the bundle")
                if member.isdir():
                    continue
                if not member.isreg():
                    raise BundleInvalid(f"entry {name!r} is not a file or folder")
                if name in entries or name == "manifest.json" and manifest_raw is not None:
                    raise BundleInvalid(f"entry {name!r} is there twice")
                f = tf.extractfile(member)
                content = f.read() if f else b""
                if name == "manifest.json":
                    manifest_raw = content
                else:
                    entries[name] = content
                    modes[name] = bool(member.mode & 0o100)
    except tarfile.TarError as e:
        raise BundleInvalid(f"not a tar: {e}") from None
    if manifest_raw is None:
        raise BundleInvalid("no manifest.json")
    text = manifest_raw.decode()
    manifest = json.loads(text)
    if manifest.get("format") != _FORMAT:
        raise BundleInvalid(f"manifest format {manifest.get('format')!r} is not {_FORMAT!r}")
    section = _compact(_reproducible_section(text))
    if "sha256:" + hashlib.sha256(section).hexdigest() != manifest.get("run", {}).get("reproducible_digest"):
        raise BundleInvalid("the manifest's reproducible section does not match its digest")
    listed = set()
    for e in manifest["reproducible"].get("entries") or []:
        path = e["path"]
        content = entries.get(path)
        if content is None:
            raise BundleInvalid(f"the manifest lists {path!r}, which is not in the bundle")
        if len(content) != e["size"] or hashlib.sha256(content).hexdigest() != e["sha256"]:
            raise BundleInvalid(f"entry {path!r} does not match its size and SHA-256 in the manifest")
        if modes[path] != bool(e.get("executable", False)):
            raise BundleInvalid(f"entry {path!r} has another mode than the manifest says")
        listed.add(path)
    extra = sorted(set(entries) - listed)
    if extra:
        raise BundleInvalid(f"entry {extra[0]!r} is not in the manifest")
    return Bundle(got, manifest, entries)

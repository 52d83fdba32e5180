"""A multipart upload streamed straight to disk, cut as soon as it passes its byte cap.

Nothing the client sends becomes a path: the file is written to a fresh
temporary name inside the server's own directory (`O_EXCL | O_NOFOLLOW`,
mode 0600), and the client's file name is only *read*, reduced to a safe
display name (`safe_name`), and checked against the formats the service
takes. The first part named `file` is the upload; other parts are skipped,
but each may hold at most `MAX_FIELD_BYTES` (413); more than `MAX_PARTS`
parts, or a part header over the parser's bounds, is a 400. The content is
checked against its claimed format (magic bytes, or text without NUL bytes
for CSV, TSV and JSON), so a renamed binary is refused; text in another
encoding than UTF-8 is stored as UTF-8 (`text_encoding`).

The bytes of one key's uploads in progress are counted together
(`InflightUploads`): past the key's limit the upload is cut (429), so many
concurrent uploads cannot hold more temporary disk than one allowed upload.
A temporary file is named `.upload-<host>-<pid>-<random>`; at start the
server deletes those its host's dead processes left (`sweep_partial_uploads`).
"""

from __future__ import annotations

import codecs
import hashlib
import logging
import os
import re
import secrets
import socket
import threading
import time
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from sbx.agent.service.problems import Problem

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

FORMATS = {
    ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet", ".xlsx": "excel", ".xls": "excel",
    ".json": "json", ".jsonl": "json",
}
_MAGIC = {".parquet": b"PAR1", ".xlsx": b"PK\x03\x04", ".xls": b"\xd0\xcf\x11\xe0"}
MAX_PARTS = 8
MAX_FIELD_BYTES = 64 * 1024
"""The most a part other than the upload may hold (a form field, a second file)."""
PREFIX = ".upload-"
STALE_S = 86400.0
"""A temporary upload file older than this is swept at start whoever wrote it."""
MAX_NAME = 100
MAX_NAME_BYTES = 200
"""A stored name's UTF-8 bytes (a file name may hold 255)."""
HEAD_BYTES = 64 * 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class Hold:
    """One upload's share of its key's in-flight bytes."""

    ledger: InflightUploads
    principal: str
    limit: int
    """The most the key's uploads in progress may hold together."""
    taken: int = 0

    def take(self, size: int) -> bool:
        """Count `size` more bytes; False (nothing counted) when the key would pass `limit`."""
        if not self.ledger.take(self.principal, size, self.limit):
            return False
        self.taken += size
        return True


@dataclass
class InflightUploads:
    """The bytes each key's uploads in progress hold on this replica's disk."""

    _held: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, principal: str, size: int, limit: int) -> bool:
        """Count `size` bytes for `principal` unless its total would pass `limit`."""
        with self._lock:
            held = self._held.get(principal, 0)
            if held + size > limit:
                return False
            self._held[principal] = held + size
            return True

    def held(self, principal: str) -> int:
        """Bytes `principal`'s uploads in progress hold now."""
        with self._lock:
            return self._held.get(principal, 0)

    @contextmanager
    def hold(self, principal: str, limit: int) -> Iterator[Hold]:
        """A share for one upload, given back when the block ends (stored or refused)."""
        share = Hold(ledger=self, principal=principal, limit=limit)
        try:
            yield share
        finally:
            with self._lock:
                left = self._held.get(principal, 0) - share.taken
                if left > 0:
                    self._held[principal] = left
                else:
                    self._held.pop(principal, None)


def _owner_tag() -> str:
    return f"{_UNSAFE.sub('_', socket.gethostname())[:40]}-{os.getpid()}"


def sweep_partial_uploads(directory: Path) -> int:
    """Delete the temporary uploads a crashed process left; how many went.

    Swept: those of this host whose process is gone, those of the format before
    owners were named, and any older than `STALE_S`. Another live process's
    upload in progress (a replica sharing the directory) is left alone.
    """
    host = _UNSAFE.sub("_", socket.gethostname())[:40]
    swept = 0
    for path in directory.glob(PREFIX + "*"):
        owner, _, pid = path.name[len(PREFIX):].rpartition("-")[0].rpartition("-")
        try:
            stale = time.time() - path.lstat().st_mtime > STALE_S
            if stale or not owner or (owner == host and not _alive(int(pid))):
                path.unlink()
                swept += 1
        except (OSError, ValueError):
            continue
    if swept:
        logger.warning("deleted %d partial upload(s) left by a crash", swept)
    return swept


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # at start this process has no upload yet: a reused pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(kw_only=True)
class Upload:
    """A received file, still under its temporary name."""

    path: Path
    """Where it was written (the caller moves or deletes it)."""
    filename: str
    """The client's file name, as sent (never used as a path)."""
    size: int = 0
    sha256: str = ""
    head: bytes = b""
    """The first `HEAD_BYTES`, for the format check and the preview."""


def safe_name(filename: str) -> str:
    """A name of letters and digits (any script, NFC) and `._-`, never hidden, bounded.

    `销售.csv` stays `销售.csv`; separators, spaces, controls, bidi and other invisible
    characters become `_`; at most `MAX_NAME` characters and `MAX_NAME_BYTES` UTF-8 bytes,
    the suffix kept.
    """
    base = unicodedata.normalize("NFC", filename.replace("\\", "/").rsplit("/", 1)[-1]).strip()
    kept = "".join(ch if ch in "._-" or (ch.isalnum() and ch.isprintable()) else "\0"
                   for ch in base)
    cleaned = re.sub("\0+", "_", kept).lstrip(".") or "data"
    stem, dot, suffix = cleaned.rpartition(".")
    if not dot or len(suffix) > 16:
        stem, suffix = cleaned, ""
    stem = stem[:MAX_NAME]
    while len(stem) + len(suffix) + 1 > MAX_NAME or len(
            (stem + "." + suffix).encode()) > MAX_NAME_BYTES:
        stem = stem[:-1]
    return (stem or "data") + ("." + suffix if suffix else "")


def format_of(name: str) -> str:
    """The dataset format of a safe name, or 415 naming the ones taken."""
    suffix = Path(name).suffix.lower()
    if suffix not in FORMATS:
        taken = ", ".join(sorted(FORMATS))
        raise Problem(415, "unsupported-format", f"{name!r}: upload one of {taken}")
    return FORMATS[suffix]


def check_content(name: str, head: bytes) -> None:
    """Refuse content that is not what its name claims (422).

    Binary formats by their magic bytes; text by holding no NUL byte (UTF-16, marked by
    its byte order mark, aside). Which encoding text is in is `text_encoding`'s to tell.
    """
    suffix = Path(name).suffix.lower()
    magic = _MAGIC.get(suffix)
    if magic is not None:
        if not head.startswith(magic):
            raise Problem(422, "bad-content", f"{name!r} is not a valid {suffix[1:]} file")
        return
    if b"\x00" in head and head[:2] not in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        raise Problem(422, "bad-content", f"{name!r} is not text (it contains NUL bytes)")


async def receive_upload(request: Request, directory: Path, cap: int, too_large: Problem,
                         hold: Hold | None = None, over_hold: Problem | None = None) -> Upload:
    """Stream the request's multipart body; its `file` part goes to disk (at most `cap` bytes).

    With `hold`, every byte written is counted in it first; past its limit the upload is
    cut with `over_hold` (a 429).
    """
    media, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if media != b"multipart/form-data" or not boundary:
        raise Problem(415, "unsupported-media-type",
                      "upload the file as multipart/form-data with a part named 'file'")
    receiver = _Receiver(directory=directory, cap=cap, hold=hold)
    parser = MultipartParser(boundary, receiver.callbacks())
    try:
        async for chunk in request.stream():
            await run_in_threadpool(parser.write, chunk)  # parsing and disk writes block
            if receiver.too_large:
                raise too_large
            if receiver.over_hold:
                raise over_hold or too_large
            if receiver.field_too_large:
                raise Problem(413, "part-too-large", f"a form part other than the file holds "
                              f"more than the {MAX_FIELD_BYTES} bytes allowed")
        parser.finalize()
    except MultipartParseError as exc:
        receiver.discard()
        raise Problem(400, "malformed-multipart", f"the multipart body is malformed: {exc}"
                      ) from None
    except BaseException:
        receiver.discard()
        raise
    if receiver.upload is None or not receiver.done:
        receiver.discard()
        raise Problem(400, "malformed-multipart", "no complete part named 'file' with a filename")
    receiver.upload.sha256 = receiver.digest.hexdigest()
    return receiver.upload


class _Receiver:
    """The parser's callbacks: part headers collected, the `file` part written and counted."""

    def __init__(self, *, directory: Path, cap: int, hold: Hold | None) -> None:
        self.directory = directory
        self.cap = cap
        self.hold = hold
        self.parts = 0
        self.part_bytes = 0
        self.field_too_large = False
        self.over_hold = False
        self.field = bytearray()
        self.value = bytearray()
        self.headers: dict[str, bytes] = {}
        self.target: IO[bytes] | None = None
        self.upload: Upload | None = None
        self.done = False
        self.too_large = False
        self.digest = hashlib.sha256()

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self.on_part_begin, "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value, "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished, "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
        }

    def on_part_begin(self) -> None:
        self.parts += 1
        self.part_bytes = 0
        self.headers = {}
        if self.parts > MAX_PARTS:
            raise MultipartParseError(f"more than {MAX_PARTS} parts")

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.field += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.value += data[start:end]

    def on_header_end(self) -> None:
        self.headers[bytes(self.field).decode("latin-1").lower()] = bytes(self.value)
        self.field.clear()
        self.value.clear()

    def on_headers_finished(self) -> None:
        """The first part named `file` with a file name is the upload: open its target."""
        _, options = parse_options_header(self.headers.get("content-disposition", b""))
        filename = options.get(b"filename")
        if self.upload is None and options.get(b"name") == b"file" and filename:
            path = self.directory / f"{PREFIX}{_owner_tag()}-{secrets.token_hex(8)}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            self.target = os.fdopen(os.open(path, flags, 0o600), "wb")
            self.upload = Upload(path=path, filename=filename.decode("utf-8", "replace"))

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        """Write and count the upload's bytes; past the cap, stop writing and flag it."""
        if self.target is None or self.upload is None:
            self.part_bytes += end - start
            self.field_too_large = self.field_too_large or self.part_bytes > MAX_FIELD_BYTES
            return
        chunk = data[start:end]
        self.upload.size += len(chunk)
        if self.upload.size > self.cap:
            self.too_large = True
            return
        if self.hold is not None and not self.hold.take(len(chunk)):
            self.over_hold = True
            return
        self.target.write(chunk)
        self.digest.update(chunk)
        if len(self.upload.head) < HEAD_BYTES:
            self.upload.head += chunk[: HEAD_BYTES - len(self.upload.head)]

    def on_part_end(self) -> None:
        if self.target is not None:
            self.target.close()
            self.target = None
            self.done = True

    def discard(self) -> None:
        """Close and delete a partial upload."""
        if self.target is not None:
            self.target.close()
            self.target = None
        if self.upload is not None:
            self.upload.path.unlink(missing_ok=True)

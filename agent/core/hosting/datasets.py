"""A tenant's datasets: how a received file becomes one, whichever face received it.

A dataset is stored as `<data dir>/datasets/<id>/<safe name>`: the directory
is an id the server made, and the client's file name is only *read*, reduced
to a safe display name (`safe_name`) and checked against the formats taken
(`format_of`). The content is checked against its claimed format (magic
bytes, or text without NUL bytes for CSV, TSV and JSON), so a renamed binary
is refused; text in another encoding than UTF-8 is stored as UTF-8
(`text_encoding`). The preview computed here is what the model is told about
the file when a conversation uses it (columns and dtypes for CSV/TSV; the
reader to use for Parquet, Excel and JSON), and for text, the encoding it was
read in. `store_upload` is the one way a file becomes a dataset: the HTTP
API's upload and the MCP face's `upload_dataset` both come here.

The bytes of one key's uploads in progress are counted together
(`InflightUploads`): past the key's limit the upload is cut (429), so many
concurrent uploads cannot hold more temporary disk than one allowed upload.
A temporary file is named `.upload-<host>-<pid>-<random>`; at start the
server deletes those its host's dead processes left (`sweep_partial_uploads`).
"""

from __future__ import annotations

import codecs
import logging
import os
import re
import secrets
import shutil
import socket
import threading
import time
import unicodedata
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from sbx.agent.core.config import ServiceQuotas
from sbx.agent.core.hosting import text_encoding
from sbx.agent.core.hosting.store.models import Dataset
from sbx.agent.core.hosting.store.quotas import reserve_dataset_bytes, storage_used, stored_bytes
from sbx.agent.core.problem import Problem, quota_exceeded
from sbx.agent.provenance.data import remember_sha256
from sbx.sandbox.units import format_size
from sbx.tools.builtin.data_summary import summarize_data

if TYPE_CHECKING:
    from sbx.agent.core.hosting.host import Host

FORMATS = {
    ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet", ".xlsx": "excel", ".xls": "excel",
    ".json": "json", ".jsonl": "json",
}
_MAGIC = {".parquet": b"PAR1", ".xlsx": b"PK\x03\x04", ".xls": b"\xd0\xcf\x11\xe0"}
TEXT_FORMATS = frozenset({"csv", "tsv", "json"})
"""Formats that are text: stored as UTF-8 whatever encoding they came in."""
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

    def keep_head(self, chunk: bytes) -> None:
        """Keep what `chunk` (the next bytes written) adds to the head."""
        if len(self.head) < HEAD_BYTES:
            self.head += chunk[: HEAD_BYTES - len(self.head)]


def open_upload(directory: Path, filename: str) -> tuple[IO[bytes], Upload]:
    """A fresh temporary file for an upload (`O_EXCL | O_NOFOLLOW`, mode 0600), and its record.

    Its name is this process's (`sweep_partial_uploads` knows whose it is); `filename`
    is the client's, kept only to be read.
    """
    path = directory / f"{PREFIX}{_owner_tag()}-{secrets.token_hex(8)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.fdopen(os.open(path, flags, 0o600), "wb"), Upload(path=path, filename=filename)


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


def upload_room(service: Host, principal: str, quotas: ServiceQuotas) -> tuple[int, Problem]:
    """How many bytes the key's uploads in progress may hold together, and the 429 past it.

    One allowed upload's worth (`upload_bytes`), and never more than the room left in
    `dataset_bytes` and `storage_bytes`: concurrent uploads share it, so they cannot hold
    more temporary disk than the key could keep.
    """
    with service.db.read() as session:
        datasets = quotas.dataset_bytes - stored_bytes(session, principal)
        storage = quotas.storage_bytes - storage_used(session, principal)
    limit = max(0, min(quotas.upload_bytes, datasets, storage))
    quota = ("upload_bytes" if limit == quotas.upload_bytes else
             "dataset_bytes" if limit == max(0, datasets) else "storage_bytes")
    over = quota_exceeded(quota, f"your uploads in progress would hold more than "
                          f"{format_size(limit)}, the room your quotas leave; wait for them "
                          "to end, or delete datasets or runs", 1.0)
    return limit, over


def store_upload(service: Host, principal: str, quotas: ServiceQuotas, upload: Upload
                 ) -> Dataset:
    """Check the file, move it under its id, compute the preview, reserve the bytes.

    The one way a file becomes a dataset: `POST /v1/datasets` and the MCP face's
    `upload_dataset` both come here. Raises `Problem` (415, 422, 429).
    """
    name = safe_name(upload.filename)
    fmt = format_of(name)
    check_content(name, upload.head)
    codec = text_encoding.detect(upload.path) if fmt in TEXT_FORMATS else None
    if codec not in (None, text_encoding.UTF8):
        upload.size, upload.sha256, upload.head = text_encoding.store_as_utf8(
            upload.path, codec, name, head_bytes=HEAD_BYTES)
    ident = "ds-" + uuid.uuid4().hex[:12]
    directory = service.paths.datasets / ident
    directory.mkdir(mode=0o700)
    final = directory / name
    try:
        os.rename(upload.path, final)
        os.chmod(final, 0o644)  # the sandbox's unprivileged user reads it through its mount
        remember_sha256(final, upload.sha256)  # hashed as it streamed in: not again per run
        row = Dataset(id=ident, principal=principal, name=name, format=fmt,
                      size=upload.size, sha256=upload.sha256,
                      preview=_preview(final, codec), created_at=time.time())
        with service.db.write() as session:
            reserve_dataset_bytes(session, principal, quotas, upload.size)
            session.add(row)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return row


def _preview(path: Path, codec: str | None) -> str:
    """What the model is told about the file, and for text, the encoding it was read in."""
    summary = summarize_data([path])
    return summary if codec is None else f"{summary}\n{text_encoding.describe(codec)}"

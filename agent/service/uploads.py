"""A multipart upload streamed straight to disk, cut as soon as it passes its byte cap.

Nothing the client sends becomes a path: the file is written to a fresh
temporary name inside the server's own directory (`O_EXCL | O_NOFOLLOW`,
mode 0600), and the client's file name is only *read*, reduced to a safe
display name (`safe_name`), and checked against the formats the service
takes. The first part named `file` is the upload; other parts are skipped;
more than `MAX_PARTS` parts, or a part header over the parser's bounds, is a
400. The content is checked against its claimed format (magic bytes, or
UTF-8 text for CSV, TSV and JSON), so a renamed binary is refused.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from dataclasses import dataclass
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
MAX_NAME = 100
HEAD_BYTES = 64 * 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


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
    """A display name made only of `A-Za-z0-9._-`, never hidden, at most `MAX_NAME` long."""
    base = filename.replace("\\", "/").rsplit("/", 1)[-1].strip()
    cleaned = _UNSAFE.sub("_", base).lstrip(".") or "data"
    stem, dot, suffix = cleaned.rpartition(".")
    if dot and len(cleaned) > MAX_NAME:
        cleaned = stem[: MAX_NAME - len(suffix) - 1] + "." + suffix
    return cleaned[:MAX_NAME]


def format_of(name: str) -> str:
    """The dataset format of a safe name, or 415 naming the ones taken."""
    suffix = Path(name).suffix.lower()
    if suffix not in FORMATS:
        taken = ", ".join(sorted(FORMATS))
        raise Problem(415, "unsupported-format", f"{name!r}: upload one of {taken}")
    return FORMATS[suffix]


def check_content(name: str, head: bytes) -> None:
    """Refuse content that is not what its name claims (422)."""
    suffix = Path(name).suffix.lower()
    magic = _MAGIC.get(suffix)
    if magic is not None:
        if not head.startswith(magic):
            raise Problem(422, "bad-content", f"{name!r} is not a valid {suffix[1:]} file")
        return
    if b"\x00" in head:
        raise Problem(422, "bad-content", f"{name!r} is not text (it contains NUL bytes)")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # a character cut at the end of the head is fine
            raise Problem(422, "bad-content", f"{name!r} is not UTF-8 text") from None


async def receive_upload(request: Request, directory: Path, cap: int, too_large: Problem
                         ) -> Upload:
    """Stream the request's multipart body; its `file` part goes to disk (at most `cap` bytes)."""
    media, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if media != b"multipart/form-data" or not boundary:
        raise Problem(415, "unsupported-media-type",
                      "upload the file as multipart/form-data with a part named 'file'")
    receiver = _Receiver(directory=directory, cap=cap)
    parser = MultipartParser(boundary, receiver.callbacks())
    try:
        async for chunk in request.stream():
            await run_in_threadpool(parser.write, chunk)  # parsing and disk writes block
            if receiver.too_large:
                raise too_large
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

    def __init__(self, *, directory: Path, cap: int) -> None:
        self.directory = directory
        self.cap = cap
        self.parts = 0
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
            path = self.directory / f".upload-{secrets.token_hex(8)}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            self.target = os.fdopen(os.open(path, flags, 0o600), "wb")
            self.upload = Upload(path=path, filename=filename.decode("utf-8", "replace"))

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        """Write and count the upload's bytes; past the cap, stop writing and flag it."""
        if self.target is None or self.upload is None:
            return
        chunk = data[start:end]
        self.upload.size += len(chunk)
        if self.upload.size > self.cap:
            self.too_large = True
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

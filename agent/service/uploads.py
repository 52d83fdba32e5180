"""A multipart upload streamed straight to disk, cut as soon as it passes its byte cap.

Nothing the client sends becomes a path: the file is written to a fresh
temporary name inside the server's own directory (`O_EXCL | O_NOFOLLOW`,
mode 0600); what it may be called and hold is the hosting's to check
(`sbx.agent.core.hosting.datasets`). The first part named `file` is the
upload; other parts are skipped, but each may hold at most `MAX_FIELD_BYTES`
(413); more than `MAX_PARTS` parts, or a part header over the parser's
bounds, is a 400. Every byte written is counted in the key's share of the
bytes in flight first (`UploadHold`): past it the upload is cut (429).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import IO, TYPE_CHECKING

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from sbx.agent import Upload, UploadHold, open_upload
from sbx.agent.service.problems import Problem

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

MAX_PARTS = 8
MAX_FIELD_BYTES = 64 * 1024
"""The most a part other than the upload may hold (a form field, a second file)."""


async def receive_upload(
    request: Request, directory: Path, cap: int, too_large: Problem,
    hold: UploadHold | None = None, over_hold: Problem | None = None,
) -> Upload:
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

    def __init__(self, *, directory: Path, cap: int, hold: UploadHold | None) -> None:
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
            self.target, self.upload = open_upload(self.directory,
                                                   filename.decode("utf-8", "replace"))

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
        self.upload.keep_head(chunk)

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

"""Text uploads read in the encoding they came in, and stored as UTF-8.

An analyst's CSV is often an Excel export from Windows: Windows-1252, not
UTF-8 (`Montréal` is `Montr\\xe9al`). `sbx ask --data` hands such a file to
the sandbox as it is; the service stores it as UTF-8, so pandas' defaults
read it, the preview shows its names intact, and the sandbox sees one
encoding whatever the client sent. The rule, in order:

    UTF-8          the whole file decodes (a UTF-8 byte order mark is dropped)
    UTF-16         it starts with a UTF-16 byte order mark ("Unicode text" exports)
    Windows-1252   anything else; ISO-8859-1 when it holds one of the five bytes
                   Windows-1252 leaves undefined

A statistical detector was tried and not taken: on a few rows it guesses
wrong in ways that change letters silently (charset-normalizer reads
`Café,3€` as cp775, `São` as cp1250's `Săo`). Valid UTF-8 is almost never
an accident, and Windows-1252 is what Western spreadsheets export; the
preview names the encoding used, so a file in another one is seen at once.
"""

from __future__ import annotations

import codecs
import hashlib
import os
from pathlib import Path

from sbx.agent.core.problem import Problem

CHUNK = 1 << 20
UTF8 = "utf-8"
_NAMES = {UTF8: "UTF-8", "utf-16": "UTF-16", "cp1252": "Windows-1252", "latin-1": "ISO-8859-1"}


def detect(path: Path) -> str:
    """The codec the file's text is in (`utf-8`, `utf-16`, `cp1252` or `latin-1`)."""
    with path.open("rb") as file:
        if file.read(2) in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
            return "utf-16"
    for codec in ("utf-8-sig", "cp1252"):
        if _decodes(path, codec):
            return UTF8 if codec == "utf-8-sig" else codec
    return "latin-1"  # every byte is a character in it


def describe(codec: str) -> str:
    """The preview's line naming how the text was read."""
    name = _NAMES.get(codec, codec)
    if codec == UTF8:
        return f"  text encoding: {name}"
    return f"  text encoding: {name} (detected; stored as UTF-8)"


def store_as_utf8(path: Path, codec: str, name: str, *, head_bytes: int
                  ) -> tuple[int, str, bytes]:
    """Rewrite the file `name` in UTF-8 (in place, through a new file); its size, sha256, head.

    The head is the first `head_bytes` of the UTF-8 text, for the preview.

    A NUL character in the text is refused (422), as it is in a UTF-8 upload.
    """
    decoder = codecs.getincrementaldecoder(codec)()
    digest, size, head = hashlib.sha256(), 0, b""
    fresh = path.with_name(path.name + ".utf8")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with path.open("rb") as source, os.fdopen(fd, "wb") as target:
            while chunk := source.read(CHUNK):
                data = decoder.decode(chunk).encode()
                if b"\x00" in data:
                    raise Problem(422, "bad-content",
                                  f"{name!r} is not text (it contains NUL characters)")
                target.write(data)
                digest.update(data)
                size += len(data)
                head += data[: max(0, head_bytes - len(head))]
            tail = decoder.decode(b"", final=True).encode()
            target.write(tail)
            digest.update(tail)
            size += len(tail)
        os.replace(fresh, path)
    except UnicodeDecodeError:
        fresh.unlink(missing_ok=True)
        raise Problem(422, "bad-content",
                      f"{name!r} is not {_NAMES.get(codec, codec)} text") from None
    except BaseException:
        fresh.unlink(missing_ok=True)
        raise
    return size, digest.hexdigest(), head


def _decodes(path: Path, codec: str) -> bool:
    decoder = codecs.getincrementaldecoder(codec)()
    try:
        with path.open("rb") as file:
            while chunk := file.read(CHUNK):
                decoder.decode(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True

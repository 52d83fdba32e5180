"""`Content-Disposition` for any file name: RFC 6266 with RFC 5987's `filename*`.

A header is Latin-1 on the wire, so a name such as `图表.png` cannot be sent
as `filename="..."`: it goes percent-encoded in `filename*=UTF-8''...`, with
an ASCII `filename="..."` fallback for the clients that read only that one.
Control characters, quotes and backslashes never reach the header.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from urllib.parse import quote

_NOT_ASCII_SAFE = re.compile(r"[^A-Za-z0-9._ -]+")
FALLBACK = "download"


def content_disposition(kind: str, name: str) -> str:
    """`<kind>; filename="<ascii>"` plus `filename*=UTF-8''<encoded>` when the name needs it."""
    base = PurePosixPath(name.replace("\\", "/")).name
    ascii_name = _NOT_ASCII_SAFE.sub("_", base).strip(" ") or FALLBACK
    if ascii_name.strip("_.") == "":
        suffix = PurePosixPath(base).suffix
        ascii_name = FALLBACK + (suffix if suffix.isascii() and suffix.isprintable() else "")
    header = f'{kind}; filename="{ascii_name}"'
    if ascii_name != base:
        header += "; filename*=UTF-8''" + quote(base, safe="")
    return header

"""Reading what runs left behind: artifacts opened beneath their run's directory, never past it.

The front door's read side for faces that serve files (the HTTP API's
`/v1/runs/{id}/artifacts/...`, MCP's resources): the name a program chose is
checked (`unsafe_name_reason`) and the file is opened one component at a time
without following links (`open_artifact`), so a directory swapped for a link
while it is read opens nothing outside the run's output. The checks are the
sandbox's own file-copy rules (`sbx.sandbox.files`); faces reach them here.

Also the one place a restore settles what its replay wrote again (`keep_new`): a
copy of a file the conversation already recorded is removed, byte-equal by
SHA-256, so resuming never multiplies unrecorded copies on disk.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from sbx.sandbox.files import open_beneath, unsafe_name_reason

__all__ = ["file_sha256", "keep_new", "open_artifact", "unsafe_name_reason"]


def open_artifact(root: Path, parts: Sequence[str]) -> int:
    """A read-only descriptor of `root/parts...`, no link followed (`OSError` otherwise)."""
    return open_beneath(root, parts)


def file_sha256(path: Path) -> str | None:
    """The file's SHA-256 (hex), or None when it cannot be read here (another host, removed)."""
    try:
        with path.open("rb") as stream:
            return hashlib.file_digest(stream, "sha256").hexdigest()
    except OSError:
        return None


def keep_new(written: Mapping[str, tuple[int, str]], recorded: Iterable[Path], scratch: Path
             ) -> tuple[str, ...]:
    """Of the files just written below `scratch` (path -> (size, SHA-256)), those to keep.

    One byte-equal to a `recorded` file still on this host is removed (that one stays
    the copy on record); `scratch`'s emptied directories go too. Only recorded files
    of a size just written are read.
    """
    sizes = {size for size, _ in written.values()}
    digests = {file_sha256(path) for path in recorded if _size(path) in sizes}
    kept: list[str] = []
    for name, (_, digest) in written.items():
        path = Path(name)
        if digest in digests and path.is_relative_to(scratch):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        else:
            kept.append(name)
    for directory, _, _ in os.walk(scratch, topdown=False):
        with contextlib.suppress(OSError):  # not empty: something in it is kept
            os.rmdir(directory)
    return tuple(kept)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None

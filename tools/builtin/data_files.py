"""`list_data_files` and `preview_data_file`: host-side reads confined to the run's data paths.

The model never supplies a path. It picks a *name* from the index built from
`ToolContext.data_paths` (a file is named by its base name, a directory's
files by `dirname/relative/path`, exactly as `sandbox.files.data_mounts`
places them under `/data`). Opening walks from the data path one component at a time with
`O_NOFOLLOW`, so a symlink anywhere (or one swapped in after listing) is
refused, and the opened file must be the regular file that was indexed (same
device and inode). Reads stop at `max_bytes`.

These tools run on the host as the sbx process (often root), so they read no
more than the sandbox's uid could: a file or directory whose mode bits deny
uid/gid 1000 is refused (`sandbox.files.sandbox_can_read`), checked again on
the opened descriptor, where a file with a POSIX ACL (which mode bits do not
show) is refused as well. A hard link inside a data directory (more than one
name for the file) is refused too: it may be a second name for a file from
anywhere on the same filesystem, so it is left to the sandbox, where the
kernel checks the read as uid 1000.

Host-side previews cover CSV/TSV and text with the standard library; Parquet,
Excel and other binary formats are named and left to `execute_python`
(pandas and pyarrow live in the sandbox image, not on the host).
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field

from sbx.sandbox.files import sandbox_can_read
from sbx.sandbox.units import format_size
from sbx.tools.builtin.data_preview import preview_text
from sbx.tools.context import ToolContext
from sbx.tools.guard import DataGuard
from sbx.tools.policy import ListDataFilesRule, PreviewDataFileRule
from sbx.tools.registry import Tool, ToolFailure, build_tool

UNREADABLE = "not readable by the sandbox's user"
HARD_LINK = "hard link: not read on the host; the sandbox can try it under /data"
ACL = "has an access control list: not read on the host; the sandbox can try it under /data"
_BINARY_SUFFIXES = {".parquet": "pyarrow/pandas", ".xlsx": "openpyxl/pandas", ".xls": "pandas",
                    ".feather": "pyarrow", ".pkl": "pandas", ".zip": "zipfile", ".gz": "gzip"}


@dataclass(frozen=True)
class DataFile:
    """One readable data file as indexed."""

    name: str
    """The name the model uses: as it appears under `/data` in the sandbox."""
    root: Path
    """The resolved data path it was found under."""
    parts: tuple[str, ...]
    """Path components below `root` (empty when the data path is the file itself)."""
    size: int
    """Size in bytes when indexed."""
    dev: int
    """Device of the indexed file: the opened file must be the same one."""
    ino: int
    """Inode of the indexed file: the opened file must be the same one."""


@dataclass(frozen=True)
class DataIndex:
    """The run's data files, plus what was refused and why."""

    files: tuple[DataFile, ...]
    """Readable regular files, in listing order."""
    refused: tuple[str, ...]
    """`name (reason)` for symlinks, special files, hard links and unreadable paths."""

    def why_refused(self, name: str) -> str | None:
        """The reason `name` was refused, or None when it was not."""
        prefix = f"{name} ("
        for entry in self.refused:
            if entry.startswith(prefix):
                return entry[len(prefix) : -1]
        return None


def index_data_files(paths: list[Path], *, max_files: int) -> DataIndex:
    """Index regular files under the data paths; symlinks and special files inside are refused.

    A data path itself is resolved and named like the sandbox mounts it
    (`/data/<resolved name>`): the operator chose it. Inside a directory,
    nothing is followed.
    """
    files: list[DataFile] = []
    refused: list[str] = []
    for given in paths:
        root = Path(given).expanduser().resolve()  # the operator's choice, named as mounted
        name = root.name or "root"
        try:
            info = os.lstat(root)
        except OSError as exc:
            refused.append(f"{name} ({exc.strerror})")
            continue
        if not sandbox_can_read(info):
            refused.append(f"{name} ({UNREADABLE})")
        elif stat.S_ISREG(info.st_mode):
            files.append(DataFile(name, root, (), info.st_size, info.st_dev, info.st_ino))
        elif stat.S_ISDIR(info.st_mode):
            _walk(root, name, files, refused, max_files)
        else:
            refused.append(f"{name} (not a regular file)")
    return DataIndex(files=tuple(files[:max_files]), refused=tuple(refused))


def _walk(root: Path, top: str, files: list[DataFile], refused: list[str], max_files: int) -> None:
    """Breadth-first, never following symlinks, stopping at `max_files`."""
    queue: deque[tuple[str, ...]] = deque([()])
    while queue and len(files) < max_files:
        rel = queue.popleft()
        try:
            entries = sorted(os.scandir(root.joinpath(*rel)), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            parts = (*rel, entry.name)
            name = "/".join((top, *parts))
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone since the listing
            reason = _refusal(info)
            if reason is not None:
                refused.append(f"{name} ({reason})")
            elif stat.S_ISDIR(info.st_mode):
                queue.append(parts)
            else:
                files.append(DataFile(name, root, parts, info.st_size, info.st_dev, info.st_ino))


def _refusal(info: os.stat_result) -> str | None:
    """Why an entry inside a data directory is not indexed, or None (a file or directory)."""
    if stat.S_ISLNK(info.st_mode):
        return "symlink"
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        return "not a regular file"
    if not sandbox_can_read(info):
        return UNREADABLE
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        return HARD_LINK
    return None


def open_data_file(item: DataFile) -> int:
    """Open the indexed file without following any symlink; return a read-only fd."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    if not item.parts:
        fd = os.open(item.root, flags | os.O_NONBLOCK)
    else:
        fd = os.open(item.root, flags | os.O_DIRECTORY)
        try:
            for part in item.parts[:-1]:
                next_fd = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = next_fd
            dir_fd, fd = fd, os.open(item.parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
            os.close(dir_fd)
        except OSError:
            os.close(fd)
            raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) != (item.dev, item.ino):
        os.close(fd)
        raise ToolFailure(f"{item.name!r} changed since it was listed; refusing to read it")
    reason = _unsafe_to_read(fd, info, below=bool(item.parts))
    if reason is not None:
        os.close(fd)  # its mode, links or ACL changed since the listing, or mode bits cannot tell
        raise PermissionError(errno.EACCES, reason)
    return fd


def _unsafe_to_read(fd: int, info: os.stat_result, *, below: bool) -> str | None:
    """Why the host must not read this open file for the model, or None.

    Checked on the descriptor that will be read. A POSIX ACL can deny uid 1000
    what the mode bits allow, and mode bits are all `sandbox_can_read` sees:
    such files are left to the sandbox, where the kernel applies the ACL.
    """
    if not sandbox_can_read(info):
        return UNREADABLE
    if below and info.st_nlink > 1:
        return HARD_LINK
    try:
        attributes = os.listxattr(fd)
    except OSError:  # no extended attributes on this filesystem: no ACL either
        attributes = []
    if "system.posix_acl_access" in attributes:
        return ACL
    return None


def make_list_data_files(rule: ListDataFilesRule) -> Tool:
    """The `list_data_files` tool."""

    def list_data_files(ctx: ToolContext) -> str:
        """List the data files given for this run, with their sizes.

        Each file is readable in the sandbox at /data/NAME; pass NAME to preview_data_file.

        Args:
            ctx: The run's context, injected by the gate (not part of the schema).
        """
        index = index_data_files(ctx.data_paths, max_files=rule.max_files)
        if not index.files and not index.refused:
            return "No data files were given for this run."
        lines = [f"{f.name}  ({format_size(f.size)})" for f in index.files]
        lines += [f"refused: {reason}" for reason in index.refused]
        return "\n".join(lines)

    return build_tool(list_data_files)


def make_preview_data_file(rule: PreviewDataFileRule, guard: DataGuard | None = None) -> Tool:
    """The `preview_data_file` tool, bounded by the policy's rows and bytes, columns guarded."""

    def preview_data_file(
        name: str, ctx: ToolContext, rows: Annotated[int, Field(ge=1)] = 10
    ) -> str:
        """Show the first rows of one data file (CSV/TSV as a table, other text as lines).

        Args:
            name: A name exactly as list_data_files shows it, e.g. `sales.csv`.
            ctx: The run's context, injected by the gate (not part of the schema).
            rows: How many rows (or lines) to show.
        """
        index = index_data_files(ctx.data_paths, max_files=100_000)
        item = next((f for f in index.files if f.name == name), None)
        if item is None and index.why_refused(name) is not None:
            raise ToolFailure(f"{name!r} is refused: {index.why_refused(name)}")
        if item is None:
            known = ", ".join(f.name for f in index.files[:50]) or "(none)"
            raise ToolFailure(f"no data file named {name!r}; available: {known}")
        suffix = Path(name).suffix.lower()
        if suffix in _BINARY_SUFFIXES:
            library = _BINARY_SUFFIXES[suffix]
            raise ToolFailure(f"{name} is {suffix[1:]}: read it with execute_python ({library})")
        try:
            fd = open_data_file(item)
        except OSError as exc:
            raise ToolFailure(f"cannot open {name!r}: {exc.strerror}") from None
        try:
            head = os.read(fd, rule.max_bytes)
        finally:
            os.close(fd)
        return preview_text(name, head, rows=min(rows, rule.max_rows), size=item.size,
                            guard=guard)

    return build_tool(preview_data_file)

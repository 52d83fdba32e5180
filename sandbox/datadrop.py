"""`DropDir`: a host directory every sandbox of one workspace shows at `/data/<name>`, that grows.

Host-side tools (`query_sql`) leave files for the code while a sandbox runs. The
directory is one of the workspace's data paths, so each sandbox shows it like any
data directory: a created container bind-mounts it read-only (a file added later
appears at once), and a warm container's `/data` receives a copy at lease
(`sandbox.datadir`), to which `Session.show_file` adds each later file.

The directory sits inside a per-process directory below the data root
(`DataDir.create`: the root 0700, named after this process), so a crashed
process's drops are removed by the next `Pool.start` or `sbx gc` like any other
data directory. Files are 0444, written under a temporary dot name and renamed
into place (a reader never sees half a file; a name is replaced whole).
"""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from sbx.sandbox.datadir import COPY_MODE, DIR_MODE, DataDir
from sbx.sandbox.errors import InvalidInput, SandboxError

_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,126}$")


@dataclass(frozen=True)
class DropDir:
    """One workspace's drop directory (`path` is the data path; its name is the mount's)."""

    holder: DataDir
    """The per-process directory that holds it (removed with it)."""
    path: Path
    """The directory itself, shown at `/data/<path.name>`."""

    @classmethod
    def create(cls, root: Path, name: str) -> DropDir:
        """A new empty drop directory `name` in a new per-process directory below `root`."""
        holder = DataDir.create(root)
        path = holder.path / name
        try:
            path.mkdir(mode=DIR_MODE)
            path.chmod(DIR_MODE)
        except OSError as exc:
            holder.remove()
            raise SandboxError(f"cannot create a drop directory in {str(root)!r}: {exc}") from None
        return cls(holder=holder, path=path)

    def put(self, name: str, data: bytes) -> Path:
        """Write `data` as `name` (replacing one of that name) and return the file's path."""
        write_whole(self.path, name, data)
        return self.path / name

    def remove(self) -> None:
        """Remove the directory and its files (idempotent)."""
        self.holder.remove()


def write_whole(directory: Path, name: str, data: bytes) -> None:
    """`data` as a 0444 file `name` in `directory`, renamed into place (never through a link)."""
    if not _FILE.match(name) or ".." in name:
        raise InvalidInput(f"{name[:80]!r} is not a plain file name")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    into = os.open(directory, flags)
    try:
        temporary = f".{name}.{secrets.token_hex(4)}"
        new = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temporary, new, COPY_MODE, dir_fd=into)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, COPY_MODE)
        finally:
            os.close(fd)
        os.replace(temporary, name, src_dir_fd=into, dst_dir_fd=into)
    finally:
        os.close(into)

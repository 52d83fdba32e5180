"""Per-container `/data` directories: how a container created ahead of time receives a run's files.

Bind mounts are fixed when a container is created, and a pooled container is
created before anyone knows what data its run brings. So every pooled
container gets an empty host directory of its own, bind-mounted read-only at
`/data`; on lease the run's files are put into it, under the same names as the
bind mounts of a created container (`/data/<name>`), before the first
execution. The directory goes with the container: the reaper removes it after
the container, and a crashed process's directories are removed by the next
`Pool.start` or `sbx gc` (`sandbox.gc`), told apart by the owner in their name.

Layout and rights: `<root>/<host digest>.<pid>.<token>/`, the root 0700 and owned by
sbx (no other host user can reach a name inside: a hard link there would
otherwise show a file to users whom its own directory kept out), each
container's directory 0755 (uid 1000 in the container may read, never change;
the mount is read-only anyway).

What is put there (`fill`):

* A data path that is a file is **hard-linked** when it is on the root's
  filesystem: no bytes move, the sandbox sees the same inode a bind mount
  would show (mode bits, owner, and content rewritten in place while the run
  lasts). Elsewhere it is copied.
* A data directory is **copied**, entry by entry: the host's data tools refuse
  a file with more than one name below a data directory (a second name may
  point anywhere on the filesystem), so linking there would make them refuse
  the run's own files for as long as its sandbox lives. Symlinks and special
  files are left out, as the data tools leave them out. A copy is 0444, owned by
  sbx, with the original's times.
* Every entry is opened without following links, one directory descriptor at a
  time, and judged again on what was opened (`sandbox_can_read`): a file
  changed to unreadable since the check before the run is refused
  (`InvalidInput`).
* Bounded: at most `MAX_DATA_ENTRIES` entries and `max_copy_bytes` copied per
  run. Past a bound, or for a file with a POSIX ACL (a copy made as sbx would
  not keep the ACL's refusal), `NotDeliverable` is raised and the pool serves
  the run from a created container with bind mounts instead.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import secrets
import shutil
import socket
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sbx.sandbox.config import DataMount
from sbx.sandbox.errors import InvalidInput, SandboxError
from sbx.sandbox.files import MAX_DATA_ENTRIES, sandbox_can_read

DATA_ROOT_ENV = "SBX_DATA_ROOT"
DIR_MODE = 0o755
"""Each container's directory: readable and enterable by the sandbox's uid, never writable."""
ROOT_MODE = 0o700
COPY_MODE = 0o444
FICLONE = 0x40049409
"""ioctl that makes a copy-on-write clone (btrfs, XFS): a copy that costs no bytes."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NAME = re.compile(r"^(?P<host>[0-9a-f]{8})\.(?P<pid>[0-9]+)\.(?P<token>[0-9a-f]{12})$")


class NotDeliverable(SandboxError):
    """The run's data does not fit a warm container's bounds: serve it from a created one.

    Too many entries, too many bytes to copy, or an ACL that a copy would lose.
    """


def default_data_root(environ: Mapping[str, str] | None = None) -> Path:
    """`SBX_DATA_ROOT`, else `/var/lib/sbx/data` for root, else `~/.local/state/sbx/data`.

    On disk, not under `/run` or `/tmp` (often memory): where the data usually
    is too, so a file is linked rather than copied.
    """
    env = os.environ if environ is None else environ
    if env.get(DATA_ROOT_ENV):
        return Path(env[DATA_ROOT_ENV])
    if os.geteuid() == 0:
        return Path("/var/lib/sbx/data")
    state = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "sbx" / "data"


def host_label() -> str:
    """This host as it appears in a directory name: a digest of its name.

    The code in the container can read the directory's host path from its
    mount table; the host's name need not be in it.
    """
    return hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]


def parse_dir_name(name: str) -> tuple[str, int] | None:
    """(host label, pid) of a per-container directory's name, or None when it is not one."""
    found = _NAME.match(name)
    return (found["host"], int(found["pid"])) if found else None


def prepare_root(root: Path) -> None:
    """Create the root 0700, or refuse one that others could reach or that is not ours."""
    try:
        root.mkdir(mode=ROOT_MODE, parents=True, exist_ok=True)
        info = os.lstat(root)
    except OSError as exc:
        raise SandboxError(
            f"cannot create the data directory root {str(root)!r}: {exc.strerror} "
            f"(set {DATA_ROOT_ENV} to a writable directory)"
        ) from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise SandboxError(
            f"the data directory root {str(root)!r} is not a directory owned by this user "
            f"(set {DATA_ROOT_ENV})"
        )
    if info.st_mode & 0o077:
        raise SandboxError(
            f"the data directory root {str(root)!r} is open to other users "
            f"(mode {stat.S_IMODE(info.st_mode):o}); chmod 700 it or set {DATA_ROOT_ENV}"
        )


@dataclass(kw_only=True)
class Delivery:
    """What `DataDir.fill` did, for logs and the pool's counters."""

    linked: int = 0
    """Files hard-linked (no bytes moved)."""
    copied: int = 0
    """Files copied (directory contents, or a file on another filesystem)."""
    copied_bytes: int = 0
    """Bytes copied."""
    left_out: int = 0
    """Symlinks and special files inside data directories, not delivered."""
    entries: int = 0
    """Entries examined."""


@dataclass(frozen=True)
class DataDir:
    """One container's `/data` directory on the host."""

    path: Path

    @classmethod
    def create(cls, root: Path) -> DataDir:
        """A new empty directory below `root`, named after this process (for `sbx gc`)."""
        prepare_root(root)
        path = root / f"{host_label()}.{os.getpid()}.{secrets.token_hex(6)}"
        try:
            path.mkdir(mode=DIR_MODE)
            path.chmod(DIR_MODE)  # whatever the umask
        except OSError as exc:
            raise SandboxError(f"cannot create a data directory in {str(root)!r}: {exc}") from None
        return cls(path)

    def fill(self, mounts: tuple[DataMount, ...], *, max_copy_bytes: int) -> Delivery:
        """Put each mount's source at its name in this directory (see the module docstring)."""
        delivery = Delivery()
        budget = _Budget(delivery, max_copy_bytes)
        try:
            with _opened(self.path) as into:
                for mount in mounts:
                    name = PurePosixPath(mount.target).name
                    if mount.source.is_dir():
                        _copy_tree(mount.source, into, name, budget)
                    else:
                        _deliver_file(mount.source, into, name, budget)
        except OSError as exc:  # on our side (a full disk, no descriptors left)
            raise NotDeliverable(f"the data could not be put in place: {exc.strerror}") from None
        return delivery

    def remove(self) -> None:
        """Remove the directory and what is in it (links and copies only; never followed)."""
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.path)


class _Budget:
    """The bounds of one delivery."""

    def __init__(self, delivery: Delivery, max_copy_bytes: int) -> None:
        self.delivery = delivery
        self.copy_left = max_copy_bytes

    def entry(self) -> None:
        self.delivery.entries += 1
        if self.delivery.entries > MAX_DATA_ENTRIES:
            raise NotDeliverable(f"more than {MAX_DATA_ENTRIES} data entries")

    def copy(self, size: int) -> None:
        if size > self.copy_left:
            raise NotDeliverable("more data to copy than max_copy_bytes")
        self.copy_left -= size
        self.delivery.copied += 1
        self.delivery.copied_bytes += size


@contextlib.contextmanager
def _opened(path: Path | str, dir_fd: int | None = None) -> Iterator[int]:
    """A directory descriptor opened without following a link."""
    fd = os.open(path, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def _changed(source: Path) -> InvalidInput:
    return InvalidInput(
        f"data path {str(source)!r} changed after it was checked, or is no longer readable "
        "by the sandbox's user; check it and run again"
    )


def _deliver_file(source: Path, into: int, name: str, budget: _Budget) -> None:
    """Hard-link the operator's file into the directory, or copy it (another filesystem)."""
    budget.entry()
    with _opened(source.parent) as parent:
        try:
            os.link(source.name, name, src_dir_fd=parent, dst_dir_fd=into, follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise _changed(source) from None
            _copy_file(parent, source.name, into, name, budget, source)
            return
    linked = os.stat(name, dir_fd=into, follow_symlinks=False)  # the inode the sandbox gets
    if not stat.S_ISREG(linked.st_mode) or not sandbox_can_read(linked):
        os.unlink(name, dir_fd=into)
        raise _changed(source)
    budget.delivery.linked += 1


def _copy_tree(source: Path, into: int, name: str, budget: _Budget) -> None:
    """Copy a data directory's readable files and directories, one descriptor at a time."""
    budget.entry()
    try:
        root = os.open(source, _DIR_FLAGS)
    except OSError:
        raise _changed(source) from None
    try:
        pending: list[tuple[str, ...]] = [()]
        os.mkdir(name, DIR_MODE, dir_fd=into)
        while pending:
            parts = pending.pop()
            with _walk(root, parts) as src, _walk(into, (name, *parts)) as dst:
                _check_dir(src, source)
                os.fchmod(dst, DIR_MODE)
                pending.extend(parts + (sub,) for sub in _copy_entries(src, dst, budget, source))
    finally:
        os.close(root)


@contextlib.contextmanager
def _walk(top: int, parts: tuple[str, ...]) -> Iterator[int]:
    """The directory `parts` below `top`, each step opened without following a link."""
    fd = os.dup(top)
    try:
        for part in parts:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _check_dir(fd: int, source: Path) -> None:
    """A directory as opened must be one the sandbox's uid may list and enter, with no ACL."""
    if not sandbox_can_read(os.fstat(fd)):
        raise _changed(source)
    if _has_acl(fd):
        raise NotDeliverable("a data directory has an access control list")


def _copy_entries(src: int, dst: int, budget: _Budget, source: Path) -> list[str]:
    """Copy the files of one directory; return its subdirectories (created, still empty)."""
    subdirectories: list[str] = []
    with os.scandir(src) as entries:
        listed = sorted(entries, key=lambda entry: entry.name)
    for entry in listed:
        budget.entry()
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            os.mkdir(entry.name, DIR_MODE, dir_fd=dst)
            subdirectories.append(entry.name)
        elif stat.S_ISREG(info.st_mode):
            _copy_file(src, entry.name, dst, entry.name, budget, source)
        else:  # symlinks, FIFOs, sockets, devices: never delivered
            budget.delivery.left_out += 1
    return subdirectories


def _copy_file(
    src_dir: int, src_name: str, dst_dir: int, dst_name: str, budget: _Budget, source: Path
) -> None:
    """Copy one regular file (judged on the opened descriptor) as a new 0444 file."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(src_name, flags, dir_fd=src_dir)
    except OSError:
        raise _changed(source) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not sandbox_can_read(info):
            raise _changed(source)
        if _has_acl(fd):
            raise NotDeliverable("a data file has an access control list")
        budget.copy(info.st_size)
        new = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(dst_name, new, COPY_MODE, dir_fd=dst_dir)
        try:
            _copy_bytes(fd, out, info.st_size)
            os.fchmod(out, COPY_MODE)
            os.utime(out, ns=(info.st_atime_ns, info.st_mtime_ns))
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _copy_bytes(src: int, dst: int, size: int) -> None:
    """At most `size` bytes: a clone where the filesystem makes one, else in the kernel."""
    try:
        fcntl.ioctl(dst, FICLONE, src)
        os.ftruncate(dst, min(size, os.fstat(dst).st_size))
        return
    except OSError:
        pass
    left = size
    while left > 0:
        try:
            moved = os.copy_file_range(src, dst, left)
        except OSError:  # an old kernel or a filesystem without it: plain reads
            moved = os.write(dst, os.read(src, min(left, 1 << 20)))
        if moved == 0:
            return  # the file shrank since it was measured
        left -= moved


def _has_acl(fd: int) -> bool:
    """Whether a POSIX access ACL is set (mode bits alone then cannot tell who may read)."""
    try:
        return "system.posix_acl_access" in os.listxattr(fd)
    except OSError:  # no extended attributes on this filesystem: no ACL either
        return False

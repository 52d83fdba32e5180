"""Files across the boundary: input paths in (read-only `/data`), artifacts out (checked).

Inbound, each host path must exist and be readable *by the sandbox's uid*
(`SANDBOX_USER`), judged from the mode bits of the path and of every entry
below it: sbx runs as root, so "sbx can read it" says nothing. Each path is
bind-mounted read-only at `/data/<name>`, or, in a warm pooled container, put
at the same name in its own read-only `/data` directory (`sandbox.datadir`,
which judges every entry again as it links or copies it).

Outbound, the host never trusts a name or a size that came from the
container: names must be plain relative paths with no hidden (dot) part and
no control or invisible characters, content must match the announced size and
the caps. Each file is created with `O_EXCL | O_NOFOLLOW`, walking down from
the output directory one directory descriptor at a time, so nothing the
container names can make the host write elsewhere, follow a link, or replace
a file that was already there (only this run's own earlier copy of the same
artifact may be replaced). Any failure to write (a full disk, a file in the
way) becomes a refused entry with a plain reason, never an exception: the
execution's output and the session survive.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import hashlib
import logging
import os
import secrets
import stat
import unicodedata
from collections.abc import Sequence
from pathlib import Path

from sbx.sandbox.config import SANDBOX_USER, DataMount
from sbx.sandbox.errors import InvalidInput
from sbx.sandbox.protocol import ArtifactFrame
from sbx.sandbox.result import Artifact, RefusedArtifact

logger = logging.getLogger(__name__)

MAX_NAME_BYTES = 255
"""Longest path component, in UTF-8 bytes (the usual NAME_MAX)."""
MAX_PATH_BYTES = 4 * MAX_NAME_BYTES
"""Longest artifact name (all its components), in UTF-8 bytes."""
MAX_SHOWN_CHARS = 120
"""Longest refused name we report (after escaping)."""
MAX_DATA_ENTRIES = 20_000
"""Entries below a data directory whose modes are checked before a run (the rest are
still guarded by the kernel inside the sandbox and by the host tools' own checks), and
the most a warm container's `/data` directory receives per run (`sandbox.datadir`)."""
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
"""Unicode categories refused in names: C0/C1 controls, bidi and zero-width format
characters, surrogates (undecodable bytes), private use, line and paragraph separators."""
SANDBOX_UID, SANDBOX_GID = (int(part) for part in SANDBOX_USER.split(":"))

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


# ---------------------------------------------------------------- inbound: /data


def sandbox_can_read(info: os.stat_result) -> bool:
    """Whether the sandbox's uid/gid may read this file (or list and enter this directory).

    Plain mode bits, as the kernel applies them to a process with exactly that
    uid and gid and no capabilities: the owner's bits if it owns the file,
    else the group's if its group matches, else the others' bits. ACLs are not
    consulted (see security.md).
    """
    if info.st_uid == SANDBOX_UID:
        bits = (info.st_mode >> 6) & 7
    elif info.st_gid == SANDBOX_GID:
        bits = (info.st_mode >> 3) & 7
    else:
        bits = info.st_mode & 7
    wanted = 5 if stat.S_ISDIR(info.st_mode) else 4
    return bits & wanted == wanted


def data_mounts(paths: list[Path]) -> tuple[DataMount, ...]:
    """Mounts for the input paths: each file or directory the sandbox can read, at `/data/<name>`.

    Raises InvalidInput (before any container exists) for a path that is
    missing, not a file or directory, or holds anything the sandbox's uid
    could not read: the run would fail in a confusing way later otherwise.
    """
    mounts: list[DataMount] = []
    seen: set[str] = set()
    for given in paths:
        path = Path(given).expanduser()
        if not path.exists():
            raise InvalidInput(f"data path {str(given)!r} does not exist")
        if not (path.is_file() or path.is_dir()):
            raise InvalidInput(f"data path {str(given)!r} is neither a file nor a directory")
        resolved = path.resolve()
        unreadable = first_unreadable(resolved)
        if unreadable is not None:
            where = "" if unreadable == "." else f" ({unreadable!r} inside it)"
            raise InvalidInput(
                f"data path {str(given)!r} is not readable by the sandbox's user "
                f"{SANDBOX_USER}{where}; fix its permissions (e.g. chmod o+rX)"
            )
        name = resolved.name or "root"
        if name in seen:
            raise InvalidInput(f"two data paths are both named {name!r}; rename one")
        seen.add(name)
        mounts.append(DataMount(source=resolved, target=f"/data/{name}"))
    return tuple(mounts)


def first_unreadable(root: Path, *, max_entries: int = MAX_DATA_ENTRIES) -> str | None:
    """The first entry (relative to `root`, `.` for itself) the sandbox could not read, or None.

    Symlinks and special files below `root` are skipped: inside the container
    a link resolves in the container's own tree, never the host's.
    """
    try:
        info = os.stat(root)
    except OSError:
        return "."
    if not sandbox_can_read(info):
        return "."
    if not stat.S_ISDIR(info.st_mode):
        return None
    pending, checked = [""], 0
    while pending and checked < max_entries:
        prefix = pending.pop()
        try:
            entries = list(os.scandir(root / prefix if prefix else root))
        except OSError:
            return prefix or "."
        for entry in sorted(entries, key=lambda item: item.name):
            checked += 1
            try:
                entry_info = entry.stat(follow_symlinks=False)
            except OSError:
                return prefix + entry.name
            if not (stat.S_ISREG(entry_info.st_mode) or stat.S_ISDIR(entry_info.st_mode)):
                continue
            if not sandbox_can_read(entry_info):
                return prefix + entry.name
            if stat.S_ISDIR(entry_info.st_mode):
                pending.append(prefix + entry.name + "/")
    return None


# ---------------------------------------------------------------- outbound: artifacts


def check_output_dir(directory: Path) -> None:
    """Raise InvalidInput unless `directory` is, or can become, a writable directory.

    Called before a run, so a typo such as `--output results.csv` is one clear
    error rather than every artifact refused after the program ran. Nothing is
    created here: a run that writes no artifact leaves no empty directory.
    """
    path = Path(directory)
    probe = path
    while not probe.exists():
        if probe.is_symlink():
            raise InvalidInput(f"output directory {str(directory)!r} is a dangling link")
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        what = "is not a directory" if probe == path else f"is inside {str(probe)!r}, a file"
        raise InvalidInput(f"output directory {str(directory)!r} {what}")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InvalidInput(f"output directory {str(directory)!r} is not writable")


def unsafe_name_reason(name: str) -> str | None:
    """Why `name` must not become a host path, or None when it is a plain relative path."""
    if not name or len(name.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return "unsafe name (empty or too long)"
    if name.startswith("/") or "\\" in name:
        return "unsafe name (absolute or backslash)"
    parts = name.split("/")
    if any(part in ("..", ".", "") for part in parts):
        return "unsafe name (escapes the output directory)"
    for part in parts:
        if len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            return "unsafe name (too long)"
        if any(unicodedata.category(ch) == "Cs" for ch in part):
            return "unsafe name (not valid UTF-8)"
        if any(unicodedata.category(ch) in UNSAFE_CATEGORIES for ch in part):
            return "unsafe name (control or invisible characters)"
        if part.startswith("."):
            return "unsafe name (hidden file or directory)"
    return None


def shown_name(name: str) -> str:
    """`name` safe to report anywhere: non-printable characters escaped, length bounded."""
    shown = "".join(ch if ch.isprintable() and ch != "\\" else ascii(ch)[1:-1] for ch in name)
    if len(shown) > MAX_SHOWN_CHARS:
        shown = shown[: MAX_SHOWN_CHARS - 1] + "…"
    return shown


def copy_failure(exc: OSError) -> str:
    """A plain reason for a failed host write: no host path, no errno text."""
    code = exc.errno
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "no space left in the host's output directory"
    if code == errno.EFBIG:
        return "too large for the host's file size limit"
    if code == errno.EEXIST:
        return "a file of that name already exists on the host; not replaced"
    if code in (errno.ENOTDIR, errno.ELOOP, errno.EISDIR):
        return "a file, directory or link on the host is in the way"
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "the host's output directory is not writable"
    if code == errno.ENAMETOOLONG:
        return "name too long for the host"
    return "could not be written on the host"


class ArtifactSink:
    """Write artifact frames under one host directory, enforcing the caps again on our side.

    One sink serves one output directory for a whole session: it remembers
    the files it created (device and inode), so an artifact the code rewrites
    in a later execution replaces this run's own copy, and nothing else.
    """

    def __init__(self, directory: Path, *, max_bytes: int, max_count: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_count = max_count
        self._written: dict[str, tuple[int, int, str]] = {}

    def accept(
        self, frame: ArtifactFrame, accepted: list[Artifact], refused: list[RefusedArtifact]
    ) -> None:
        """Validate one frame and write it, or record why not; never raises for the frame."""
        reason = unsafe_name_reason(frame.name)
        data = b""
        if reason is None and len(accepted) >= self.max_count:
            reason = "too many artifacts"
        if reason is None:
            try:
                data = base64.b64decode(frame.data, validate=True)
            except (binascii.Error, ValueError):
                reason = "corrupt transfer"
        if reason is None and (len(data) != frame.size or len(data) > self.max_bytes):
            reason = (
                f"too large ({len(data)} bytes)" if len(data) > self.max_bytes else "size mismatch"
            )
        if reason is None:
            try:
                target = self._write(frame.name, data)
            except OSError as exc:
                # the refusal and its reason are the result's; a log line would say it twice
                logger.debug("artifact not written: %s", errno.errorcode.get(exc.errno or 0, "?"))
                reason = copy_failure(exc)
        if reason is not None:
            refused.append(RefusedArtifact(name=shown_name(frame.name), reason=reason))
            return
        accepted.append(
            Artifact(
                name=frame.name,
                path=str(target),
                size=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
            )
        )

    def _write(self, name: str, data: bytes) -> Path:
        """Create the file below the output directory, one no-follow step at a time."""
        parts = name.split("/")
        try:  # the operator's path: it may be a link, like a data path
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileExistsError:  # a file where the directory should be
            raise NotADirectoryError(errno.ENOTDIR, "not a directory") from None
        try:
            for part in parts[:-1]:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)  # ELOOP/ENOTDIR: in the way
                os.close(fd)
                fd = child
            self._place(fd, name, parts[-1], data)
        finally:
            os.close(fd)
        return self.directory.joinpath(*parts)

    def _place(self, dir_fd: int, name: str, leaf: str, data: bytes) -> None:
        """Create `leaf`, or replace it only when it is still this sink's own earlier copy.

        "Own" means the same inode and exactly the bytes written then (inode
        numbers are reused and timestamps are coarse, content is not), so a
        replacement never loses anything but our own copy.
        """
        try:
            existing = os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            _create(dir_fd, leaf, data)
        else:
            if not self._still_ours(dir_fd, name, leaf, existing):
                raise FileExistsError(errno.EEXIST, "exists")
            temp = f".sbx-{secrets.token_hex(8)}.part"
            _create(dir_fd, temp, data)
            try:
                os.rename(temp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=dir_fd)
                raise
        info = os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False)
        self._written[name] = (info.st_dev, info.st_ino, hashlib.sha256(data).hexdigest())

    def _still_ours(self, dir_fd: int, name: str, leaf: str, existing: os.stat_result) -> bool:
        """Whether `leaf` is the regular file this sink wrote for `name`, unchanged."""
        written = self._written.get(name)
        if written is None or not stat.S_ISREG(existing.st_mode):
            return False
        if (existing.st_dev, existing.st_ino) != written[:2] or existing.st_size > self.max_bytes:
            return False
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        with os.fdopen(os.open(leaf, flags, dir_fd=dir_fd), "rb") as handle:
            return hashlib.sha256(handle.read(self.max_bytes + 1)).hexdigest() == written[2]


def _create(dir_fd: int, leaf: str, data: bytes) -> None:
    """Write a new file exclusively; remove it again if anything fails (no partial artifact)."""
    fd = os.open(leaf, _NEW_FILE_FLAGS, 0o644, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(leaf, dir_fd=dir_fd)
        raise


def open_beneath(root: Path, parts: Sequence[str]) -> int:
    """Open `root/parts...` read-only without following a link at any component.

    Each component is opened relative to the descriptor of the one before with
    `O_NOFOLLOW`, so a directory swapped for a symlink between two steps opens
    nothing outside `root`. Raises `OSError` (the caller words it); the caller
    closes the returned descriptor.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        return os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)

"""The data a run read, fingerprinted: SHA-256 of each file, by its path under `/data`.

Every `run_start` event records these digests, so `sbx replay --rerun` can
name a data file that changed since the run rather than blame the code, and
an export can say which bytes its numbers came from. The keys are what the
code saw: a file given as `--data sales.csv` is `sales.csv`; a directory
`--data shop/` gives `shop/orders.csv`, `shop/2024/items.csv`, ...

Files are read in blocks (memory stays flat whatever their size), once: a
digest is kept for the file's identity and state (device, inode, size and
modification time), so a dataset that every run of a conversation records,
and its notes check for staleness, is hashed again only when it changed.
The change time is not part of it: linking a dataset into a sandbox's `/data`
changes it (git's `core.trustctime` off, for the same reason). A file
modified within `SETTLED_S` of being hashed is not kept (a second write in
the same clock tick could leave its time unchanged: git's "racy" rule). Symlinks
and special files below a directory are not followed (the sandbox does not
see a host link's target either); a directory's walk stops after
`MAX_FILES` files, and the digests say so under `MORE_KEY`.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MAX_FILES = 10_000
"""Most files fingerprinted under one data directory."""
MORE_KEY = "…"
"""The key that marks a directory walk cut at `MAX_FILES` (its value: the directory)."""
MISSING = "missing"
"""The digest recorded for a data path that cannot be read."""
SETTLED_S = 2.0
"""A file last changed this recently when it was hashed is hashed again next time."""
KEPT_DIGESTS = 4096
"""Most file digests kept (least recently used dropped first)."""
_Identity = tuple[int, int, int, int]
_kept: OrderedDict[_Identity, str] = OrderedDict()
_kept_lock = threading.Lock()


def data_digests(paths: Iterable[Path | str]) -> dict[str, str]:
    """`{path under /data: sha256 hex}` for every data file of a run (see the module)."""
    digests: dict[str, str] = {}
    for given in paths:
        path = Path(given).expanduser()
        name = path.resolve().name or "root"  # the mount's name, as `sandbox.files` gives it
        if path.is_dir():
            digests.update(_directory(path, name))
        else:
            digests[name] = file_sha256(path)
    return digests


def _directory(root: Path, name: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for count, (relative, path) in enumerate(_regular_files(root)):
        if count >= MAX_FILES:
            found[f"{name}/{MORE_KEY}"] = f"more than {MAX_FILES} files: not all fingerprinted"
            break
        found[f"{name}/{relative}"] = file_sha256(path)
    return found


def _regular_files(root: Path) -> Iterable[tuple[str, Path]]:
    """Regular files under `root`, sorted per directory, links not followed."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for file in sorted(files):
            path = Path(folder, file)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode):
                yield path.relative_to(root).as_posix(), path


def file_sha256(path: Path) -> str:
    """The file's SHA-256 in hex, or `MISSING` when it cannot be read (kept: see the module)."""
    try:
        with path.open("rb") as handle:
            before = _identity(os.fstat(handle.fileno()))
            with _kept_lock:
                known = _kept.get(before)
                if known is not None:
                    _kept.move_to_end(before)
                    return known
            hexdigest = hashlib.file_digest(handle, "sha256").hexdigest()
            after = os.fstat(handle.fileno())
    except OSError:
        return MISSING
    settled = time.time() - after.st_mtime >= SETTLED_S
    if settled and _identity(after) == before:
        _keep(before, hexdigest)
    return hexdigest


def remember_sha256(path: Path, hexdigest: str) -> None:
    """Keep `hexdigest` as the digest of `path` as it is now, however recently it was written.

    For a file whose only writer is the caller, done writing it, that hashed its bytes
    as they went in (a stored upload): the racy rule guards against a second write in
    the same clock tick, and there is none. Without it, the first run over a dataset
    just uploaded hashed it again (6 ms of CPU per 10 MB, every new upload's first question).
    """
    try:
        identity = _identity(os.stat(path, follow_symlinks=False))
    except OSError:
        return
    _keep(identity, hexdigest)


def _keep(identity: _Identity, hexdigest: str) -> None:
    """The newest digest kept; past `KEPT_DIGESTS`, the least recently used goes."""
    with _kept_lock:
        _kept[identity] = hexdigest
        _kept.move_to_end(identity)
        while len(_kept) > KEPT_DIGESTS:
            _kept.popitem(last=False)


def _identity(status: os.stat_result) -> _Identity:
    """What changes when a file's bytes do: device, inode, size, modification time (ns)."""
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns


@dataclass(frozen=True, kw_only=True)
class DataChange:
    """One data file that differs from the run's record."""

    name: str
    """Its path under `/data`."""
    recorded: str
    """The digest the run recorded (`MISSING` for a file the run did not have)."""
    now: str
    """The digest now (`MISSING` when the file is gone)."""

    def describe(self) -> str:
        """One line for the re-run's report."""
        if self.now == MISSING:
            return f"{self.name}: missing now (recorded sha256 {self.recorded[:12]})"
        if self.recorded == MISSING:
            return f"{self.name}: new since the run (sha256 {self.now[:12]})"
        return f"{self.name}: changed (sha256 {self.recorded[:12]} recorded, {self.now[:12]} now)"


def data_changes(recorded: Mapping[str, str], now: Mapping[str, str]) -> list[DataChange]:
    """Files whose digest differs between the record and now, by name."""
    names: Sequence[str] = sorted(set(recorded) | set(now))
    return [
        DataChange(name=name, recorded=recorded.get(name, MISSING), now=now.get(name, MISSING))
        for name in names
        if recorded.get(name, MISSING) != now.get(name, MISSING)
    ]

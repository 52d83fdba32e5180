"""Pinned wheels: the lock file's format, the download cache, and installing into the rootfs.

Every wheel is pinned by version and sha256 in `requirements.lock`, and pip runs
with `--require-hashes`, so whatever index pip is configured with can only ever
deliver the exact bytes that were locked. Downloads land in a cache directory
that outlives builds; a rebuild whose wheels are all cached needs no network.

pip targets the image's interpreter (CPython 3.11, manylinux x86_64 up to
bookworm's glibc 2.36) explicitly, so the host's own Python version never
leaks into the choice of wheels.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from sbx.images.errors import ImageBuildError
from sbx.images.proc import run_step

PYTHON_VERSION = "3.11"
"""The image interpreter's version (Debian bookworm's python3)."""

GLIBC_MAX_MINOR = 36
"""bookworm ships glibc 2.36: any manylinux_2_N wheel with N <= 36 runs there."""

PLATFORMS: tuple[str, ...] = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(GLIBC_MAX_MINOR, 16, -1)),
    "manylinux2014_x86_64",  # pip expands this alias to 2_17 and the older manylinux tags
)
"""pip matches `--platform` tags literally (only the legacy aliases expand), so list them all."""

TARGET_FLAGS: tuple[str, ...] = (
    "--only-binary=:all:",
    *(f"--platform={tag}" for tag in PLATFORMS),
    f"--python-version={PYTHON_VERSION}",
    "--implementation=cp",
    "--abi=cp311",
    "--abi=abi3",
    "--abi=none",
)
"""pip flags that select wheels for the image's interpreter instead of the host's."""

SITE_DIR = Path("usr/local/lib/python3.11/dist-packages")
"""Where the wheels go inside the rootfs: on Debian python3's default sys.path."""

_ENTRY = re.compile(
    r"^# (?P<file>\S+\.whl)\n(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+) \\\n"
    r"\s+--hash=sha256:(?P<sha256>[0-9a-f]{64})$",
    re.MULTILINE,
)


@dataclass(frozen=True, kw_only=True)
class LockedWheel:
    """One pinned distribution and the exact wheel file that satisfies it."""

    name: str
    """Distribution name as the index spells it."""
    version: str
    """Exact version."""
    sha256: str
    """sha256 hex of the wheel file."""
    filename: str
    """The wheel's file name, so the cache can be checked without hashing it."""


def render_lock(wheels: list[LockedWheel], *, header: str) -> str:
    """The lock file text: a header comment, then one hashed requirement per wheel."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()] + [""]
    for wheel in sorted(wheels, key=lambda w: w.name.lower()):
        lines += [
            f"# {wheel.filename}",
            f"{wheel.name}=={wheel.version} \\",
            f"    --hash=sha256:{wheel.sha256}",
        ]
    return "\n".join(lines) + "\n"


def parse_lock(text: str) -> list[LockedWheel]:
    """The wheels a lock file pins; a requirement without its file comment is an error."""
    wheels = [
        LockedWheel(name=m["name"], version=m["version"], sha256=m["sha256"], filename=m["file"])
        for m in _ENTRY.finditer(text)
    ]
    requirements = sum(1 for line in text.splitlines() if re.match(r"^[A-Za-z0-9._-]+==", line))
    if requirements != len(wheels) or not wheels:
        raise ImageBuildError(
            "requirements.lock is malformed (edited by hand?); regenerate it with "
            "`python -m sbx.images.lock`"
        )
    return wheels


def ensure_cached(
    lock: Path, cache: Path, *, log: TextIO, progress: Callable[[str], None]
) -> None:
    """Download the locked wheels that are not in `cache` yet (hash-checked by pip)."""
    wheels = parse_lock(lock.read_text(encoding="utf-8"))
    missing = [w for w in wheels if not (cache / w.filename).is_file()]
    if not missing:
        progress(f"all {len(wheels)} wheels already cached in {cache}")
        return
    progress(f"downloading {len(missing)} of {len(wheels)} wheels into {cache}")
    cache.mkdir(parents=True, exist_ok=True)
    run_step(
        [*pip_command(), "download", "--no-deps", "--require-hashes", *TARGET_FLAGS,
         f"--dest={cache}", "-r", str(lock)],
        what="downloading wheels", log=log,
    )
    still = [w.filename for w in wheels if not (cache / w.filename).is_file()]
    if still:
        raise ImageBuildError(
            f"pip did not fetch {still[0]} (and {len(still) - 1} more); see {log.name}"
        )


def install_into(rootfs: Path, lock: Path, cache: Path, *, log: TextIO) -> None:
    """Install the locked wheels from the cache into the rootfs's dist-packages, offline.

    Bytecode is compiled later, by the rootfs's own interpreter; console scripts
    are dropped (their shebangs would name the host's Python, and the image has no
    use for them).
    """
    site = rootfs / SITE_DIR
    site.mkdir(parents=True, exist_ok=True)
    run_step(
        [*pip_command(), "install", "--no-index", f"--find-links={cache}", "--require-hashes",
         "--no-deps", *TARGET_FLAGS, f"--target={site}", "--no-compile",
         "--no-warn-script-location", "-r", str(lock)],
        what="installing wheels into the rootfs", log=log,
    )
    shutil.rmtree(site / "bin", ignore_errors=True)


def pip_command() -> list[str]:
    """pip, run by the interpreter that runs sbx (any version: flags pin the target)."""
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]

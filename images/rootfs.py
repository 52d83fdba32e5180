"""Shape the base root filesystem in a directory: Debian, the wheels, the user, the caches.

Steps, in order (each is what the image contract asks for, nothing more):

1. debootstrap `minbase` plus `python3` from the host's mirror (packages are
   cached across builds in `<cache>/debs`);
2. the locked wheels, installed offline from `<cache>/wheels`;
3. bytecode for them, compiled by the rootfs's own python3 (the container's root
   is read-only, so anything not compiled now is recompiled on every import);
4. matplotlib's font cache in /opt/sbx/matplotlib (the runner copies it into a
   writable MPLCONFIGDIR; building it at run time costs seconds per sandbox);
5. user `sandbox` 1000:1000 with home /tmp, and /data, /output, /work owned by it;
6. removal of what only the build needed, and of host details debootstrap copied
   in (mirror, resolver, hostname, device nodes: the engine provides its own).

This module's source is part of the base recipe hash: editing it rebuilds the base.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from sbx.images import wheels
from sbx.images.apt_source import Mirror
from sbx.images.errors import ImageBuildError
from sbx.images.proc import run_step
from sbx.images.recipe import ARCH, VARIANT, Recipe

SANDBOX_UID = 1000
"""The unprivileged user every sandbox runs as (sandbox/config.py's SANDBOX_USER)."""

FONT_CACHE = "/opt/sbx/matplotlib"
"""Prebuilt MPLCONFIGDIR; images/runner.py copies it at start."""

OWNED_DIRS = ("data", "output", "work")
"""Mount points the sandbox user owns (the engine mounts tmpfs or read-only data over them)."""

CHROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}
"""A clean environment for commands run inside the rootfs: nothing from the host leaks in."""

_PER_PACKAGE = re.compile(
    r"^I: (?:(?:Retrieving|Validating) \S+ \S+|(?:Extracting|Unpacking|Configuring) \S+\.\.\.)$"
)
"""debootstrap's one-line-per-package chatter; its stage lines are forwarded as progress."""


def build_rootfs(
    root: Path,
    *,
    recipe: Recipe,
    mirror: Mirror,
    lock: Path,
    cache: Path,
    log: TextIO,
    progress: Callable[[str], None],
) -> None:
    """Fill the empty directory `root` with the complete base filesystem."""
    wheels.ensure_cached(lock, cache / "wheels", log=log, progress=progress)
    progress(f"debootstrap {recipe.suite} ({VARIANT} + {', '.join(recipe.packages)})")
    debootstrap(root, recipe=recipe, mirror=mirror, debs=cache / "debs", log=log,
                progress=progress)
    progress("installing wheels into the rootfs")
    wheels.install_into(root, lock, cache / "wheels", log=log)
    progress("compiling bytecode with the image's python3")
    in_chroot(root, ["python3", "-m", "compileall", "-q", "-j0",
                     "--invalidation-mode", "unchecked-hash", f"/{wheels.SITE_DIR}"],
              what="compiling bytecode", log=log)
    progress("building matplotlib's font cache")
    build_font_cache(root, log=log)
    add_sandbox_user(root)
    trim(root)


def debootstrap(
    root: Path, *, recipe: Recipe, mirror: Mirror, debs: Path, log: TextIO,
    progress: Callable[[str], None],
) -> None:
    """Bootstrap Debian into `root`, forwarding debootstrap's stage lines (not per package)."""
    debs.mkdir(parents=True, exist_ok=True)
    cmd = ["debootstrap", f"--variant={VARIANT}", f"--arch={ARCH}",
           f"--include={','.join(recipe.packages)}", f"--cache-dir={debs.resolve()}"]
    if mirror.keyring:
        cmd.append(f"--keyring={mirror.keyring}")
    cmd += [recipe.suite, str(root), mirror.uri]

    def stage(line: str) -> None:
        if line.startswith("I: ") and not _PER_PACKAGE.match(line):
            progress(f"  {line[3:]}")

    run_step(cmd, what="debootstrap", log=log, on_line=stage)


def in_chroot(root: Path, argv: list[str], *, what: str, log: TextIO,
              env: dict[str, str] | None = None) -> None:
    """Run `argv` inside the rootfs, with a clean environment (no /proc needed)."""
    run_step(["chroot", str(root), *argv], what=what, log=log, env={**CHROOT_ENV, **(env or {})})


def build_font_cache(root: Path, *, log: TextIO) -> None:
    """Have matplotlib scan its fonts once, inside the rootfs, so paths are the image's own."""
    target = root / FONT_CACHE.lstrip("/")
    target.mkdir(parents=True, exist_ok=True)
    in_chroot(root, ["python3", "-c", "import matplotlib.font_manager"],
              what="building matplotlib's font cache", log=log,
              env={"MPLCONFIGDIR": FONT_CACHE, "MPLBACKEND": "Agg"})
    if not any(target.glob("fontlist*.json")):
        raise ImageBuildError(f"matplotlib wrote no font list into {FONT_CACHE}; see {log.name}")
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    (root / "opt/sbx").chmod(0o755)


def add_sandbox_user(root: Path) -> None:
    """User and group `sandbox` (1000:1000, home /tmp, no login shell) and the dirs it owns."""
    uid = SANDBOX_UID
    _append_unique(root / "etc/passwd", f"sandbox:x:{uid}:{uid}:sbx sandbox:/tmp:/usr/sbin/nologin")
    _append_unique(root / "etc/group", f"sandbox:x:{uid}:")
    _append_unique(root / "etc/shadow", "sandbox:!*:19000::::::")
    for name in OWNED_DIRS:
        path = root / name
        path.mkdir(mode=0o755, exist_ok=True)
        path.chmod(0o755)
        os.chown(path, uid, uid)


def trim(root: Path) -> None:
    """Drop build-only files and host details; the engine supplies /dev, hosts and resolv.conf.

    Paths are unlinked, never followed: debootstrap's /dev holds symlinks into /proc,
    and a symlinked /etc file would otherwise point the write at the host.
    """
    for pattern in ("var/lib/apt/lists/*", "var/cache/apt/*.bin", "var/cache/apt/archives/*.deb",
                    "usr/share/man/*", "usr/share/info/*", "usr/share/locale/*", "dev/*",
                    "var/log/bootstrap.log", "etc/apt/sources.list", "etc/resolv.conf",
                    "etc/hostname"):
        for path in root.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.name != "locale.alias":
                path.unlink()
    (root / "etc/resolv.conf").write_text("")
    (root / "etc/hostname").write_text("sandbox\n")
    (root / "tmp").chmod(0o1777)


def _append_unique(path: Path, line: str) -> None:
    """Append an /etc/passwd-style entry unless its name is already there."""
    name = line.split(":", 1)[0] + ":"
    text = path.read_text(encoding="utf-8")
    if any(existing.startswith(name) for existing in text.splitlines()):
        return
    if text and not text.endswith("\n"):
        text += "\n"
    path.write_text(text + line + "\n", encoding="utf-8")

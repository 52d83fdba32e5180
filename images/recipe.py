"""What the sandbox image is made of, and the hashes that name it.

The image is built in two layers so that the slow part is rebuilt rarely:

    base  (minutes)  Debian rootfs + pinned wheels + user/dirs + font cache
          keyed by   suite, variant, Debian packages, requirements.lock,
                     and the code that shapes the base (rootfs.py, wheels.py)
    top   (seconds)  runner, preimport list, env, workdir, user, cmd, labels
          keyed by   the base hash, images/Dockerfile, images/runner.py and
                     images/preimport.txt

The recipe hash (label `sbx.recipe`) covers both, so "is the image current?"
is one label lookup. The mirror is deliberately not an input: two mirrors of the
same archive give the same image, and the host's mirror must not leak into the
image's identity.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

IMAGES_DIR = Path(__file__).resolve().parent
"""Where the recipe's files live (the installed `images` package)."""

RECIPE_VERSION = 1
"""Bump when something outside the hashed files changes what an image contains."""

SUITE = "bookworm"
"""Debian release: its python3 is CPython 3.11, which the locked wheels target."""

ARCH = "amd64"
"""Debian architecture; the wheels are manylinux x86_64 to match."""

VARIANT = "minbase"
"""debootstrap variant: Essential packages and apt, nothing else."""

DEB_PACKAGES: tuple[str, ...] = ("python3",)
"""Debian packages on top of minbase. The wheels vendor their native libraries
(OpenBLAS, libgomp, freetype, Arrow), so the interpreter is all the stack needs."""

BASE_CODE_FILES = ("rootfs.py", "wheels.py")
"""Modules whose source shapes the base layer: editing them must rebuild it."""


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """Every input that determines the image's contents, as bytes and names."""

    suite: str = SUITE
    """Debian suite to bootstrap."""
    packages: tuple[str, ...] = DEB_PACKAGES
    """Extra Debian packages (`debootstrap --include`)."""
    lock: bytes
    """`requirements.lock`: every wheel, pinned by version and sha256."""
    base_code: bytes
    """Concatenated source of `BASE_CODE_FILES`."""
    dockerfile: bytes
    """The top layer's Dockerfile."""
    runner: bytes
    """The in-container runner copied to /opt/sbx/runner.py."""
    preimport: bytes = b""
    """`preimport.txt`: the modules the runner imports before the first question."""

    def base_hash(self) -> str:
        """sha256 hex of everything the base layer depends on."""
        return _digest(
            {
                "version": RECIPE_VERSION,
                "suite": self.suite,
                "arch": ARCH,
                "variant": VARIANT,
                "packages": sorted(self.packages),
                "lock": _sha(self.lock),
                "code": _sha(self.base_code),
            }
        )

    def recipe_hash(self) -> str:
        """sha256 hex of the whole image: the base plus the top layer's inputs."""
        return _digest(
            {"base": self.base_hash(), "dockerfile": _sha(self.dockerfile),
             "runner": _sha(self.runner), "preimport": _sha(self.preimport)}
        )


def load_recipe(images_dir: Path = IMAGES_DIR) -> Recipe:
    """Read the recipe's files from `images_dir`; a missing file raises FileNotFoundError."""
    code = b"".join((images_dir / name).read_bytes() for name in BASE_CODE_FILES)
    return Recipe(
        lock=(images_dir / "requirements.lock").read_bytes(),
        base_code=code,
        dockerfile=(images_dir / "Dockerfile").read_bytes(),
        runner=(images_dir / "runner.py").read_bytes(),
        preimport=(images_dir / "preimport.txt").read_bytes(),
    )


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _digest(fields: dict[str, object]) -> str:
    """Hash a canonical JSON rendering, so field order and spacing never matter."""
    return _sha(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode())

"""Add an approved package to the image's recipe: `requirements.in`, then the hashed lock.

`sbx packages add NAME` calls these, then builds the image offline (`build_image`) and
re-runs `sbx bench ds1000 --hints` on it, so one command takes a package from "analysts
keep needing it" (`sbx packages`) to a measured image. The name is the operator's, but
it still goes into a file pip reads: only a plain requirement (a name, extras, version
specifiers) is accepted, never an option, a URL or a path.

The removed-API table names the lock it was measured against (`removed_apis.toml`'s
`lock_sha256`); `record_measured_lock` updates it once the bench has run on the new lock.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from sbx.images.recipe import IMAGES_DIR
from sbx.images.removed_apis import TABLE_FILE
from sbx.sandbox.errors import SbxError

_VERSION = r"(===?|!=|<=?|>=?|~=)[A-Za-z0-9.*+!-]+"
_REQUIREMENT = re.compile(
    rf"^(?P<name>[A-Za-z0-9]([A-Za-z0-9._-]{{0,98}}[A-Za-z0-9])?)"
    rf"(\[[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*\])?({_VERSION}(,{_VERSION})*)?$"
)
_DIGEST_LINE = re.compile(r'^lock_sha256 = "[0-9a-f]*"$', re.MULTILINE)


class RequirementError(SbxError, ValueError):
    """Not a plain requirement (`name`, `name[extra]`, `name>=1,<2`)."""


def canonical(name: str) -> str:
    """The name as pip compares names (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """The canonical name of a plain requirement, or `RequirementError`."""
    found = _REQUIREMENT.match(requirement.strip())
    if found is None:
        raise RequirementError(f"{requirement[:80]!r} is not a plain requirement "
                               "(a name, optional [extras] and version specifiers)")
    return canonical(found["name"])


def add_requirement(requirement: str, images_dir: Path = IMAGES_DIR) -> bool:
    """Append `requirement` to `requirements.in`; False when that name is already listed."""
    name = requirement_name(requirement)
    path = images_dir / "requirements.in"
    text = path.read_text(encoding="utf-8")
    for line in text.splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry and requirement_name(re.split(r"\s*;", entry)[0]) == name:
            return False
    path.write_text(text.rstrip("\n") + f"\n{requirement.strip()}\n", encoding="utf-8")
    return True


def record_measured_lock(images_dir: Path = IMAGES_DIR) -> str:
    """Set the table's `lock_sha256` to the lock's digest (after measuring it); returns it."""
    digest = hashlib.sha256((images_dir / "requirements.lock").read_bytes()).hexdigest()
    table = images_dir / TABLE_FILE
    text, count = _DIGEST_LINE.subn(f'lock_sha256 = "{digest}"', table.read_text("utf-8"))
    if count != 1:
        raise RequirementError(f"{TABLE_FILE} has no single lock_sha256 line")
    table.write_text(text, encoding="utf-8")
    return digest

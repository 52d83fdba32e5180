"""`SessionSpec`: what a sandbox session is opened with, as one value.

The session, the pool's leased session, `Pool.session`, and both `run_fresh`
functions take this one value instead of repeating its fields as keyword
arguments, so a new field (a limit, a label) is added in one place.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from sbx.sandbox.config import DEFAULT_IMAGE
from sbx.sandbox.limits import Limits

DEFAULT_OUTPUT_ROOT = Path("sbx-output")
"""Where a session's artifacts go when no directory is given: `sbx-output/<run_id>`."""


def new_run_id() -> str:
    """A short unique id shared by the containers, transcript and audit records of one run."""
    return "run-" + uuid.uuid4().hex[:12]


@dataclass(frozen=True, kw_only=True)
class SessionSpec:
    """One sandbox session's configuration (its container's identity and inputs)."""

    limits: Limits = field(default_factory=Limits)
    """Resource and isolation limits of the container and of each execution."""
    image: str = DEFAULT_IMAGE
    """The sandbox image (never pulled)."""
    data: tuple[Path, ...] = ()
    """Host files and directories shown read-only at `/data/<name>`."""
    output_dir: Path | None = None
    """Where artifacts are copied; default `sbx-output/<run_id>`."""
    run_id: str | None = None
    """The container's `sbx.run_id` label; a new id when None."""
    mode: str = "session"
    """The container's `sbx.mode` label: `session`, `fresh` or `pool`."""
    preimport: bool = False
    """Import the image's data stack (`images/preimport.txt`) when the container starts, so
    the first cell finds it loaded. The warm pool's containers do, off the caller's path; a
    container created for a caller does not, since that would put the import (about 0.9 s
    of CPU here) on its path whether or not the code needs the stack."""
    also_import: tuple[str, ...] = ()
    """Modules a preimporting container imports past the data stack: the restore-ready
    containers' (`[restore] preimport`), for a conversation whose snapshot had them loaded."""

    def resolved(self) -> SessionSpec:
        """The same spec with its run id and output directory chosen."""
        run_id = self.run_id or new_run_id()
        return replace(
            self, run_id=run_id, output_dir=self.output_dir or DEFAULT_OUTPUT_ROOT / run_id
        )

"""Reading what runs left behind: artifacts opened beneath their run's directory, never past it.

The front door's read side for faces that serve files (the HTTP API's
`/v1/runs/{id}/artifacts/...`, MCP's resources): the name a program chose is
checked (`unsafe_name_reason`) and the file is opened one component at a time
without following links (`open_artifact`), so a directory swapped for a link
while it is read opens nothing outside the run's output. The checks are the
sandbox's own file-copy rules (`sbx.sandbox.files`); faces reach them here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sbx.sandbox.files import open_beneath, unsafe_name_reason

__all__ = ["open_artifact", "unsafe_name_reason"]


def open_artifact(root: Path, parts: Sequence[str]) -> int:
    """A read-only descriptor of `root/parts...`, no link followed (`OSError` otherwise)."""
    return open_beneath(root, parts)

"""Files across the boundary: input paths in (read-only `/data`), artifacts out (checked).

Inbound, each host path must exist and be readable; it is bind-mounted
read-only at `/data/<name>`. Outbound, the host never trusts a name or a size
that came from the container: names must be plain relative paths, content
must match the announced size and the caps, and each file is written with
`O_NOFOLLOW | O_EXCL` under the output directory, so nothing in the container
can make the host write anywhere else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import unicodedata
from pathlib import Path, PurePosixPath

from sbx.sandbox.config import DataMount
from sbx.sandbox.errors import InvalidInput
from sbx.sandbox.protocol import ArtifactFrame
from sbx.sandbox.result import Artifact, RefusedArtifact

_SAFE_PART = re.compile(r"^[^\x00-\x1f\x7f/\\]+$")
MAX_NAME_BYTES = 255


def data_mounts(paths: list[Path]) -> tuple[DataMount, ...]:
    """Mounts for the input paths: each readable file or directory at `/data/<its name>`."""
    mounts: list[DataMount] = []
    seen: set[str] = set()
    for given in paths:
        path = Path(given).expanduser()
        if not path.exists():
            raise InvalidInput(f"data path {str(given)!r} does not exist")
        if not os.access(path, os.R_OK) or (path.is_dir() and not os.access(path, os.X_OK)):
            raise InvalidInput(f"data path {str(given)!r} is not readable")
        if not (path.is_file() or path.is_dir()):
            raise InvalidInput(f"data path {str(given)!r} is neither a file nor a directory")
        resolved = path.resolve()
        name = resolved.name or "root"
        if name in seen:
            raise InvalidInput(f"two data paths are both named {name!r}; rename one")
        seen.add(name)
        mounts.append(DataMount(source=resolved, target=f"/data/{name}"))
    return tuple(mounts)


def unsafe_name_reason(name: str) -> str | None:
    """Why `name` must not become a host path, or None when it is a plain relative path."""
    if not name or len(name.encode("utf-8", "surrogatepass")) > 4 * MAX_NAME_BYTES:
        return "unsafe name (empty or too long)"
    if name.startswith("/") or "\\" in name:
        return "unsafe name (absolute or backslash)"
    parts = PurePosixPath(name).parts
    if any(part in ("..", ".") for part in name.split("/")):
        return "unsafe name (escapes the output directory)"
    for part in parts:
        if (
            not _SAFE_PART.match(part)
            or len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES
        ):
            return "unsafe name (control characters or too long)"
        if any(unicodedata.category(ch) == "Cs" for ch in part):
            return "unsafe name (not valid UTF-8)"
    return None


class ArtifactSink:
    """Write artifact frames under one host directory, enforcing the caps again on our side."""

    def __init__(self, directory: Path, *, max_bytes: int, max_count: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_count = max_count

    def accept(
        self, frame: ArtifactFrame, accepted: list[Artifact], refused: list[RefusedArtifact]
    ) -> None:
        """Validate one frame and write it, or record why not."""
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
        if reason is not None:
            refused.append(RefusedArtifact(name=frame.name[:300], reason=reason))
            return
        target = self._write(frame.name, data)
        if target is None:
            refused.append(
                RefusedArtifact(name=frame.name, reason="would leave the output directory")
            )
            return
        accepted.append(
            Artifact(
                name=frame.name,
                path=str(target),
                size=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
            )
        )

    def _write(self, name: str, data: bytes) -> Path | None:
        """Create the file without following any link; None if a link on the host points away."""
        target = self.directory.joinpath(*name.split("/"))
        if not target.resolve().is_relative_to(self.directory.resolve()):
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return target

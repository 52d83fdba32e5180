"""Artifacts as MCP content and resources: `sbx://artifacts/<session id>/<name>`.

The code in the sandbox writes files to `/output`; the session copies them to
its own host directory (`<output root>/<session id>/`) with the sandbox's
checks (no links, no special files, no traversal, size and count caps). Here
they are handed to the client: each as a resource link, PNG charts also
inline as image content, and every one readable as a resource.

A resource URI is client input. It names a session and an artifact; it is
served only when the session is the caller's own and the name is one that
session's code produced. The file is opened under the session's directory one
component at a time without following links, must be the regular file of the
recorded size and SHA-256, and is never read past the sandbox's artifact cap.
"""

from __future__ import annotations

import base64
import hashlib
import mimetypes
import os
import stat
from pathlib import Path
from urllib.parse import quote, unquote

from mcp.types import ContentBlock, ImageContent, ResourceLink

from sbx.agent import Artifact, open_artifact, unsafe_name_reason

SCHEME = "sbx://artifacts/"
TEMPLATE = SCHEME + "{session}/{+name}"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_INLINE_IMAGES = 8
"""PNG artifacts of one call sent inline as images; the others are links only."""
MAX_INLINE_IMAGE_BYTES = 4 * 1024 * 1024
"""Larger PNGs are links only: an image goes into the calling model's context."""
_MAX_URI_CHARS = 2048


class ArtifactUnavailable(Exception):
    """The artifact cannot be served: not this session's, unknown, or changed on disk."""


def artifact_uri(session_id: str, name: str) -> str:
    """The resource URI of one artifact (the name's characters percent-encoded, `/` kept)."""
    return SCHEME + session_id + "/" + quote(name, safe="/")


def parse_artifact_uri(uri: str) -> tuple[str, str] | None:
    """`(session id, artifact name)` of an artifact URI; None when it is not one of ours."""
    if not uri.startswith(SCHEME) or len(uri) > _MAX_URI_CHARS:
        return None
    session_id, _, encoded = uri[len(SCHEME):].partition("/")
    if not session_id or not encoded or "?" in encoded or "#" in encoded:
        return None
    return session_id, unquote(encoded)


def mime_type(name: str) -> str:
    """The media type a client should expect, from the name only."""
    guessed, _ = mimetypes.guess_type(name, strict=False)
    return guessed or "application/octet-stream"


def read_artifact(directory: Path, artifact: Artifact, *, max_bytes: int) -> bytes:
    """The artifact's bytes, read safely from `directory` (see the module docstring)."""
    if unsafe_name_reason(artifact.name) is not None or artifact.size > max_bytes:
        raise ArtifactUnavailable(f"artifact {artifact.name!r} cannot be served")
    fd = _open_below(directory, artifact.name.split("/"))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != artifact.size:
            raise ArtifactUnavailable(f"artifact {artifact.name!r} changed since it was made")
        data = os.read(fd, artifact.size + 1)
    finally:
        os.close(fd)
    if len(data) != artifact.size or hashlib.sha256(data).hexdigest() != artifact.sha256:
        raise ArtifactUnavailable(f"artifact {artifact.name!r} changed since it was made")
    return data


def _open_below(directory: Path, parts: list[str]) -> int:
    """Open `directory/parts...` read-only, refusing a link at any component."""
    try:
        return open_artifact(directory, parts)
    except OSError as exc:
        raise ArtifactUnavailable(f"artifact unavailable: {exc.strerror}") from None


def artifact_blocks(
    session_id: str, directory: Path, artifacts: tuple[Artifact, ...], *, max_bytes: int
) -> list[ContentBlock]:
    """A resource link per artifact, and PNG charts inline as images (bounded)."""
    blocks: list[ContentBlock] = []
    inline = 0
    for artifact in artifacts:
        kind = mime_type(artifact.name)
        blocks.append(
            ResourceLink(
                uri=artifact_uri(session_id, artifact.name), name=artifact.name,
                mime_type=kind, size=artifact.size,
            )
        )
        image = _inline_png(directory, artifact, max_bytes=max_bytes)
        if image is not None and inline < MAX_INLINE_IMAGES:
            blocks.append(image)
            inline += 1
    return blocks


def _inline_png(directory: Path, artifact: Artifact, *, max_bytes: int) -> ImageContent | None:
    """The artifact as image content when it really is a PNG of a reasonable size."""
    if mime_type(artifact.name) != "image/png" or artifact.size > MAX_INLINE_IMAGE_BYTES:
        return None
    try:
        data = read_artifact(directory, artifact, max_bytes=max_bytes)
    except ArtifactUnavailable:
        return None
    if not data.startswith(PNG_SIGNATURE):  # a name is not a format: the sandbox chose both
        return None
    return ImageContent(data=base64.b64encode(data).decode("ascii"), mime_type="image/png")

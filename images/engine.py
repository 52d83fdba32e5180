"""The builder's side of the Docker engine: import a rootfs, build the top layer, tag, prune.

No registry is reachable, so nothing here pulls: the base image is streamed in
as a tar (`POST /images/create?fromSrc=-`), and the top layer is built `FROM`
it with `pull=False`. An image is reused only if its hash-named tag and its
label agree, so neither a retag nor an image built FROM ours passes for the
current recipe.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import docker
import docker.errors

from sbx.images.errors import ImageBuildError

CHUNK = 1 << 20
"""Bytes per chunk streamed to the engine."""


def find_tagged(
    client: docker.DockerClient, ref: str, *, label: str, value: str, without: str | None = None
) -> Any | None:
    """The image at `ref` if it carries label `label=value` (and not label `without`), else None.

    Images inherit their parent's labels, so a label alone does not identify our
    image: an image someone built FROM sbx-python carries the same `sbx.recipe`.
    The tag says which image we mean, the label says it is still current.
    """
    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None
    labels = image.labels or {}
    if labels.get(label) != value or (without is not None and without in labels):
        return None
    return image


def import_rootfs(
    client: docker.DockerClient, root: Path, *, repository: str, tag: str,
    labels: dict[str, str], log: TextIO,
) -> str:
    """Stream `root` as a tar into the engine as one layer; return the new image's id.

    The tar is produced by `tar --numeric-owner` and never touches the disk. If tar
    fails part-way the engine would happily import a truncated filesystem, so the
    imported image is deleted again and the build fails.
    """
    cmd = ["tar", "--numeric-owner", "-C", str(root), "-cf", "-", "."]
    log.write(f"$ {' '.join(cmd)} | docker import\n")
    log.flush()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
    pipe = proc.stdout
    if pipe is None:  # pragma: no cover - Popen always sets it with PIPE
        raise ImageBuildError("tar: no output pipe")

    def chunks() -> Iterator[bytes]:
        while chunk := pipe.read(CHUNK):
            yield chunk

    changes = [f"LABEL {key}={value}" for key, value in sorted(labels.items())]
    try:
        reply = client.api.import_image_from_data(
            chunks(), repository=repository, tag=tag, changes=changes
        )
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    code = proc.wait()
    image_id = _imported_id(str(reply))
    if code != 0:
        _remove_quietly(client, image_id)
        raise ImageBuildError(f"tar of the rootfs failed (exit {code}); see {log.name}")
    return image_id


def build_top(
    client: docker.DockerClient, *, base: str, dockerfile: bytes, runner: bytes, tag: str,
    labels: dict[str, str], nocache: bool, log: TextIO, preimport: bytes = b"",
) -> str:
    """Build images/Dockerfile FROM `base` with the runner as its context; return the image id."""
    context = _context(dockerfile=dockerfile, runner=runner, preimport=preimport)
    stream = client.api.build(
        fileobj=context, custom_context=True, tag=tag, pull=False, rm=True, forcerm=True,
        buildargs={"BASE": base}, labels=labels, nocache=nocache, decode=True,
    )
    image_id: str | None = None
    for chunk in stream:
        if "stream" in chunk:
            log.write(str(chunk["stream"]))
        if "error" in chunk:
            log.flush()
            detail = str(chunk["error"]).strip().splitlines()[0]
            raise ImageBuildError(f"top layer build failed: {detail}; see {log.name}")
        aux = chunk.get("aux")
        if isinstance(aux, dict) and "ID" in aux:
            image_id = str(aux["ID"])
    log.flush()
    if image_id is None:
        image_id = str(client.images.get(tag).id)
    return image_id


def retag(client: docker.DockerClient, image_id: str, refs: list[str]) -> None:
    """Point every `repo:tag` in refs at image_id (moving tags that point elsewhere)."""
    image = client.images.get(image_id)
    for ref in refs:
        repository, _, tag = ref.rpartition(":")
        image.tag(repository, tag)


def prune(
    client: docker.DockerClient, *, repository: str, label: str, keep: str,
    progress: Callable[[str], None],
) -> None:
    """Untag `repository`'s images whose `label` is not `keep`; unused ones are then deleted.

    Only tags of `repository` are touched (a user's own image that happens to carry
    our labels stays). Never forced: the engine refuses to delete an image a
    container still uses, and a later build prunes it.
    """
    for image in client.images.list(name=repository, filters={"label": label}):
        if image.labels.get(label) == keep:
            continue
        for ref in image.tags:
            if not ref.startswith(f"{repository}:"):
                continue
            try:
                client.images.remove(ref)
                progress(f"removed superseded {ref}")
            except docker.errors.APIError as exc:
                progress(f"kept superseded {ref}: {_reason(exc)}")


def prune_dangling(
    client: docker.DockerClient, *, label: str, progress: Callable[[str], None]
) -> None:
    """Delete our images left without any tag (a forced rebuild moves the tags away).

    Deleting a leaf also deletes its untagged parents (the classic builder's
    intermediate images, a replaced base). An image still in use is kept, and a
    later build tries again.
    """
    for image in client.images.list(filters={"label": label, "dangling": True}):
        try:
            client.images.remove(image.id)
            progress(f"removed untagged image {str(image.id)[7:19]}")
        except docker.errors.ImageNotFound:
            continue
        except docker.errors.APIError as exc:
            progress(f"kept untagged image {str(image.id)[7:19]}: {_reason(exc)}")


def _context(*, dockerfile: bytes, runner: bytes, preimport: bytes) -> io.BytesIO:
    """The build context: Dockerfile, runner.py, preimport.txt, root-owned, world-readable."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        files = (("Dockerfile", dockerfile), ("runner.py", runner), ("preimport.txt", preimport))
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, 0, 0
            archive.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


def _imported_id(reply: str) -> str:
    """The image id from the import reply (JSON lines; the last one carries the id)."""
    for line in reversed(reply.strip().splitlines()):
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "errorDetail" in message or "error" in message:
            raise ImageBuildError(f"engine refused the rootfs import: {message.get('error')}")
        status = str(message.get("status", ""))
        if status.startswith("sha256:"):
            return status
    raise ImageBuildError(f"unexpected reply from the engine's import: {reply[:200]!r}")


def _reason(exc: docker.errors.APIError) -> str:
    """The engine's own explanation, first line only."""
    return str(getattr(exc, "explanation", None) or exc).splitlines()[0]


def _remove_quietly(client: docker.DockerClient, image_id: str) -> None:
    try:
        client.images.remove(image_id, force=True)
    except docker.errors.APIError:
        pass

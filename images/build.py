"""`build_image`: make `sbx-python:latest` match the current recipe, as cheaply as possible.

Three outcomes, cheapest first:

- `sbx-python:r-<hash12>` exists with the current recipe hash as its label:
  point `latest` at it, done (< 2 s);
- only the top layer changed (runner.py, Dockerfile): build it FROM the existing
  base image `sbx-base:<basehash12>` (seconds);
- otherwise bootstrap the base in a temporary directory (root only), stream it
  into the engine, then build the top layer (about a minute with warm caches).

After a build, our images that no longer match (old `r-` tags, old bases, images
a forced rebuild left untagged) are deleted unless a container still uses them.
Downloads (Debian packages, wheels) are cached under /var/cache/sbx so a rebuild
needs the network only for what changed. Temporary files are removed on every
exit path, Ctrl-C included, after unmounting anything debootstrap left mounted.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import docker

from sbx.images import engine
from sbx.images.apt_source import Mirror, host_mirror
from sbx.images.errors import ImageBuildError
from sbx.images.recipe import Recipe, load_recipe
from sbx.images.rootfs import build_rootfs

__all__ = ["BuildResult", "ImageBuildError", "ImageInfo", "build_image", "current_recipe",
           "describe_image"]

REPOSITORY = "sbx-python"
"""The sandbox image's repository; `latest` is what sandboxes run."""

BASE_REPOSITORY = "sbx-base"
"""The imported base layer's repository, tagged by base hash."""

IMAGE_LABEL = "sbx.image"
RECIPE_LABEL = "sbx.recipe"
BASE_LABEL = "sbx.base"

CACHE_DIR = Path(os.environ.get("SBX_CACHE_DIR", "/var/cache/sbx"))
"""Downloads that outlive builds (debs/, wheels/), the build lock and the last build's log."""

WORK_PARENT = Path("/var/tmp")
"""Where the temporary rootfs is assembled: on disk, not a size-capped /tmp tmpfs."""


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    """What `build_image` produced or found."""

    image_id: str
    """The engine's id (`sha256:...`) of the sandbox image."""
    tags: tuple[str, ...]
    """Every tag now pointing at it: `sbx-python:latest` and `sbx-python:r-<hash12>`."""
    recipe_hash: str
    """sha256 hex of the recipe (label `sbx.recipe`)."""
    reused: bool
    """True when an image for this recipe already existed and nothing was built."""
    seconds: float
    """Wall time of the call."""


@dataclass(frozen=True, kw_only=True)
class ImageInfo:
    """The built image as `sbx image info` reports it."""

    tag: str
    """The tag inspected (`sbx-python:latest`)."""
    image_id: str | None
    """Its id, or None if it has not been built."""
    recipe_hash: str | None
    """Its `sbx.recipe` label."""
    current_hash: str | None
    """The recipe hash of the files on disk now, or None if runner.py is missing."""
    size_bytes: int | None
    """Image size as the engine reports it."""

    @property
    def current(self) -> bool:
        """Whether the built image matches the recipe on disk."""
        return self.recipe_hash is not None and self.recipe_hash == self.current_hash


def current_recipe(images_dir: Path | None = None) -> Recipe:
    """The recipe from the installed files (or `images_dir`); a missing file: ImageBuildError."""
    try:
        return load_recipe(images_dir) if images_dir is not None else load_recipe()
    except FileNotFoundError as exc:
        raise ImageBuildError(f"image recipe incomplete: {exc.filename} is missing") from None


def build_image(
    client: docker.DockerClient, *, progress: Callable[[str], None], force: bool = False,
    images_dir: Path | None = None, tag: str | None = None,
) -> BuildResult:
    """Ensure `sbx-python:latest` is the image of the current recipe; build what is missing.

    `images_dir` builds another copy of the recipe; `tag` (`repo:name`) tags the result
    there instead of `sbx-python:latest` (its recipe tag in `repo` too), and prunes
    nothing: a trial build (`sbx packages add --tag`) never touches the shared image.
    """
    started = time.monotonic()
    recipe = current_recipe(images_dir)
    recipe_hash, base_hash = recipe.recipe_hash(), recipe.base_hash()
    repository = tag.rsplit(":", 1)[0] if tag else REPOSITORY
    tags = (tag or f"{REPOSITORY}:latest", f"{repository}:r-{recipe_hash[:12]}")

    def result(image_id: str, *, reused: bool) -> BuildResult:
        engine.retag(client, image_id, list(tags))
        return BuildResult(image_id=image_id, tags=tags, recipe_hash=recipe_hash, reused=reused,
                           seconds=time.monotonic() - started)

    existing = None if force else engine.find_tagged(
        client, tags[1], label=RECIPE_LABEL, value=recipe_hash
    )
    if existing is not None:
        progress(f"reusing {str(existing.id)[7:19]}: it was built from recipe {recipe_hash[:12]}")
        return result(str(existing.id), reused=True)
    if force or _find_base(client, base_hash) is None:
        _require_build_host()  # before the lock, so the message is "needs root", not "cache"
    with _build_lock(progress), _build_log() as log:
        base_ref = _ensure_base(client, recipe, base_hash=base_hash, force=force, log=log,
                                progress=progress)
        progress("building the top layer (runner, user, env, labels)")
        image_id = engine.build_top(
            client, base=base_ref, dockerfile=recipe.dockerfile, runner=recipe.runner,
            preimport=recipe.preimport, tag=tags[1], nocache=force, log=log,
            labels={IMAGE_LABEL: "true", RECIPE_LABEL: recipe_hash},
        )
    built = result(image_id, reused=False)
    if tag is not None:
        return built
    engine.prune(client, repository=REPOSITORY, label=RECIPE_LABEL, keep=recipe_hash,
                 progress=progress)
    engine.prune(client, repository=BASE_REPOSITORY, label=BASE_LABEL, keep=base_hash,
                 progress=progress)
    engine.prune_dangling(client, label=BASE_LABEL, progress=progress)
    return built


def describe_image(client: docker.DockerClient) -> ImageInfo:
    """What `sbx-python:latest` is, and whether it matches the recipe on disk."""
    tag = f"{REPOSITORY}:latest"
    try:
        current: str | None = current_recipe().recipe_hash()
    except ImageBuildError:
        current = None
    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return ImageInfo(tag=tag, image_id=None, recipe_hash=None, current_hash=current,
                         size_bytes=None)
    return ImageInfo(tag=tag, image_id=str(image.id), recipe_hash=image.labels.get(RECIPE_LABEL),
                     current_hash=current, size_bytes=int(image.attrs.get("Size", 0)))


def _find_base(client: docker.DockerClient, base_hash: str) -> Any | None:
    """The base image for `base_hash`; sandbox images inherit its label, so they are excluded."""
    return engine.find_tagged(client, _base_ref(base_hash), label=BASE_LABEL, value=base_hash,
                              without=IMAGE_LABEL)


def _base_ref(base_hash: str) -> str:
    return f"{BASE_REPOSITORY}:{base_hash[:12]}"


def _ensure_base(
    client: docker.DockerClient, recipe: Recipe, *, base_hash: str, force: bool, log: TextIO,
    progress: Callable[[str], None],
) -> str:
    """Reuse or build the base image for `base_hash`; return the reference to build FROM."""
    ref = _base_ref(base_hash)
    if not force and _find_base(client, base_hash) is not None:
        progress(f"reusing base {ref}")
    else:
        _build_base(client, recipe, base_hash=base_hash, log=log, progress=progress)
    return ref


def _build_base(
    client: docker.DockerClient, recipe: Recipe, *, base_hash: str, log: TextIO,
    progress: Callable[[str], None],
) -> None:
    """Bootstrap the base rootfs in a temporary directory and import it as `sbx-base`."""
    _require_build_host()
    mirror = _mirror(recipe.suite)
    progress(f"building base {_base_ref(base_hash)} from {mirror.uri}")
    work = Path(tempfile.mkdtemp(prefix="sbx-rootfs-", dir=WORK_PARENT))
    try:
        lock = work / "requirements.lock"
        lock.write_bytes(recipe.lock)  # install exactly the bytes that were hashed
        root = work / "rootfs"
        root.mkdir(mode=0o755)
        build_rootfs(root, recipe=recipe, mirror=mirror, lock=lock, cache=CACHE_DIR, log=log,
                     progress=progress)
        progress("importing the rootfs into the engine")
        engine.import_rootfs(client, root, repository=BASE_REPOSITORY, tag=base_hash[:12],
                             labels={BASE_LABEL: base_hash}, log=log)
    finally:
        _remove_work_dir(work, progress)


def _require_build_host() -> None:
    """Bootstrapping needs root (debootstrap, chroot, chown) and debootstrap itself."""
    if os.geteuid() != 0:
        raise ImageBuildError(
            "building the base image needs root (debootstrap and chroot): run "
            "`sudo sbx image build`; sandboxes themselves never run as root"
        )
    for tool in ("debootstrap", "chroot", "tar"):
        if shutil.which(tool) is None:
            raise ImageBuildError(f"{tool} is not installed: `apt-get install -y {tool}`")


def _mirror(suite: str) -> Mirror:
    """SBX_DEBIAN_MIRROR if set, else the host's apt sources; an absent keyring is dropped."""
    override = os.environ.get("SBX_DEBIAN_MIRROR", "").strip()
    mirror = Mirror(uri=override, keyring=None) if override else host_mirror(suite=suite)
    if mirror.keyring and not Path(mirror.keyring).is_file():
        return Mirror(uri=mirror.uri, keyring=None)
    return mirror


@contextmanager
def _build_lock(progress: Callable[[str], None]) -> Iterator[None]:
    """One build at a time per host: two would race on the caches and the tags."""
    try:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        handle = (CACHE_DIR / "build.lock").open("a")
    except OSError as exc:
        raise ImageBuildError(
            f"cannot use the build cache {CACHE_DIR}: {exc.strerror} (run as root, or set "
            "SBX_CACHE_DIR to a writable directory)"
        ) from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("waiting for another `sbx image build` to finish")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@contextmanager
def _build_log() -> Iterator[TextIO]:
    """The full output of this build's steps; errors point here."""
    with (CACHE_DIR / "build.log").open("w", encoding="utf-8") as log:
        yield log


def _remove_work_dir(work: Path, progress: Callable[[str], None]) -> None:
    """Unmount whatever is still mounted below `work` (deepest first), then delete it.

    debootstrap mounts /proc and /sys (and may bind /dev) inside the target; an
    interrupted run can leave them mounted, and deleting through a bind mount of
    /dev would delete the host's device nodes. If anything stays mounted, the
    directory is left in place and named instead.
    """
    for point in sorted(_mounts_under(work), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    left = _mounts_under(work)
    if left:
        progress(f"could not unmount {left[0]}: left {work} in place, remove it by hand")
        return
    shutil.rmtree(work, ignore_errors=True)


def _mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path`, from /proc/self/mountinfo."""
    prefix = str(path.resolve())
    points: list[str] = []
    with open("/proc/self/mountinfo", encoding="utf-8") as table:
        for line in table:
            point = _unescape(line.split()[4])
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return points


def _unescape(field: str) -> str:
    r"""Undo mountinfo's octal escapes of space, tab, newline and backslash (`\040`)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


"""`sbx image build` and `sbx image info`: the offline sandbox image, from the command line.

Operator errors (not root, no mirror, engine down, a failed build step, an image
not built yet) end as one line on stderr and exit 125, like every other command
that could not do its work; the build log named in the line has the detail.
Ctrl-C and SIGTERM unwind through the builder's cleanup before exiting.
"""

from __future__ import annotations

import signal
import sys
import time
from types import FrameType
from typing import NoReturn

import click
import docker
import docker.errors

from sbx.agent.cli.errors import EXIT_INTERRUPTED, EXIT_SBX_ERROR
from sbx.images.build import ImageBuildError, build_image, describe_image
from sbx.tools.text_safety import safe_text

START_DOCKER_HINT = "start it with `dockerd &` (or `systemctl start docker`)"


def register(cli: click.Group) -> None:
    """Add the `image` group to the `sbx` group."""
    cli.add_command(image)


@click.group()
def image() -> None:
    """Build and inspect the sandbox image (offline: debootstrap + pinned wheels)."""


@image.command()
@click.option("--force", is_flag=True, help="Rebuild everything, even if the image is current.")
def build(force: bool) -> None:
    """Build sbx-python:latest from images/ (a fast no-op when it is already current)."""
    started = time.monotonic()

    def progress(message: str) -> None:
        click.echo(f"[{time.monotonic() - started:6.1f}s] {message}")

    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        client = _connect()
        result = build_image(client, progress=progress, force=force)
    except KeyboardInterrupt:
        _fail(
            "interrupted: the build stopped and its temporary files were removed",
            code=EXIT_INTERRUPTED,
        )
    except ImageBuildError as exc:
        _fail(f"image build failed: {exc}")
    except docker.errors.DockerException as exc:
        _fail(f"Docker engine error during the build: {_one_line(exc)}")
    finally:
        signal.signal(signal.SIGTERM, previous)
    verb = "reused existing image" if result.reused else "built"
    progress(f"{verb} {result.tags[0]} ({result.tags[1]}, {result.image_id[7:19]}) "
             f"in {result.seconds:.1f}s")


@image.command()
def info() -> None:
    """Show the built image, its recipe hash, whether it is current, and its size."""
    try:
        found = describe_image(_connect())
    except docker.errors.DockerException as exc:
        _fail(f"Docker engine error: {_one_line(exc)}")
    if found.image_id is None:
        _fail(f"{found.tag} is not built: run `sbx image build`")
    current = found.current_hash or "unknown (images/runner.py or another recipe file missing)"
    state = "yes" if found.current else "no: run `sbx image build`"
    size = f"{(found.size_bytes or 0) / 1e6:.0f} MB"
    for key, value in (("image", f"{found.tag} ({found.image_id[7:19]})"),
                       ("recipe", found.recipe_hash or "none (not built by sbx?)"),
                       ("current", current), ("matches", state), ("size", size)):
        click.echo(f"{key + ':':9}{safe_text(value)}")  # labels come from whoever built it


def _connect() -> docker.DockerClient:
    """A client that has answered a ping, or a one-line exit that says how to start Docker."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        _fail(f"cannot reach the Docker engine ({_one_line(exc)}); {START_DOCKER_HINT}")
    return client


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM unwinds like Ctrl-C, so temporary files and mounts are cleaned up."""
    raise KeyboardInterrupt


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


def _fail(message: str, *, code: int = EXIT_SBX_ERROR) -> NoReturn:
    """One line and 125, as every command that could not do its work (see `errors`)."""
    click.echo(f"sbx: {safe_text(message)}", err=True)
    sys.exit(code)


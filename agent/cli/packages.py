"""`sbx packages` and `sbx packages add NAME`: what analysts' code lacked, and adding it.

`sbx packages` counts, per module and principal, the executions that failed because the
image lacks a module (`ModuleNotFoundError`), from the audit log (`--audit-log`,
`SBX_AUDIT_LOG`, the policy's `[audit] path`, `./sbx-audit.jsonl`). `sbx packages add NAME`
puts an approved package into the image's recipe (`requirements.in`), regenerates the
hashed lock, builds the image offline and re-runs `sbx bench ds1000 --hints` on it when
given the benchmark's file. `--images-dir` and `--tag` try it on a copy of the recipe under
a tag of one's own, leaving the shared image and the real lock alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import NoReturn

import click

from sbx.agent import load_config
from sbx.agent.cli.bench import ds1000_with_hints
from sbx.agent.cli.errors import EXIT_SBX_ERROR, operator_errors
from sbx.images.add_package import RequirementError, add_requirement, record_measured_lock
from sbx.images.build import ImageBuildError, build_image
from sbx.images.lock import relock
from sbx.images.recipe import IMAGES_DIR
from sbx.tools.audit import resolve_audit_path
from sbx.tools.audit_verify import iter_records
from sbx.tools.package_requests import package_requests
from sbx.tools.text_safety import safe_text

_FILE = click.Path(path_type=Path, dir_okay=False)
_DIR = click.Path(path_type=Path, file_okay=False, exists=True)


def register(cli: click.Group) -> None:
    """Add the `packages` group to the `sbx` group."""
    cli.add_command(packages)


@click.group(invoke_without_command=True)
@click.option("--audit-log", type=_FILE, help="The audit log to count [default: as `sbx ask`].")
@click.option("--policy", type=_FILE, help="Policy file (for its [audit] path).")
@click.option("--json", "as_json", is_flag=True, help="Print the requests as JSON.")
@click.pass_context
def packages(ctx: click.Context, audit_log: Path | None, policy: Path | None,
             as_json: bool) -> None:
    """Modules analysts' code imported that the image lacks, per principal (from the audit log)."""
    if ctx.invoked_subcommand is not None:
        return
    config = load_config(policy)
    path = resolve_audit_path(audit_log, config.policy.audit.path, os.environ)
    try:
        found = package_requests(iter_records(path))
    except OSError as exc:
        raise click.ClickException(f"cannot read {path}: {exc.strerror}") from None
    if as_json:
        click.echo(json.dumps([asdict(item) for item in found], indent=2))
        return
    if not found:
        click.echo(f"no missing modules recorded in {safe_text(str(path))}", err=True)
        return
    rows = [["PACKAGE", "PRINCIPAL", "COUNT", "LAST"]]
    rows += [[safe_text(r.package), safe_text(r.principal), str(r.count), safe_text(r.last)]
             for r in found]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    click.echo("add one to the image: sbx packages add NAME", err=True)


@packages.command("add")
@click.argument("requirement")
@click.option("--images-dir", type=_DIR, default=IMAGES_DIR, show_default=True,
              help="The recipe to change (a copy of images/ to try it first).")
@click.option("--tag", help="Tag the new image here (repo:name) instead of sbx-python:latest.")
@click.option("--bench", "problems", type=_FILE,
              help="DS-1000 JSONL file: re-run `sbx bench ds1000 --hints` on the new image.")
@click.option("--jobs", type=click.IntRange(1, 8), default=2, show_default=True,
              help="Bench programs run at once.")
@click.option("--no-build", is_flag=True, help="Update requirements.in and the lock only.")
@operator_errors
def add_command(requirement: str, images_dir: Path, tag: str | None, problems: Path | None,
                jobs: int, no_build: bool) -> None:
    """Add REQUIREMENT to the image: requirements.in, the hashed lock, an offline build, a bench."""
    started = time.monotonic()

    def say(message: str) -> None:
        click.echo(f"[{time.monotonic() - started:6.1f}s] {safe_text(message)}")

    try:
        added = add_requirement(requirement, images_dir)
    except RequirementError as exc:
        raise click.UsageError(str(exc)) from None
    say(f"{'added' if added else 'already listed'}: {requirement} in requirements.in")
    try:
        wheels = relock(images_dir)
    except subprocess.CalledProcessError:
        _fail("pip could not resolve requirements.in (its output is above); nothing was built")
    say(f"locked {len(wheels)} wheels with hashes in {images_dir / 'requirements.lock'}")
    if no_build:
        return
    import docker

    try:
        built = build_image(docker.from_env(), progress=say, images_dir=images_dir, tag=tag)
    except ImageBuildError as exc:
        _fail(f"image build failed: {exc}")
    say(f"built {built.tags[0]} ({built.image_id[7:19]})")
    if problems is None:
        say("not measured: pass --bench DS1000.jsonl to re-run sbx bench ds1000 on it")
        return
    click.echo(ds1000_with_hints(problems, image=built.tags[0], jobs=jobs, progress=say))
    record_measured_lock(images_dir)
    say("the removed-API table now names the measured lock (removed_apis.toml lock_sha256)")


def _fail(message: str) -> NoReturn:
    click.echo(f"sbx: {safe_text(message)}", err=True)
    raise SystemExit(EXIT_SBX_ERROR)

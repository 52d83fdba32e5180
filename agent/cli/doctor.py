"""`sbx doctor`, `sbx gc`: commands about the sandbox itself, so they reach its machinery.

`sbx doctor` checks the engine, the image, the runtimes and that the limits
really bite, with the limit flags applied over the defaults (it probes the
host as the operator would configure it; it starts no run under a policy).
It also reads the policy (`--policy`, default the packaged one) and warns, one
line each, about every default-on data-guard detector (cards, secrets) the
policy turns off, for everyone, a principal pattern or a team: a warning, not a
failure (an operator may mean it), so it never changes the exit status.
`sbx gc` removes containers a crashed process left behind, found by label.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from sbx.agent import load_config
from sbx.agent.cli.errors import operator_errors
from sbx.agent.cli.limit_flags import limit_options, take_limits
from sbx.sandbox.checks.doctor import run_checks
from sbx.sandbox.config import DEFAULT_IMAGE
from sbx.sandbox.engine import Engine
from sbx.sandbox.gc import collect_orphans
from sbx.sandbox.limits import Limits
from sbx.tools.text_safety import safe_text


@click.command("doctor")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Sandbox image to check.")
@click.option("--policy", type=click.Path(path_type=Path, dir_okay=False),
              help="Policy file whose data guard is checked. [default: the packaged sbx.toml]")
@limit_options
@operator_errors
def doctor_command(image: str, policy: Path | None, **limit_flags: Any) -> None:
    """Check the engine, the image, the runtimes, and that the limits are really enforced."""
    for weakened in load_config(policy).policy.guard.weakened():
        mark = click.style("warn", fg="yellow")
        click.echo(f"[{mark}] {'data guard':<24} {safe_text(weakened)} is turned off: those "
                   "values reach the model provider unmasked ([guard] in the policy)")
    checks = run_checks(take_limits(limit_flags).over(Limits()), image)
    for check in checks:
        mark = click.style(" ok ", fg="green") if check.passed else click.style("FAIL", fg="red")
        detail = f"{check.tried}: {check.happened}" if check.tried else check.happened
        line = f"[{mark}] {check.name:<24} {safe_text(detail)}"
        if not check.passed and check.fix:
            line += f"\n       fix: {safe_text(check.fix)}"
        click.echo(line)
    sys.exit(0 if all(check.passed for check in checks) else 1)


@click.command("gc")
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Remove every sbx container, even those a live process still uses.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON.")
@operator_errors
def gc_command(everything: bool, as_json: bool) -> None:
    """Remove sandbox containers left behind by a crashed process (found by label)."""
    removed = collect_orphans(Engine.connect(), everything=everything)
    if as_json:
        click.echo(json.dumps(removed))
        return
    for item in removed:
        line = f"removed {item['id']} (run {item['run_id']}, {item['state']})"
        click.echo(safe_text(line))
    click.echo(f"{len(removed)} container(s) removed")


def register(cli: click.Group) -> None:
    """Add this module's commands to the `sbx` group."""
    cli.add_command(doctor_command)
    cli.add_command(gc_command)

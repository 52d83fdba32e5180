"""`sbx selftest`: the containment battery, one line per check, non-zero on any failure."""

from __future__ import annotations

import sys
from typing import Any

import click

from sbx.agent.cli.errors import operator_errors
from sbx.agent.cli.limit_flags import limit_options, take_limits
from sbx.sandbox.checks.selftest import Check, as_json, run_selftest
from sbx.sandbox.config import DEFAULT_IMAGE
from sbx.sandbox.limits import Limits
from sbx.tools.text_safety import safe_json, safe_text


def print_check(result: Check) -> None:
    """One human-readable line: verdict, check, what was tried, what happened."""
    mark = click.style("pass", fg="green") if result.passed else click.style("FAIL", fg="red")
    if result.passed and result.limit:
        mark = click.style("limit", fg="yellow")  # held as far as the runtime allows
    tried, got = safe_text(result.tried), safe_text(result.happened)  # may quote sandbox text
    click.echo(f"[{mark}] {result.name:<24} tried: {tried}; got: {got}")


@click.command("selftest")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Sandbox image to test.")
@click.option("--json", "as_json_flag", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--no-egress",
    is_flag=True,
    help="Do not try real connections or DNS; only list the network interfaces.",
)
@limit_options
@operator_errors
def selftest_command(image: str, as_json_flag: bool, no_egress: bool, **limit_flags: Any) -> None:
    """Try to break out of the sandbox as configured, and report every control that held or not.

    \b
    Run it after installing or upgrading sbx, Docker or the kernel, with the same
    limits and runtime you use (e.g. `sbx selftest --runtime runsc`). It checks
    network egress (public, bridge gateway, metadata address, DNS), filesystem
    writes and host paths, capabilities and privilege escalation, the runner
    protocol (code cannot reach the runner's or init's descriptors, memory or
    signals), host paths in the mount table, pids, memory,
    CPU and time limits, output floods, artifact tricks, environment leaks,
    isolation between sessions, leftover containers and host responsiveness.
    Exit status: 0 when every check passed, 1 otherwise.
    """
    limits = take_limits(limit_flags).over(Limits())
    results = run_selftest(
        limits, image=image, egress=not no_egress, progress=None if as_json_flag else print_check
    )
    if as_json_flag:
        click.echo(safe_json(as_json(results)))
    else:
        failed = [r.name for r in results if not r.passed]
        click.echo(
            f"{len(results) - len(failed)} of {len(results)} checks passed"
            + (f"; failed: {', '.join(failed)}" if failed else "")
        )
    sys.exit(0 if all(r.passed for r in results) else 1)


def register(cli: click.Group) -> None:
    """Add `sbx selftest` to the `sbx` group."""
    cli.add_command(selftest_command)

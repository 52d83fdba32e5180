"""The per-run limit flags, the same on every command that starts runs, parsed one way.

`--memory`, `--cpus`, `--pids`, `--timeout`, `--runtime`, `--network` become
one `LimitsRequest` (the core's one way in for per-run limits). Commands that
run code under the policy (`exec`, `ask`, `chat`, `demo`, `replay --rerun`)
apply it only below the policy's `[sandbox]`: above it is one line and exit 2.
The operator's probes (`doctor`, `selftest`) apply it over the defaults.
"""

from __future__ import annotations

from typing import Any, NoReturn

import click

from sbx.agent import LimitRefused, LimitsRequest, SettingsError
from sbx.agent.cli.errors import fail

LIMIT_FLAGS = ("timeout", "memory", "cpus", "pids", "network", "runtime")
"""The keyword arguments `limit_options` adds to a command."""


def limit_options(command: Any) -> Any:
    """Add the limit flags; omitted flags keep the policy's values."""
    options = [
        click.option("--timeout", help="Wall-clock limit per execution, e.g. 30s, 2m; at most "
                     "the policy's. [default: the policy's, 30s]"),
        click.option("--memory", help="Memory limit, no swap, e.g. 256m; at most the policy's. "
                     "[default: the policy's, 512m]"),
        click.option("--cpus", help="CPU quota, e.g. 0.5; at most the policy's. [default: the "
                     "policy's, 1]"),
        click.option("--pids", type=int, help="Most processes+threads at once; at most the "
                     "policy's. [default: the policy's, 256]"),
        click.option("--network", type=click.Choice(["none", "bridge"]),
                     help="'none', or 'bridge' when the policy opens it (audited). [default: "
                     "the policy's, none]"),
        click.option("--runtime", help="OCI runtime: the policy's, or runsc (gVisor) in place of "
                     "runc. [default: the policy's, runc]"),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def take_limits(flags: dict[str, Any]) -> LimitsRequest:
    """Remove the limit flags from a command's keyword arguments and parse them.

    A value that is not a limit at all (`--memory lots`) exits 2 naming the flag.
    """
    values = {name: flags.pop(name, None) for name in LIMIT_FLAGS}
    try:
        return LimitsRequest.parse(values, prefix="--")
    except SettingsError as exc:
        fail(str(exc), 2)


def refused(exc: LimitRefused) -> NoReturn:
    """A limit above the policy: one line naming the flag and the ceiling, exit 2."""
    fail(exc.describe("--"), 2)

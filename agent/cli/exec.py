"""`sbx exec`, `sbx doctor`, `sbx gc`: the sandbox without an agent.

`sbx exec` runs a program in a fresh hardened container and exits with the
program's status (124 timeout, 137 memory, 125 when sbx itself could not run
it), so it composes in shell scripts and CI jobs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

import click
from pydantic import ValidationError

from sbx.agent.cli.display import ProgramOutput
from sbx.agent.cli.errors import (
    EXIT_OOM,
    EXIT_TIMEOUT,
    fail,
    operator_errors,
)
from sbx.agent.config import describe_validation_error
from sbx.sandbox.checks.doctor import run_checks
from sbx.sandbox.config import DEFAULT_IMAGE
from sbx.sandbox.engine import Engine
from sbx.sandbox.gc import collect_orphans
from sbx.sandbox.limits import Limits
from sbx.sandbox.pool import Pool
from sbx.sandbox.pool_config import PoolConfig
from sbx.sandbox.result import ExecutionResult
from sbx.sandbox.session import new_run_id
from sbx.sandbox.spec import SessionSpec
from sbx.sandbox.units import format_size
from sbx.tools.text_safety import safe_json, safe_text

DEFAULT_OUTPUT = Path("sbx-output")
"""Where `sbx exec` puts each run's own directory unless `--output` names one."""


def limit_options(command: Any) -> Any:
    """The flags that override `Limits` fields; omitted flags keep the closed defaults."""
    options = [
        click.option(
            "--timeout", help="Wall-clock limit per execution, e.g. 30s, 2m. [default: 30s]"
        ),
        click.option("--memory", help="Memory limit, no swap, e.g. 512m, 2g. [default: 512m]"),
        click.option("--cpus", help="CPU quota, e.g. 1, 1.5. [default: 1]"),
        click.option("--pids", type=int, help="Most processes+threads at once. [default: 256]"),
        click.option(
            "--network",
            type=click.Choice(["none", "bridge"]),
            help="'none' (default) or 'bridge' to open egress (think twice).",
        ),
        click.option("--runtime", help="OCI runtime: runc (default) or runsc (gVisor)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def limits_from(options: dict[str, Any]) -> Limits:
    """Limits with the given flags applied (pydantic validates and converts the units).

    A bad value exits 2 with one line naming the flag and the bound it broke.
    """
    try:
        return Limits(**{key: value for key, value in options.items() if value is not None})
    except ValidationError as exc:
        fail(f"invalid value for {describe_validation_error(exc, prefix='--')}", 2)


def read_code(source: str) -> bytes:
    """The program's bytes from a file or stdin (`-`), with a one-line error if unreadable."""
    if source == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(source).read_bytes()
    except OSError as exc:
        fail(f"cannot read {source!r}: {exc.strerror}", 2)


def print_result(
    result: ExecutionResult, output: Path, live: ProgramOutput | None = None
) -> None:
    """Program output to our stdout/stderr; artifacts and notes as `sbx:` lines on stderr.

    The program's own output is data the user asked for: to a pipe or a file it
    goes as written, so `sbx exec x.py > out.bin` and `| jq` get the program's
    text; to a terminal its controls and bidi characters are shown escaped, so
    the program cannot drive the terminal. Our own `sbx:` lines quote names the
    program chose and are escaped wherever they go.
    """
    stdout, stderr = result.stdout, result.stderr
    if live is not None:  # what arrived live is on the screen already
        stdout, stderr = live.remaining("stdout", stdout), live.remaining("stderr", stderr)
    write_program_output(sys.stdout, stdout)
    sys.stdout.flush()
    write_program_output(sys.stderr, stderr)
    if result.error is not None:
        write_program_output(sys.stderr, result.error.traceback)
    if result.artifacts:
        click.echo(f"sbx: output directory {safe_text(str(output))}", err=True)
    for artifact in result.artifacts:
        name = safe_text(str(artifact.path))
        click.echo(f"sbx: artifact {name} ({format_size(artifact.size)})", err=True)
    for note in result.notes:
        click.echo(f"sbx: {safe_text(note)}", err=True)


def write_program_output(stream: TextIO, text: str) -> None:
    """The program's text: escaped on a terminal, as written elsewhere.

    Either way a lone surrogate (which a UTF-8 stream cannot encode) is written as
    `\\udXXX` rather than crashing the print after the program has run.
    """
    if stream.isatty():
        text = safe_text(text, multiline=True)
    stream.write(text.encode("utf-8", "backslashreplace").decode("utf-8"))


def exit_code_for(result: ExecutionResult) -> int:
    """The process exit status for a result."""
    if result.timed_out:
        return EXIT_TIMEOUT
    if result.oom_killed:
        return EXIT_OOM
    return result.exit_code


@click.command("exec")
@click.argument("source", metavar="FILE|-")
@click.option(
    "--data",
    "data",
    multiple=True,
    type=click.Path(path_type=Path),
    help="File or directory shown read-only at /data/<name>. Repeatable.",
)
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    help="Host directory that receives the files written to /output; existing files "
    "there are never replaced. [default: sbx-output/RUN_ID, new for each run]",
)
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Sandbox image.")
@click.option("--json", "as_json", is_flag=True, help="Print the ExecutionResult as JSON instead.")
@limit_options
@operator_errors
def exec_command(
    source: str,
    data: tuple[Path, ...],
    output: Path | None,
    image: str,
    as_json: bool,
    **limit_flags: Any,
) -> None:
    """Run a Python program in a fresh, locked-down container and exit with its status.

    \b
    Exit status: the program's own; 124 timeout; 137 memory limit;
    125 sbx could not run it; 130 interrupted.
    \b
    Example:
      sbx exec examples/analysis.py --data examples/sales.csv --output out/
    """
    limits = limits_from(limit_flags)
    code = read_code(source)
    run_id = new_run_id()
    output = output or DEFAULT_OUTPUT / run_id  # one run never sees another's files
    live = None if as_json else ProgramOutput(sys.stdout, sys.stderr)  # Ctrl-C keeps it
    with Pool.start(config=PoolConfig(size=0)) as pool:  # the host-wide cap, no warm-up
        result = pool.run_fresh(
            code,
            SessionSpec(
                limits=limits, image=image, data=tuple(data), output_dir=output, run_id=run_id
            ),
            on_output=live,
        )
    if as_json:
        click.echo(safe_json(result.model_dump_json(indent=2)))
    else:
        print_result(result, output, live)
    sys.exit(exit_code_for(result))


@click.command("doctor")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Sandbox image to check.")
@limit_options
@operator_errors
def doctor_command(image: str, **limit_flags: Any) -> None:
    """Check the engine, the image, the runtimes, and that the limits are really enforced."""
    checks = run_checks(limits_from(limit_flags), image)
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
    cli.add_command(exec_command)
    cli.add_command(doctor_command)
    cli.add_command(gc_command)

"""`sbx exec`: one program in a fresh hardened container, without an agent.

It runs through the door's `App.execute`, so the program is
gated and audited like a model's call: the policy applies (`--policy`), the
limit flags only ever tighten it, and the audit log (`--audit-log`, else where
`sbx ask` writes it) gets the run's records under the OS user, with the limits
and the network mode. It exits with the program's status (124 timeout, 137
memory, 125 when sbx itself could not run it), so it composes in shell
scripts and CI jobs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

import click

from sbx.agent import (
    DEFAULT_IMAGE,
    ExecutionResult,
    ProgramSpec,
    format_size,
    os_principal,
    safe_json,
    safe_text,
)
from sbx.agent.cli.errors import EXIT_OOM, EXIT_TIMEOUT, fail, operator_errors
from sbx.agent.cli.limit_flags import limit_options, take_limits
from sbx.agent.cli.opening import FaceOptions, opened_core

_RECORD = click.Path(path_type=Path)


def read_code(source: str) -> str:
    """The program's text from a file or stdin (`-`), with a one-line error if unusable."""
    try:
        code = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        fail(f"cannot read {source!r}: {exc.strerror}", 2)
    try:
        return code.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"code is not valid UTF-8 (byte {exc.start})")


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
@click.option("--policy", type=_RECORD,
              help="Policy file (tools, sandbox limits). [default: the packaged sbx.toml]")
@click.option("--audit-log", type=_RECORD,
              help="Audit log to append to. [default: $SBX_AUDIT_LOG, the policy's, or "
              "./sbx-audit.jsonl]")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Sandbox image.")
@click.option("--json", "as_json", is_flag=True, help="Print the ExecutionResult as JSON instead.")
@limit_options
@operator_errors
def exec_command(
    source: str,
    data: tuple[Path, ...],
    output: Path | None,
    policy: Path | None,
    audit_log: Path | None,
    image: str,
    as_json: bool,
    **limit_flags: Any,
) -> None:
    """Run a Python program in a fresh, locked-down container and exit with its status.

    The policy applies as to a model's code (limit flags may only lower it) and
    the run is recorded in the audit log (`sbx audit verify` checks it).

    \b
    Exit status: the program's own; 124 timeout; 137 memory limit; 2 a bad flag
    or a limit above the policy's; 125 sbx could not run it; 130 interrupted.
    \b
    Example:
      sbx exec examples/analysis.py --data examples/sales.csv --output out/
    """
    limits = take_limits(limit_flags)  # a bad flag is reported before stdin is read
    program = ProgramSpec(code=read_code(source), principal=os_principal(), data=tuple(data),
                          output=output, limits=limits)
    live = None if as_json else ProgramOutput(sys.stdout, sys.stderr)  # Ctrl-C keeps it
    with opened_core(FaceOptions(policy=policy, audit_log=audit_log, image=image)) as app:
        run = app.execute(  # a limit above the policy's: one line, exit 2
            program, on_output=live.relay if live is not None else None
        )
    result = run.execution
    if result is None:  # refused at the gate (e.g. the policy disables execute_python)
        fail(run.outcome.text.splitlines()[0] if run.outcome.text else run.outcome.status)
    if as_json:
        click.echo(safe_json(result.model_dump_json(indent=2)))
    else:
        print_result(result, run.output_dir, live)
    sys.exit(exit_code_for(result))


class ProgramOutput:
    """A program's own output (`sbx exec`), written as it arrives from the sandbox.

    To a terminal each piece is escaped (`safe_text`), so the program cannot drive it;
    to a pipe or file it goes as written. What was written stays written when the
    user presses Ctrl-C. `remaining` is what the result holds beyond what arrived
    live (the kept tail, the sandbox's cut marker), so nothing is written twice.
    """

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._streams = {"stdout": out, "stderr": err}
        self._written = {"stdout": 0, "stderr": 0}

    def __call__(self, stream: str, text: str) -> None:
        """The sandbox's live output callback: write `text` to its stream now."""
        target = self._streams.get(stream)
        if target is None:
            return
        self.write(target, text)
        self._written[stream] += len(text)

    def relay(self, call_id: str, stream: str, text: str) -> None:
        """The core's output sink (`on_output(call_id, stream, text)`): one program, any call."""
        self(stream, text)

    def remaining(self, stream: str, whole: str) -> str:
        """The part of the result's `whole` stream not written live."""
        done = self._written.get(stream, 0)
        return whole[done:] if done <= len(whole) else ""

    @staticmethod
    def write(target: TextIO, text: str) -> None:
        """Escaped on a terminal, as written elsewhere; a lone surrogate as `\\udXXX`."""
        if target.isatty():
            text = safe_text(text, multiline=True)
        target.write(text.encode("utf-8", "backslashreplace").decode("utf-8"))
        target.flush()

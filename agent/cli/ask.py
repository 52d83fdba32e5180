"""`sbx ask`, `sbx demo`, `sbx replay`: the agent on the command line.

`sbx ask` prints live progress on stderr (turn, tool, the code, a one-line
outcome, tokens), then the answer and the artifact paths on stdout, or one
JSON document with `--json`. Exit status:

    0    completed: the model answered
    3    a budget ended the run (step_limit, time_limit, token_limit, tool_limit); no answer
    4    model_error: the endpoint failed after retries, or replied unusably
    2    bad flag or setting; 125 sbx could not run (policy, engine, image, audit log)
    130  cancelled (Ctrl-C or SIGTERM): the sandbox was removed, the audit log closed
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import click

from sbx.agent.app import AskOptions, AskOutcome, ask
from sbx.agent.cli.demo import API_KEY, LABEL, MODEL_NAME, QUESTION, demo_data, demo_turns
from sbx.agent.cli.display import Progress, replay
from sbx.agent.cli.errors import EXIT_INTERRUPTED, fail, operator_errors
from sbx.agent.cli.scripted_model import ScriptedLLM
from sbx.agent.settings import SettingsError
from sbx.agent.state import Status
from sbx.agent.transcript import TranscriptError
from sbx.sandbox.config import DEFAULT_IMAGE
from sbx.tools.audit import AuditError
from sbx.tools.policy import PolicyError
from sbx.tools.text_safety import safe_json, safe_text

EXIT_BUDGET = 3
EXIT_MODEL_ERROR = 4
_EXIT: dict[Status, int] = {
    "completed": 0,
    "step_limit": EXIT_BUDGET,
    "time_limit": EXIT_BUDGET,
    "token_limit": EXIT_BUDGET,
    "tool_limit": EXIT_BUDGET,
    "model_error": EXIT_MODEL_ERROR,
    "cancelled": EXIT_INTERRUPTED,
}
_FILE = click.Path(path_type=Path, dir_okay=False)
_RECORD = click.Path(path_type=Path)
"""A file sbx opens itself (policy, audit log, transcript): a directory there is sbx's
error to report (exit 125, as every policy and audit-log problem), not a usage error."""


def run_options(command: Any) -> Any:
    """Where the run's inputs and records go; shared by `ask` and `demo`."""
    options = [
        click.option("--output", type=click.Path(path_type=Path, file_okay=False),
                     help="Directory for files the code saves to /output. [default: "
                     "sbx-output/RUN_ID]"),
        click.option("--policy", type=_RECORD,
                     help="Policy file (tools, quotas, sandbox limits, [agent]). [default: the "
                     "packaged sbx.toml]"),
        click.option("--audit-log", type=_RECORD,
                     help="Audit log to append to. [default: $SBX_AUDIT_LOG, the policy's, or "
                     "./sbx-audit.jsonl]"),
        click.option("--transcript", type=_RECORD,
                     help="Transcript to write (JSON Lines). [default: sbx-runs/RUN_ID.jsonl]"),
        click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Sandbox image."),
        click.option("--json", "as_json", is_flag=True,
                     help="Print one JSON document (status, answer, usage, paths) on stdout."),
        click.option("--quiet", "-q", is_flag=True, help="No progress on stderr."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def model_options(command: Any) -> Any:
    """The endpoint, the budget and the tuning flags of `ask`; omitted flags keep the policy's."""
    options = [
        click.option("--base-url", help="OpenAI-compatible endpoint. [env: OPENAI_BASE_URL]"),
        click.option("--api-key", help="API key (prefer the env var). [env: OPENAI_API_KEY]"),
        click.option("--model", help="Model name. [env: SBX_MODEL]"),
        click.option("--max-turns", type=int, help="Most model requests. [default: 20]"),
        click.option("--max-tool-calls", type=int,
                     help="Most tool calls in the run. [default: 40]"),
        click.option("--max-tool-calls-per-turn", type=int,
                     help="Most tool calls one reply may ask for. [default: 8]"),
        click.option("--max-time", "max_wall_time",
                     help="Wall-clock limit of the whole run, e.g. 10m. [default: 10m]"),
        click.option("--max-tokens", "max_total_tokens", type=int,
                     help="Most tokens (prompt + completion) in the run. [default: 200000]"),
        click.option("--request-timeout",
                     help="Limit of one model HTTP request, e.g. 2m. [default: 120s]"),
        click.option("--max-retries", type=int,
                     help="Retries of a failed model request. [default: 2]"),
        click.option("--context-tokens", type=int,
                     help="Estimated size past which old observations are shortened. "
                     "[default: 60000]"),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.command("ask")
@click.argument("question")
@click.option("--data", "data", multiple=True, type=click.Path(path_type=Path, exists=True),
              help="File or directory the code can read at /data/<name>. Repeatable.")
@run_options
@model_options
@operator_errors
def ask_command(
    question: str, data: tuple[Path, ...], output: Path | None, policy: Path | None,
    audit_log: Path | None, transcript: Path | None, image: str, as_json: bool, quiet: bool,
    base_url: str | None, api_key: str | None, model: str | None, **flags: Any,
) -> None:
    """Answer QUESTION by letting a model write and run Python in the sandbox.

    Example: sbx ask "Which region grew fastest in 2024?" --data examples/sales.csv

    Exit status: 0 answered; 3 a budget ended the run (no answer); 4 model error;
    2 bad flag or setting; 125 sbx could not run; 130 cancelled.
    """
    options = AskOptions(
        question=question, data=data, output=output, policy=policy, audit_log=audit_log,
        transcript=transcript, image=image, base_url=base_url, api_key=api_key, model=model,
        flags=flags,
    )
    _finish(_run(options, quiet=quiet), as_json=as_json)


@click.command("demo")
@run_options
@operator_errors
def demo_command(
    output: Path | None, policy: Path | None, audit_log: Path | None, transcript: Path | None,
    image: str, as_json: bool, quiet: bool,
) -> None:
    """Watch the agent fix its own mistake, with a scripted model (no LLM, no network needed).

    The model is a script served on 127.0.0.1 through the real openai SDK; the sandbox,
    the tool gate, the audit log and the transcript are real.
    """
    with tempfile.TemporaryDirectory(prefix="sbx-demo-") as scratch, ScriptedLLM(
        demo_turns()
    ) as llm:
        options = AskOptions(
            question=QUESTION, data=(demo_data(Path(scratch)),), output=output, policy=policy,
            audit_log=audit_log, transcript=transcript, image=image, base_url=llm.base_url,
            api_key=API_KEY, model=MODEL_NAME, label=LABEL,
        )
        outcome = _run(options, quiet=quiet)
    _finish(outcome, as_json=as_json)


@click.command("replay")
@click.argument("transcript", type=_FILE)
def replay_command(transcript: Path) -> None:
    """Re-render a past run from its transcript, answer included (exit 2 for a bad file)."""
    try:
        replay(transcript, sys.stdout)
    except TranscriptError as exc:
        fail(str(exc), 2)


def _run(options: AskOptions, *, quiet: bool) -> AskOutcome:
    """Run, turning configuration errors into one line on stderr."""
    progress = None if quiet else Progress(sys.stderr)
    try:
        return ask(options, environ=os.environ, progress=progress)
    except SettingsError as exc:
        fail(str(exc), 2)
    except (PolicyError, AuditError, TranscriptError) as exc:
        fail(str(exc))


def _finish(outcome: AskOutcome, *, as_json: bool) -> NoReturn:
    """Print the answer (or why there is none) and exit with the run's status."""
    result = outcome.result
    if as_json:
        click.echo(safe_json(json.dumps(outcome.as_dict(), indent=2, ensure_ascii=False)))
    elif result.status == "completed":
        click.echo(safe_text(str(result.answer), multiline=True))
        if result.artifacts:
            click.echo("\nArtifacts:")
            for path in result.artifacts:
                click.echo(f"  {safe_text(str(path))}")
    if result.status == "cancelled":
        click.echo("sbx: cancelled; the sandbox was removed and the audit log closed", err=True)
    elif result.status != "completed":
        click.echo(f"sbx: no answer ({result.status}): {safe_text(str(result.message))}", err=True)
    records = f"transcript {outcome.transcript}, audit log {outcome.audit_log}"
    click.echo(f"sbx: {safe_text(records)}", err=True)
    sys.exit(_EXIT[result.status])


def register(cli: click.Group) -> None:
    """Add this module's commands to the `sbx` group."""
    cli.add_command(ask_command)
    cli.add_command(demo_command)
    cli.add_command(replay_command)

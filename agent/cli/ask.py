"""`sbx ask`, `sbx demo`, `sbx replay`: the agent on the command line.

`sbx ask` prints live progress on stderr (turn, tool, the code, a one-line
outcome, tokens), then the answer and the artifact paths on stdout, or one
JSON document with `--json`. Exit status:

    0    completed: the model answered
    3    a budget ended the run (step_limit, time_limit, token_limit, tool_limit,
         cost_limit, budget_exceeded); no answer
    4    model_error: the endpoint failed after retries, or replied unusably;
         truncated: the answer was cut off (finish_reason length or content_filter)
    5    gate_halt: the tool gate halted the run (e.g. too many denied calls); see the audit log
    6    needs_input: the model asked a question and no one was at a terminal to answer it;
         the question is printed; `sbx ask --continue RUN_ID "answer"` continues the run
    2    bad flag or setting; 125 sbx could not run (policy, engine, image, audit log)
    130  cancelled (Ctrl-C or SIGTERM): the sandbox was removed, the audit log closed
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import click

from sbx.agent import (
    DEFAULT_IMAGE,
    RUNS_DIR,
    Answer,
    ConversationSpec,
    ScriptedLLM,
    TranscriptError,
    find_transcript,
    read_paused,
    run_outcome,
    safe_json,
    safe_text,
)
from sbx.agent import RunStatus as Status
from sbx.agent.cli.answer_parts import answer_text, mislabelled_line
from sbx.agent.cli.demo import API_KEY, LABEL, MODEL_NAME, QUESTION, demo_data, demo_turns
from sbx.agent.cli.display import Progress, replay, source_line, verdict_line
from sbx.agent.cli.errors import EXIT_INTERRUPTED, fail, operator_errors
from sbx.agent.cli.limit_flags import limit_options, take_limits
from sbx.agent.cli.opening import FaceOptions, model_options, opened_app, run_options
from sbx.agent.cli.prompting import terminal_operator
from sbx.agent.cli.rerun import rerun_command

EXIT_BUDGET = 3
EXIT_MODEL_ERROR = 4
EXIT_GATE_HALT = 5
EXIT_NEEDS_INPUT = 6
_EXIT: dict[Status, int] = {
    "completed": 0,
    "step_limit": EXIT_BUDGET,
    "time_limit": EXIT_BUDGET,
    "token_limit": EXIT_BUDGET,
    "tool_limit": EXIT_BUDGET,
    "cost_limit": EXIT_BUDGET,
    "budget_exceeded": EXIT_BUDGET,
    "gate_halt": EXIT_GATE_HALT,
    "truncated": EXIT_MODEL_ERROR,
    "needs_input": EXIT_NEEDS_INPUT,
    "model_error": EXIT_MODEL_ERROR,
    "cancelled": EXIT_INTERRUPTED,
}
_FILE = click.Path(path_type=Path, dir_okay=False)


def output_options(command: Any) -> Any:
    """How the result is printed; shared by `ask` and `demo`."""
    command = click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")(command)
    return click.option("--json", "as_json", is_flag=True,
                        help="Print one JSON document (status, answer, usage, paths) on "
                        "stdout.")(command)


@click.command("ask")
@click.argument("question")
@click.option("--data", "data", multiple=True, type=click.Path(path_type=Path, exists=True),
              help="File or directory the code can read at /data/<name>. Repeatable.")
@click.option("--continue", "continues", metavar="RUN_ID",
              help="Continue RUN_ID, which ended needs_input: QUESTION is your answer. Uses "
              "the run's transcript (--transcript, or found in sbx-runs/) and its data.")
@run_options
@output_options
@model_options
@limit_options
@operator_errors
def ask_command(
    question: str, data: tuple[Path, ...], continues: str | None, output: Path | None,
    policy: Path | None, audit_log: Path | None, transcript: Path | None, image: str,
    as_json: bool, quiet: bool, base_url: str | None, api_key: str | None, model: str | None,
    **flags: Any,
) -> None:
    """Answer QUESTION by letting a model write and run Python in the sandbox.

    Example: sbx ask "Which region grew fastest in 2024?" --data examples/sales.csv

    When the model asks you something, a terminal prompts you; elsewhere the run ends
    needs_input (exit 6) with the question, and `sbx ask --continue RUN_ID "answer"`
    continues it.

    Exit status: 0 answered; 3 a budget ended the run (no answer); 4 model error or an
    answer cut off; 5 the tool gate halted the run; 6 the model needs your answer; 2 bad
    flag or setting; 125 sbx could not run; 130 cancelled. For follow-up questions, use
    `sbx chat`.
    """
    limits = take_limits(flags)
    options = FaceOptions(
        data=data, output=output, policy=policy, audit_log=audit_log, transcript=transcript,
        image=image, base_url=base_url, api_key=api_key, model=model, flags=flags, limits=limits,
    )
    if continues is not None:
        if data:
            fail("--continue uses the paused run's own data; drop --data", 2)
        _finish(_continue(continues, question, options, quiet=quiet), as_json=as_json)
    _finish(_run(question, options, quiet=quiet), as_json=as_json)


@click.command("demo")
@run_options
@output_options
@click.option("--tool-format", type=click.Choice(["native", "text"]), default="native",
              show_default=True,
              help="text: the scripted model writes ```python blocks, as models served "
              "without a tool-call parser do.")
@limit_options
@operator_errors
def demo_command(
    output: Path | None, policy: Path | None, audit_log: Path | None, transcript: Path | None,
    image: str, as_json: bool, quiet: bool, tool_format: str, **limit_flags: Any,
) -> None:
    """Watch the agent fix its own mistake, with a scripted model (no LLM, no network needed).

    The model is a script served on 127.0.0.1 through the real openai SDK; the sandbox,
    the tool gate, the audit log and the transcript are real.
    """
    limits = take_limits(limit_flags)
    with tempfile.TemporaryDirectory(prefix="sbx-demo-") as scratch, ScriptedLLM(
        demo_turns(tool_format)
    ) as llm:
        options = FaceOptions(
            data=(demo_data(Path(scratch)),), output=output, policy=policy,
            audit_log=audit_log, transcript=transcript, image=image, base_url=llm.base_url,
            api_key=API_KEY, model=MODEL_NAME, label=LABEL, flags={"tool_format": tool_format},
            limits=limits,
        )
        outcome = _run(QUESTION, options, quiet=quiet)
    _finish(outcome, as_json=as_json)


@click.command("replay")
@click.argument("transcript", type=_FILE)
@click.option("--rerun", is_flag=True,
              help="Run the recorded code again in a fresh sandbox with the same data and say, "
              "execution by execution, whether the output matches.")
@click.option("--policy", type=_FILE, help="With --rerun: the policy file. [default: packaged]")
@click.option("--audit-log", type=_FILE, help="With --rerun: the audit log to append to.")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True,
              help="With --rerun: the sandbox image.")
@limit_options
@operator_errors
def replay_command(
    transcript: Path, rerun: bool, policy: Path | None, audit_log: Path | None, image: str,
    **limit_flags: Any,
) -> None:
    """Re-render a past run (or every run of a conversation) from its transcript.

    With --rerun, execute its code again instead (exit 0 all matches, 1 something differs),
    under the policy's limits or lower ones (the limit flags). Exit 2 for a file it cannot
    render, naming the line.
    """
    limits = take_limits(limit_flags)
    if rerun:
        options = FaceOptions(policy=policy, audit_log=audit_log, image=image, limits=limits)
        rerun_command(transcript, options)
    if limits.changes():
        fail("the limit flags apply only with --rerun (nothing else runs code)", 2)
    try:
        replay(transcript, sys.stdout)
    except TranscriptError as exc:
        fail(str(exc), 2)


def _run(question: str, options: FaceOptions, *, quiet: bool) -> Answer:
    """One question in a conversation of its own, through the application core."""
    progress = None if quiet else Progress(sys.stderr)
    with opened_app(options) as (app, endpoint):
        return app.answer_one(
            question, spec=_asking(options.spec()), endpoint=endpoint,
            transcript=options.transcript, progress=progress, limits=options.limits,
        )


def _continue(run_id: str, answer: str, options: FaceOptions, *, quiet: bool) -> Answer:
    """The paused run `run_id` continued with `answer`, appended to its transcript."""
    progress = None if quiet else Progress(sys.stderr)
    with opened_app(options) as (app, endpoint):
        path = options.transcript or find_transcript(run_id, RUNS_DIR)
        paused = read_paused(path, run_id)
        return app.continue_paused(
            paused, answer, spec=_asking(options.spec()), endpoint=endpoint,
            progress=progress, limits=options.limits,
        )


def _asking(spec: ConversationSpec) -> ConversationSpec:
    """Who answers the model's questions: this terminal's operator, else `--continue`."""
    operator = terminal_operator()
    return replace(spec, operator=operator, defer_questions=operator is None)


def _finish(outcome: Answer, *, as_json: bool) -> NoReturn:
    """Print the answer (or why there is none) and exit with the run's status.

    The answer, the paths and the message come from the model or the sandbox:
    every control and bidi character is shown escaped (`--json` as `\\uXXXX`).
    """
    result = outcome.result
    if as_json:
        click.echo(safe_json(json.dumps(outcome.as_dict(), indent=2, ensure_ascii=False)))
    elif result.status == "completed":
        click.echo(safe_text(answer_text(outcome.as_dict()), multiline=True))
        _provenance(outcome)
        if result.artifacts:
            click.echo("\nArtifacts:")
            for path in result.artifacts:
                click.echo(f"  {safe_text(str(path))}")
    if result.status == "needs_input" and not as_json:
        click.echo(safe_text(str(result.question), multiline=True))
    if result.status == "cancelled":
        click.echo("sbx: cancelled; the sandbox was removed and the audit log closed", err=True)
    elif result.status == "needs_input":
        click.echo(f"sbx: the model needs your answer; continue with: sbx ask --continue "
                   f"{result.run_id} \"your answer\"", err=True)
    elif result.status != "completed":
        ending = run_outcome(result.status)
        click.echo(f"sbx: no answer, {ending}: {safe_text(str(result.message))}", err=True)
    records = f"transcript {outcome.transcript}, audit log {outcome.audit_log}"
    click.echo(f"sbx: {safe_text(records)}", err=True)
    sys.exit(_EXIT[result.status])


def _provenance(outcome: Answer) -> None:
    """The verdict on the answer's numbers, then where each traced one was printed."""
    row = outcome.as_dict()
    verdict = verdict_line(row)
    if verdict is not None:
        click.echo(f"\n{verdict[0].upper()}{verdict[1:]}")
        for source in row["sources"]:
            click.echo(f"  {source_line(source)}")
    mislabelled = mislabelled_line(row)
    if mislabelled:
        click.echo(f"\n{safe_text(mislabelled)}")


def register(cli: click.Group) -> None:
    """Add this module's commands to the `sbx` group."""
    cli.add_command(ask_command)
    cli.add_command(demo_command)
    cli.add_command(replay_command)

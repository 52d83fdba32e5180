"""`sbx chat`: a conversation at the terminal; follow-up questions see the earlier runs' variables.

Each line is a question, answered by one run in the same sandbox session: the
steps stream on stderr as they happen, the answer comes on stdout. Commands:
`/reset` (new sandbox, messages forgotten), `/exit` (or Ctrl-D). Ctrl-C while
a question runs cancels that run, not the chat: its sandbox is removed and the
next question starts with a fresh one (and is told so). SIGTERM ends the chat.

When the model asks the user something (`ask_user`), the operator at the
terminal is prompted and the answer goes back at once. Without a terminal
(questions piped in) the run ends `needs_input`, and the next line is the
answer that continues it.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

import click

from sbx.agent import Conversation, RunResult, read_resumable, run_outcome, safe_text
from sbx.agent.cli.answer_parts import answer_text
from sbx.agent.cli.display import Progress
from sbx.agent.cli.errors import EXIT_INTERRUPTED, fail, operator_errors
from sbx.agent.cli.limit_flags import limit_options, take_limits
from sbx.agent.cli.opening import FaceOptions, model_options, opened_app, run_options
from sbx.agent.cli.prompting import terminal_operator

PROMPT = "you> "
HELP = "Ask a question. /reset starts afresh, /exit leaves; Ctrl-C cancels a running question."


class _Signals:
    """Whether SIGTERM arrived: the current run is cancelled, then the chat ends."""

    terminating = False


@click.command("chat")
@click.option("--data", "data", multiple=True, type=click.Path(path_type=Path, exists=True),
              help="File or directory the code can read at /data/<name>. Repeatable.")
@run_options
@click.option("--quiet", "-q", is_flag=True, help="No step-by-step progress on stderr.")
@click.option("--resume", "resume_from", type=click.Path(path_type=Path, dir_okay=False),
              help="Take up the conversation of this transcript: its messages and data; its "
                   "variables are rebuilt by replaying its code (policy [restore]).")
@model_options
@limit_options
@operator_errors
def chat_command(
    data: tuple[Path, ...], output: Path | None, policy: Path | None, audit_log: Path | None,
    transcript: Path | None, image: str, quiet: bool, resume_from: Path | None,
    base_url: str | None, api_key: str | None, model: str | None, **flags: Any,
) -> None:
    """Talk with the agent about your data: each question can build on the last.

    The code of every question runs in one sandbox, so a follow-up can use the
    variables, imports and files of the earlier ones. Budgets (--max-turns,
    --max-time, ...) apply to each question.

    \b
    Example:
      sbx chat --data examples/sales.csv
      you> Which region grew fastest in 2024?
      you> And in 2023?
      sbx chat --resume sbx-runs/conv-1a2b3c4d5e6f.jsonl
    """
    limits = take_limits(flags)
    options = FaceOptions(
        data=data, output=output, policy=policy, audit_log=audit_log, transcript=transcript,
        image=image, base_url=base_url, api_key=api_key, model=model, flags=flags, limits=limits,
    )
    progress = None if quiet else Progress(sys.stderr)
    operator = terminal_operator()
    spec = replace(options.spec(), operator=operator, defer_questions=operator is None)
    if resume_from is not None and (data or transcript):
        fail("--resume: the conversation keeps its own data and transcript (drop --data and "
             "--transcript)", 2)
    with opened_app(options) as (app, endpoint):
        if resume_from is not None:
            opened = app.resume(read_resumable(resume_from), spec=spec, endpoint=endpoint,
                                limits=limits)
        else:
            opened = app.conversation(spec, endpoint=endpoint, transcript=options.transcript,
                                      limits=limits)
        with opened as conversation:
            if progress is not None:
                conversation.subscribe(progress)
            click.echo(f"sbx chat: conversation {conversation.id}. {HELP}", err=True)
            code = converse(conversation)
            click.echo(f"sbx: transcript {conversation.transcript.path}, audit log "
                       f"{app.audit_path}", err=True)
    sys.exit(code)


def converse(conversation: Conversation) -> int:
    """Read questions until /exit or end of input; the exit status of the chat."""
    _Signals.terminating = False
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        while True:
            line = _read_line()
            if _Signals.terminating:
                return EXIT_INTERRUPTED
            if line is None or line.strip() == "/exit":
                return 0
            question = line.strip()
            if not question:
                continue
            if question == "/reset":
                conversation.reset()
                click.echo("(the sandbox and the conversation were reset)", err=True)
            elif question in ("/help", "/?"):
                click.echo(HELP, err=True)
            elif conversation.question.value is not None:
                show(conversation.answer(question), restores=conversation.config.restore.enabled)
            else:
                show(conversation.ask(question), restores=conversation.config.restore.enabled)
            if _Signals.terminating:
                return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)


def _read_line() -> str | None:
    """One line from the user; None at end of input. Ctrl-C at the prompt does not leave."""
    while True:
        try:
            return input(PROMPT)
        except EOFError:
            return None
        except KeyboardInterrupt:
            if _Signals.terminating:
                return None
            click.echo("\n(to leave, type /exit or press Ctrl-D)", err=True)


def show(result: RunResult, *, restores: bool = False) -> None:
    """The answer on stdout, or why there is none on stderr.

    `restores`: the next question restores a lost sandbox's state (`[restore]` is on).
    """
    if result.status == "completed":
        click.echo(safe_text(answer_text(result.as_dict()), multiline=True))
        for path in result.artifacts:
            click.echo(f"  artifact: {safe_text(path)}")
    elif result.status == "cancelled":
        after = ("the next question restores its state" if restores
                 else "its variables are gone")
        click.echo(f"sbx: cancelled; the sandbox was removed ({after})", err=True)
    elif result.status == "needs_input":
        click.echo(f"sbx: the model asks you: {safe_text(str(result.question), multiline=True)}",
                   err=True)
        click.echo("(your next line answers it)", err=True)
    else:
        ending = run_outcome(result.status)
        click.echo(f"sbx: no answer, {ending}: {safe_text(result.message)}", err=True)


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM cancels the run in progress (as Ctrl-C does), then the chat ends."""
    _Signals.terminating = True
    raise KeyboardInterrupt


def register(cli: click.Group) -> None:
    """Add `sbx chat` to the `sbx` group."""
    cli.add_command(chat_command)

"""Human-readable progress: the same renderer for a live run (stderr) and `sbx replay` (stdout).

It reads the events the loop emits (see `agent.transcript`), never the loop's
state, so a transcript file re-renders exactly as the run looked. One line
per happening: the turn and its tokens, each tool call with its code, a
one-line outcome, notices, and the ending. Plain ASCII, colour only on a
terminal (click strips it elsewhere).
"""

from __future__ import annotations

import json
import re
from typing import Any, TextIO

import click

from sbx.agent.events import Event

Row = dict[str, Any]
"""An event as plain data: the renderers read fields with defaults, as replay must."""
MAX_CODE_LINES = 30
MAX_LINE = 160
_SECTION = re.compile(r"^\[(stdout|stderr|notes)\]$")


class Progress:
    """An event sink that prints each event as it arrives."""

    def __init__(self, stream: TextIO, *, show_answer: bool = False) -> None:
        self._stream = stream
        self._show_answer = show_answer

    def __call__(self, event: Event) -> None:
        """Render one event (types without a renderer are skipped)."""
        render = getattr(self, f"_on_{event.type}", None)
        if render is not None:
            render(event.model_dump())

    def _echo(self, text: str, **style: Any) -> None:
        click.echo(click.style(text, **style) if style else text, file=self._stream)

    def _on_run_start(self, event: Row) -> None:
        label = event.get("label")
        if label:
            self._echo(f"== {label}", fg="magenta", bold=True)
        self._echo(
            f"== run {event.get('run_id')} | model {event.get('model')} at {event.get('base_url')}"
            f" | prompt v{event.get('prompt_version')}",
            bold=True,
        )
        self._echo(f"?  {event.get('question')}")
        for item in event.get("data") or []:
            self._echo(f"   data: {item}")

    def _on_message(self, event: Row) -> None:
        message = event.get("message") or {}
        if message.get("role") == "user" and event.get("turn"):
            self._echo(f"!  {_clip(str(message.get('content')))}", fg="yellow")

    def _on_model_reply(self, event: Row) -> None:
        usage = event.get("usage") or {}
        total = (event.get("total_usage") or {}).get("total_tokens", 0)
        self._echo(
            f"-- turn {event.get('turn')} | {usage.get('total_tokens', 0):,} tokens "
            f"(run total {total:,}) | {event.get('duration_s', 0):.1f} s",
            fg="cyan",
        )
        message = event.get("message") or {}
        calls = message.get("tool_calls") or []
        if calls and message.get("content"):
            self._echo(f"   model: {_clip(str(message['content']))}")
        for item in calls:
            function = item.get("function") or {}
            self._echo(f"-> {function.get('name')} [{item.get('id')}]", bold=True)
            for line in _arguments_lines(str(function.get("arguments") or "")):
                self._echo(f"   | {line}", dim=True)

    def _on_tool_result(self, event: Row) -> None:
        failed = bool(event.get("failed"))
        word = event.get("status") if event.get("status") != "ok" or not failed else "failed"
        line = f"<- {word} ({event.get('duration_s', 0):.1f} s): {one_line(event.get('content'))}"
        self._echo(line, fg="red" if failed else "green")
        for path in event.get("artifacts") or []:
            self._echo(f"   saved {path}")

    def _on_compaction(self, event: Row) -> None:
        count = len(event.get("shortened") or [])
        self._echo(
            f"   (shortened {count} older observation(s) to bound the context; "
            f"now about {event.get('estimate', 0):,} tokens)",
            dim=True,
        )

    def _on_run_end(self, event: Row) -> None:
        status = event.get("status")
        usage = event.get("usage") or {}
        summary = (
            f"{event.get('turns')} turn(s), {event.get('tool_calls')} tool call(s), "
            f"{usage.get('total_tokens', 0):,} tokens, {event.get('duration_s', 0):.1f} s"
        )
        colour = "green" if status == "completed" else "red"
        self._echo(f"== {status}: {summary}", fg=colour, bold=True)
        sandbox = event.get("sandbox") or {}
        if sandbox.get("executions"):
            self._echo(
                f"   sandbox: {sandbox['executions']} execution(s), "
                f"{sandbox.get('execution_s', 0):.2f} s, "
                f"{sandbox.get('cpu_seconds', 0):.2f} CPU s, "
                f"peak memory {sandbox.get('peak_memory_bytes', 0) / 2**20:.0f} MiB"
            )
        if status != "completed":
            self._echo(f"   {event.get('message')}", fg=colour)
        for path in event.get("artifacts") or []:
            self._echo(f"   artifact: {path}")
        if self._show_answer and event.get("answer"):
            self._echo("")
            self._echo(str(event["answer"]))

    def _on_run_error(self, event: Row) -> None:
        self._echo(f"== error: {event.get('error')}", fg="red", bold=True)


def one_line(text: Any) -> str:
    """The first informative line of an observation, clipped."""
    for line in str(text or "").splitlines():
        if line.strip() and not _SECTION.match(line.strip()):
            return _clip(line.strip())
    return "(no output)"


def _clip(text: str) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."


def _arguments_lines(arguments: str) -> list[str]:
    """The code of an `execute_python` call, else the arguments as compact JSON."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return [_clip(f"(invalid JSON) {arguments}")]
    if isinstance(parsed, dict) and isinstance(parsed.get("code"), str):
        lines = parsed["code"].rstrip().splitlines() or [""]
        if len(lines) > MAX_CODE_LINES:
            cut = len(lines) - MAX_CODE_LINES
            lines = [*lines[:MAX_CODE_LINES], f"... ({cut} more lines)"]
        return [_clip(line) for line in lines]
    return [_clip(json.dumps(parsed, ensure_ascii=False))]

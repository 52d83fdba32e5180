"""Human-readable progress: the same renderer for a live run (stderr) and `sbx replay` (stdout).

It reads the events the core emits (see `sbx.agent.core.events`), never the loop's
state, so a transcript file re-renders exactly as the run looked. One line per
happening: the turn and its tokens, each tool call with its code, a one-line outcome,
notices, and the ending; while an execution runs, its live output (dimmed, a bounded
number of lines). Colour only on a terminal (click strips it elsewhere).

Nearly every value here comes from the model, the sandboxed program or a
file: each one passes `safe_text` before it reaches the terminal, so an ESC,
a C1 control or a bidi override shows as `\\x1b`, `\\x9b` or `\\u202e` and can
neither move the cursor nor fake sbx's own lines. A transcript is a file
anyone may have edited: `replay` reports a line it cannot render (not UTF-8,
not JSON, a field of the wrong type) as `file:line: why`, never a traceback.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, TextIO

import click
from pydantic import BaseModel

from sbx.agent import (
    PLAN_MARKS,
    Event,
    StateRestored,
    TranscriptError,
    numbered_events,
    outcome_of,
    pending_note,
    restore_summary,
    safe_text,
)
from sbx.agent.cli.answer_parts import answer_text, mislabelled_line

Row = dict[str, Any]
"""An event as plain data: the renderers read each field defensively, as replay must."""

MAX_CODE_LINES = 30
MAX_LINE = 160
MAX_LIVE_LINES = 200
MAX_RESTORED_LINE = 300
"""Longest line of a restore's report (a cell may name many variables)."""
"""Live output lines shown per tool call while it runs; then one note, and the result."""
WAIT_NOTE_S = 5
"""Off a terminal, a model waited on gets one line per this many seconds (and per retry)."""
_CLEAR_LINE = "\r\x1b[2K"
_SECTION = re.compile(r"^\[(stdout|stderr|notes)\]$")


class EventShapeError(ValueError):
    """An event field has the wrong JSON type (a damaged or hand-edited transcript)."""


class Progress:
    """An event sink that prints each event as it arrives."""

    def __init__(self, stream: TextIO, *, show_answer: bool = False, strict: bool = False) -> None:
        self._stream = stream
        self._show_answer = show_answer
        self._strict = strict
        self._partial: dict[tuple[str, str], str] = {}
        """A live line not finished yet, per (call, stream): shown when its newline comes."""
        self._live_lines: dict[str, int] = {}
        self._terminal = bool(getattr(stream, "isatty", lambda: False)())
        self._status = False
        """A waiting line is on the terminal: cleared before the next line is written."""
        self._waited: tuple[Any, ...] | None = None
        """Off a terminal: what the last waiting line said (run, turn, 5 s step, retries)."""

    def __call__(self, event: Event | Row) -> None:
        """Render one event (unknown types are skipped: newer transcripts stay readable).

        A field of the wrong type raises `EventShapeError` when `strict` (replay
        names the line); a live run shows one line instead and goes on.
        """
        row = event.model_dump(mode="json") if isinstance(event, BaseModel) else event
        render = getattr(self, f"_on_{row.get('type')}", None)
        if render is None:
            return
        try:
            render(row)
        except EventShapeError as exc:
            if self._strict:
                raise
            self._echo(f"   (event not shown: {exc})", dim=True)

    def _echo(self, text: str, *, multiline: bool = False, **style: Any) -> None:
        if self._status:
            click.echo(_CLEAR_LINE, file=self._stream, nl=False)
            self._status = False
        shown = safe_text(text, multiline=multiline)
        click.echo(click.style(shown, **style) if style else shown, file=self._stream)

    def _on_run_start(self, event: Row) -> None:
        label = event.get("label")
        if label:
            self._echo(f"== {label}", fg="magenta", bold=True)
        self._echo(
            f"== run {_text(event.get('run_id'))} | model {_text(event.get('model'))} at "
            f"{_text(event.get('base_url'))} | prompt v{_text(event.get('prompt_version'))}",
            bold=True,
        )
        self._echo(f"?  {_clip(_text(event.get('question')))}")
        for item in _list(event, "data"):
            self._echo(f"   data: {_clip(_text(item))}")

    def _on_message(self, event: Row) -> None:
        message = _map(event, "message")
        if message.get("role") == "user" and event.get("turn"):
            content = message.get("content")
            if isinstance(content, list):  # text parts (an image shown is a text part here)
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            self._echo(f"!  {_clip(_text(content))}", fg="yellow")

    def _on_model_waiting(self, event: Row) -> None:
        """A model still waited on, so a slow model does not look like a hang.

        On a terminal one line redrawn in place (cleared by the next line); elsewhere
        a line every `WAIT_NOTE_S` seconds and at each retry, so a log is not flooded.
        """
        elapsed, retries = _num(event, "elapsed_s"), _num(event, "retries")
        line = f"   .. waiting for the model {_clip(_text(event.get('model')))}: {elapsed:.0f} s"
        if retries:
            line += f" (retry {retries:g} after {_clip(_text(event.get('retry_reason')))})"
        if self._terminal:
            click.echo(_CLEAR_LINE + click.style(line, dim=True), file=self._stream, nl=False)
            self._status = True
            return
        said = (event.get("run_id"), event.get("turn"), int(elapsed // WAIT_NOTE_S), retries)
        if (retries or elapsed >= WAIT_NOTE_S) and said != self._waited:
            self._waited = said
            self._echo(line, dim=True)

    def _on_model_reply(self, event: Row) -> None:
        tokens = _num(_map(event, "usage"), "total_tokens", "usage")
        total = _num(_map(event, "total_usage"), "total_tokens", "total_usage")
        self._echo(
            f"-- turn {_text(event.get('turn'))} | {tokens:,} tokens "
            f"(run total {total:,}) | {_num(event, 'duration_s'):.1f} s",
            fg="cyan",
        )
        message = _map(event, "message")
        calls = _list(message, "tool_calls", "message")
        if calls and message.get("content"):
            self._echo(f"   model: {_clip(_text(message['content']))}")
        for index, item in enumerate(calls):
            where = f"message.tool_calls[{index}]"
            call = _as_map(item, where)
            function = _map(call, "function", where)
            name, call_id = _text(function.get("name")), _text(call.get("id"))
            self._echo(f"-> {_clip(name)} [{_clip(call_id)}]", bold=True)
            for line in _arguments_lines(_text(function.get("arguments"))):
                self._echo(f"   | {line}", multiline=True, dim=True)  # one line; tabs kept

    def _on_output_chunk(self, event: Row) -> None:
        """Live output of a running execution: whole lines, dimmed, escaped, at most a few."""
        call_id, stream = _text(event.get("call_id")), _text(event.get("stream"))
        lines = (self._partial.pop((call_id, stream), "") + _text(event.get("text"))).split("\n")
        rest = lines.pop()
        if len(rest) > MAX_LINE:  # a line without end is shown in parts, so memory stays small
            lines.append(rest)
            rest = ""
        if rest:
            self._partial[(call_id, stream)] = rest
        for line in lines:
            self._live_line(call_id, stream, line)

    def _live_line(self, call_id: str, stream: str, line: str) -> None:
        shown = self._live_lines.get(call_id, 0)
        self._live_lines[call_id] = shown + 1
        if shown < MAX_LIVE_LINES:
            mark = "2>" if stream == "stderr" else ">"
            self._echo(f"   {mark} {_clip(line, tabs=True)}", multiline=True, dim=True)
        elif shown == MAX_LIVE_LINES:
            self._echo("   (more output while it runs is not shown here; the result follows)",
                       dim=True)

    def _end_live_output(self, call_id: str) -> None:
        """Show the unfinished live lines of a call that has ended, and forget it."""
        for stream in ("stdout", "stderr"):
            rest = self._partial.pop((call_id, stream), "")
            if rest:
                self._live_line(call_id, stream, rest)
        self._live_lines.pop(call_id, None)

    def _on_tool_result(self, event: Row) -> None:
        self._end_live_output(_text(event.get("call_id")))
        failed = bool(event.get("failed"))
        word = outcome_of(event)  # the core's word (derived alike for older transcripts)
        outcome = one_line(event.get("content"))
        line = f"<- {_clip(word)} ({_num(event, 'duration_s'):.1f} s): {outcome}"
        self._echo(line, fg="red" if failed else "green")
        for path in _list(event, "artifacts"):
            self._echo(f"   saved {_clip(_text(path))}")

    def _on_plan(self, event: Row) -> None:
        """The plan as a checklist, each changed step marked with what it was."""
        changed = {  # the first plan is all new: nothing to mark
            _text(change.get("step")): change
            for change in (_as_map(item, "changes[]") for item in _list(event, "changes"))
        } if event.get("revision") != 1 else {}
        note = f": {_text(event.get('note'))}" if event.get("note") else ""
        self._echo(_clip(f"   plan (revision {_text(event.get('revision'))}){note}"),
                   fg="magenta", bold=True)
        for index, item in enumerate(_list(event, "steps"), start=1):
            step = _as_map(item, "steps[]")
            status, text = _text(step.get("status")), _text(step.get("description"))
            tool = f" ({_text(step.get('tool'))})" if step.get("tool") else ""
            change = changed.get(text)
            was = ""
            if change is not None:
                was = "  <- new" if change.get("change") == "added" else (
                    f"  <- was {_text(change.get('before'))}")
            line = f"   {PLAN_MARKS.get(status, '[?]')} {index}. {text}{tool}"
            self._echo(_clip(line) + _clip(was), dim=status == "dropped",
                       bold=change is not None)
        for change in changed.values():
            if change.get("change") == "removed":
                self._echo(f"   (removed) {_clip(_text(change.get('step')))}", dim=True)

    def _on_compaction(self, event: Row) -> None:
        count = len(_list(event, "shortened"))
        self._echo(
            f"   (shortened {count} older observation(s) to bound the context; "
            f"now about {_num(event, 'estimate'):,} tokens)",
            dim=True,
        )

    def _on_run_end(self, event: Row) -> None:
        status = _text(event.get("status"))
        summary = (
            f"{_text(event.get('turns'))} turn(s), {_text(event.get('tool_calls'))} tool call(s), "
            f"{_num(_map(event, 'usage'), 'total_tokens', 'usage'):,} tokens, "
            f"{_num(event, 'duration_s'):.1f} s"
        )
        colour = "green" if status == "completed" else "red"
        self._echo(f"== {_clip(outcome_of(event))}: {summary}", fg=colour, bold=True)
        self._sandbox_totals(_map(event, "sandbox"))
        cost = cost_line(_map(event, "cost"))
        if cost:
            self._echo(f"   cost: {cost}", dim=True)
        if status != "completed":
            self._echo(f"   {_clip(_text(event.get('message')))}", fg=colour)
        else:
            self._provenance(event)
        pending = [_text(step) for step in _list(event, "plan_pending")]
        if pending:
            self._echo(f"   {_clip(pending_note(pending))}", fg="yellow")
        for path in _list(event, "artifacts"):
            self._echo(f"   artifact: {_clip(_text(path))}")
        if self._show_answer and event.get("answer"):
            self._echo("\n" + answer_text(event), multiline=True)

    def _provenance(self, event: Row) -> None:
        """Whether the answer's numbers were printed by an output, and by which."""
        if (verdict := verdict_line(event)) is not None:
            self._echo(f"   {verdict}", fg="green" if event.get("verified") else "yellow")
        for source in _list(event, "sources"):
            self._echo(f"     {source_line(_as_map(source, 'sources[]'))}", dim=True)
        if mislabelled := mislabelled_line(event):
            self._echo(f"   {mislabelled}", fg="yellow")

    def _sandbox_totals(self, sandbox: dict[str, Any]) -> None:
        if not _num(sandbox, "executions", "sandbox"):
            return
        self._echo(
            f"   sandbox: {_num(sandbox, 'executions', 'sandbox')} execution(s), "
            f"{_num(sandbox, 'execution_s', 'sandbox'):.2f} s, "
            f"{_num(sandbox, 'cpu_seconds', 'sandbox'):.2f} CPU s, "
            f"peak memory {_num(sandbox, 'peak_memory_bytes', 'sandbox') / 2**20:.0f} MiB"
        )

    def _on_state_restored(self, event: Row) -> None:
        """One line for the restore, then one per cell that differs or could not be restored.

        Every name and detail comes from code the model wrote: `_echo` escapes it, and
        each line is cut at `MAX_RESTORED_LINE` (a cell may name many variables).
        """
        restored = StateRestored.model_validate(event)  # a transcript line was validated as one
        colour = "red" if restored.status == "not_restored" else "cyan"
        self._echo(_cut(f"~  {restore_summary(restored)}"), fg=colour)
        for item in (*restored.differed, *restored.failed):
            self._echo(_cut(f"   {item.call_id}: {item.detail}"), dim=True)

    def _on_run_error(self, event: Row) -> None:
        self._echo(f"== error: {_clip(_text(event.get('error')))}", fg="red", bold=True)


def replay(path: Path, stream: TextIO) -> None:
    """Render a transcript file; a line that cannot be shown is a `TranscriptError` naming it.

    `read_transcript` checks each line against the typed events (UTF-8, JSON, the
    fields' types); the renderers' own shape checks are a second line of defence.
    """
    render = Progress(stream, show_answer=True, strict=True)
    for number, event in numbered_events(path):
        try:
            render(event)
        except EventShapeError as exc:
            raise TranscriptError(f"{path}:{number}: {exc}") from None


def verdict_line(event: Row) -> str | None:
    """`verified: ...` or `NOT VERIFIED: ...` for a completed run's end (None if older)."""
    verified = event.get("verified")
    traced = len(_list(event, "sources"))
    if verified is None or (verified and not traced):  # no number checked: nothing to claim
        return None
    if verified:
        return f"verified: every number checked was printed by an output ({traced} traced)"
    missing = ", ".join(_clip(_text(n)) for n in _list(event, "unsupported")[:20])
    return f"NOT VERIFIED: not printed by any output of the run: {_clip(missing)}"


def source_line(source: Row) -> str:
    """`41.0%  <- execution 2 [call_x], line 3: growth 0.41` (escaped, clipped)."""
    execution = source.get("execution")
    where = f"execution {_text(execution)}" if execution is not None else _text(source.get("tool"))
    return _clip(
        f"{_text(source.get('number'))}  <- {where} [{_text(source.get('call_id'))}], "
        f"line {_text(source.get('line'))}: {_text(source.get('text'))}"
    )


def one_line(text: Any) -> str:
    """The first informative line of an observation, escaped and clipped."""
    for line in _text(text).splitlines():
        if line.strip() and not _SECTION.match(line.strip()):
            return _clip(line.strip())
    return "(no output)"


def _cut(text: str) -> str:
    """One line of a restore's report, at most `MAX_RESTORED_LINE` (`_echo` escapes it)."""
    text = text.replace("\n", " ")
    return text if len(text) <= MAX_RESTORED_LINE else text[: MAX_RESTORED_LINE - 3] + "..."


def _clip(text: str, *, tabs: bool = False) -> str:
    """One escaped line of at most `MAX_LINE` characters (escapes count, so it stays bounded).

    `tabs` keeps tab characters (a line of code); every other control is escaped.
    """
    text = safe_text(text.replace("\n", " "), multiline=tabs)
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."


def _text(value: Any) -> str:
    """Any JSON value as text (None as empty); escaping happens when it is shown."""
    return "" if value is None else str(value)


def _map(parent: dict[str, Any], key: str, where: str = "") -> dict[str, Any]:
    return _as_map(parent.get(key), f"{where}.{key}" if where else key)


def _as_map(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise EventShapeError(f"{where} is not an object")
    return value


def _list(parent: dict[str, Any], key: str, where: str = "") -> list[Any]:
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise EventShapeError(f"{f'{where}.{key}' if where else key} is not a list")
    return value


def _num(parent: dict[str, Any], key: str, where: str = "") -> int | float:
    value = parent.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EventShapeError(f"{f'{where}.{key}' if where else key} is not a number")
    return value


def _arguments_lines(arguments: str) -> list[str]:
    """The code of an `execute_python` call, else the arguments as compact JSON."""
    try:
        parsed = json.loads(arguments or "{}")
    except (ValueError, RecursionError):
        return [_clip(f"(invalid JSON) {arguments}")]
    if isinstance(parsed, dict) and isinstance(parsed.get("code"), str):
        lines = parsed["code"].rstrip().splitlines() or [""]
        if len(lines) > MAX_CODE_LINES:
            cut = len(lines) - MAX_CODE_LINES
            lines = [*lines[:MAX_CODE_LINES], f"... ({cut} more lines)"]
        return [_clip(line, tabs=True) for line in lines]
    try:
        return [_clip(json.dumps(parsed, ensure_ascii=False))]
    except (ValueError, RecursionError):
        return [_clip(arguments)]


def cost_line(cost: Row) -> str:
    """`0.0123 EUR (estimated)` from a run's cost, "" when it has none or no price applied."""
    if not cost or (not cost.get("priced") and not cost.get("total")):
        return ""
    notes = ["estimated"] if cost.get("estimated") else []
    if not cost.get("priced"):
        notes.append("model unpriced")
    suffix = f" ({', '.join(notes)})" if notes else ""
    return f"{_num(cost, 'total', 'cost'):.4f} {_clip(_text(cost.get('currency')))}{suffix}"

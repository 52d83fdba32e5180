"""The one renderer of what the model reads after a tool call.

`render_execution` turns an `ExecutionResult` into the `execute_python`
observation: the error first (type and message), the trimmed traceback, the
output as the sandbox kept it (its cut markers stay), cut further to the
model's observation size when one is given, then resource notes that name the
limit and the knob. `render_failure` turns every failure that is not
the tool's own output (unknown tool, invalid arguments, denial, halt, a tool
error) into text. The gate, the transcript and the audit log all use these
two functions, so what they show is exactly what the model received.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sbx.sandbox.result import ExecutionResult
from sbx.sandbox.units import format_size
from sbx.tools.hints import execution_hint
from sbx.tools.observation_size import fit_sections

MAX_TRACEBACK_LINES = 40
FIX_AND_RETRY = "Fix the errors and try again."


@dataclass(frozen=True, kw_only=True)
class UnknownTool:
    """The model named a tool that is not registered."""

    name: str
    """The name the model sent."""
    available: Sequence[str]
    """The enabled tools, so the model can pick a real one."""


@dataclass(frozen=True, kw_only=True)
class InvalidArguments:
    """The arguments were not JSON, or did not match the tool's schema."""

    tool: str
    """The tool whose schema the arguments failed."""
    errors: Sequence[dict[str, Any]]
    """Pydantic's errors (type, loc, msg), without the input: it may hold secrets."""


@dataclass(frozen=True, kw_only=True)
class Denied:
    """The policy refused the call; `rule` is the dotted policy key that refused it."""

    tool: str
    """The tool that was refused."""
    rule: str
    """The dotted policy key, e.g. `tools.http_get.allowed_domains` or `quotas.total`."""
    reason: str
    """Why, in words the model can act on."""
    hint: str = ""
    """An optional pointer to what is allowed instead."""


@dataclass(frozen=True, kw_only=True)
class Halted:
    """The gate stopped the run; no further tool calls will run."""

    reason: str
    """What an operator must look at."""


@dataclass(frozen=True, kw_only=True)
class ToolError:
    """The tool ran and failed in a way the model may fix."""

    tool: str
    """The tool that failed."""
    message: str
    """The tool's own message (a `ToolFailure`), or the exception type and text."""


Failure = UnknownTool | InvalidArguments | Denied | Halted | ToolError


def render_failure(failure: Failure) -> str:
    """The exact text the model receives for a failure (and the audit log's `text`)."""
    match failure:
        case UnknownTool(name=name, available=available):
            names = ", ".join(available) if available else "(none)"
            return f"Unknown tool name: {name!r}. Available tools: {names}"
        case InvalidArguments(tool=tool, errors=errors):
            listed = json.dumps(list(errors), separators=(",", ":"), default=str)
            count = f"{len(errors)} validation error{'s' if len(errors) != 1 else ''}"
            return f"{count} for tool {tool!r}: {listed}\n{FIX_AND_RETRY}"
        case Denied(tool=tool, rule=rule, reason=reason, hint=hint):
            text = f"Call to {tool!r} denied by policy rule {rule}: {reason}"
            return f"{text} {hint}".rstrip()
        case Halted(reason=reason):
            return f"The run was halted by policy: {reason}. No further tool calls will run."
        case ToolError(tool=tool, message=message):
            return f"Error from {tool}: {message}"
    raise TypeError(f"Unknown failure type: {type(failure).__name__}")  # pragma: no cover


SECTIONS = ("[stdout]", "[stderr]", "[notes]")
"""The headers of an `execute_python` observation's sections, in the order they are written."""


def render_execution(result: ExecutionResult, *, max_chars: int | None = None) -> str:
    """The `execute_python` observation: error first, output next, resource notes last.

    With `max_chars`, stdout and stderr are cut to their head and tail so the whole
    observation fits (`sbx.tools.observation_size`); the error, notes and usage stay whole.
    """
    head: list[str] = []
    if result.error is not None:
        head.append(f"Error: {result.error.type}: {result.error.message}")
        if result.error.traceback.strip():
            head.append(_trim_traceback(result.error.traceback))
    tail: list[str] = []
    notes = resource_notes(result)
    if notes:
        tail.append("[notes]\n" + "\n".join(f"- {note}" for note in notes))
    hint = execution_hint(result)  # the last line: a removed API's replacement, a missing module
    fixed = sum(len(part) + 1 for part in head + tail) + len(hint or "") + 100
    stdout, stderr = fit_sections(
        fixed, result.stdout.rstrip(), result.stderr.rstrip(), max_chars
    )
    parts = list(head)
    if result.stdout:
        parts.append(f"[stdout]\n{stdout}")
    if result.stderr:
        parts.append(f"[stderr]\n{stderr}")
    parts.extend(tail)
    if not parts:
        parts.append("(no output: the code ran without error; print() what you need to see)")
    parts.append(usage_line(result))
    if hint is not None:
        parts.append(hint)
    return "\n".join(parts)


def usage_line(result: ExecutionResult) -> str:
    """Wall time, CPU seconds and peak memory of one execution (what ops teams bill)."""
    figures = [f"{result.duration_s:.2f} s wall"]
    if result.cpu_seconds is not None:
        figures.append(f"{result.cpu_seconds:.2f} s CPU")
    if result.peak_memory_bytes is not None:
        figures.append(f"peak memory {format_size(result.peak_memory_bytes)}")
    return "[resources] " + ", ".join(figures)


def _trim_traceback(traceback: str) -> str:
    """Keep the first line and the last frames: the error is at the bottom."""
    lines = traceback.rstrip().splitlines()
    if len(lines) <= MAX_TRACEBACK_LINES:
        return "\n".join(lines)
    keep = MAX_TRACEBACK_LINES - 1
    cut = len(lines) - 1 - keep
    return "\n".join([lines[0], f"  ... ({cut} traceback lines cut) ...", *lines[-keep:]])


def resource_notes(result: ExecutionResult) -> list[str]:
    """The sandbox's notes on limits hit and state lost, then the files produced.

    Limit notes are derived once, by the sandbox, from the execution's final
    figures (`ExecutionResult.notes`); this adds only what the model needs
    besides them: an exit code without an error, and the files saved.
    """
    notes = list(result.notes)
    limit_hit = result.timed_out or result.oom_killed or result.state_reset
    if not result.ok and result.error is None and not limit_hit:
        notes.append(f"exit code {result.exit_code}")
    if result.artifacts:
        saved = ", ".join(f"{a.name} ({format_size(a.size)})" for a in result.artifacts)
        notes.append(f"artifacts saved: {saved}")
    return notes


def section_of(observation: str, header: str) -> str:
    """One section (`[stdout]`, `[stderr]`) of an `execute_python` observation, else "".

    The reverse of `render_execution`, for transcripts written before the output was
    recorded beside the observation (best effort: a program that prints a line `[stderr]`
    ends its stdout there).
    """
    lines = observation.splitlines()
    if header not in lines:
        return ""
    kept: list[str] = []
    for line in lines[lines.index(header) + 1 :]:
        if line in SECTIONS or line.startswith("[resources] "):
            break
        kept.append(line)
    return "\n".join(kept) + ("\n" if kept else "")


def error_type_of(observation: str) -> str | None:
    """The exception class an `execute_python` observation starts with (`Error: T: ...`)."""
    first = observation.split("\n", 1)[0]
    if not first.startswith("Error: "):
        return None
    return first.removeprefix("Error: ").split(":", 1)[0] or None

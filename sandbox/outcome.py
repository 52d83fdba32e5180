"""Turn the runner's result frame (or its absence) into an `ExecutionResult` with plain notes.

The notes name the limit that was hit and the knob that changes it, so
both the model and the operator know what happened and what to do.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from sbx.sandbox.accounting import Snapshot, cpu_seconds_between, oom_between
from sbx.sandbox.limits import Limits
from sbx.sandbox.protocol import MAX_REFUSED_LISTED, DisplayFrame, RefusedFrame, ResultFrame
from sbx.sandbox.result import (
    Artifact,
    DisplayResult,
    ExecutionError,
    ExecutionResult,
    RefusedArtifact,
)
from sbx.sandbox.units import format_size

RESET = "variables were reset"
MAX_LISTED_NAME = 300
"""Characters of a refused name kept in the result (names come from the code's `/output`)."""


def resource_notes(result: ExecutionResult, limits: Limits) -> list[str]:
    """One sentence per limit hit, naming the limit and the knob that changes it.

    This is the one wording of these notes: the CLI prints them, and the
    `execute_python` observation (`tools/observation.py`) shows them to the model.
    """
    reset = f"; {RESET}" if result.state_reset else ""
    notes: list[str] = []
    if result.timed_out:
        notes.append(
            f"timed out: the execution passed the {limits.timeout:g} s wall-clock limit and "
            f"was killed{reset} (limit: `timeout` in the policy's [sandbox] table, or --timeout)"
        )
    if result.oom_killed:
        notes.append(
            f"killed: memory limit {format_size(limits.memory)} reached{reset} "
            "(limit: `memory` in the policy's [sandbox] table, or --memory)"
        )
    elif result.state_reset and not result.timed_out:
        notes.append(
            f"state reset: the interpreter exited (status {result.exit_code}); "
            "earlier variables are gone"
        )
    if result.stdout_dropped_bytes:
        notes.append(
            f"output truncated: {result.stdout_dropped_bytes} bytes of stdout cut from the "
            f"middle (keeps {format_size(limits.stdout_bytes)}; print less, or summarise)"
        )
    if result.stderr_dropped_bytes:
        notes.append(
            f"output truncated: {result.stderr_dropped_bytes} bytes of stderr cut from the "
            f"middle (keeps {format_size(limits.stderr_bytes)})"
        )
    if result.refused_artifacts or result.refused_unlisted:
        refused = ", ".join(f"{_quoted(r.name)} ({r.reason})" for r in result.refused_artifacts)
        more = f"and {result.refused_unlisted} more" if result.refused_unlisted else ""
        notes.append(f"artifacts refused: {', '.join(part for part in (refused, more) if part)}")
    return notes


def _quoted(name: str) -> str:
    """A refused name in quotes, anything non-printable escaped (a forged frame's too).

    Names the runner refused arrive escaped already; backslashes are not doubled, so
    they read the same here as in the runner's report.
    """
    return "'" + "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in name) + "'"


def listed_refusals(
    runner: list[RefusedFrame], runner_more: int, host: list[RefusedArtifact]
) -> tuple[list[RefusedArtifact], int]:
    """The refusals to show and how many more there were (the runner's first, then the host's).

    At most MAX_REFUSED_LISTED, with shortened names. The code controls what `/output`
    holds, and this list reaches the model, the transcript and the audit log: it stays
    short whatever the code did.
    """
    everything = [RefusedArtifact(name=r.name, reason=r.reason) for r in runner] + host
    listed = [
        RefusedArtifact(name=shorten(item.name, MAX_LISTED_NAME), reason=shorten(item.reason, 200))
        for item in everything[:MAX_REFUSED_LISTED]
    ]
    return listed, runner_more + max(len(everything) - MAX_REFUSED_LISTED, 0)


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def build_result(
    frame: ResultFrame,
    *,
    artifacts: list[Artifact],
    refused: list[RefusedArtifact],
    duration: float,
    persistent: bool = True,
) -> ExecutionResult:
    """Combine a result frame with the artifacts the host accepted (notes come later)."""
    listed, unlisted = listed_refusals(frame.refused, frame.refused_more, refused)
    error = None
    if frame.error is not None:
        error = ExecutionError(
            type=frame.error.type, message=frame.error.message, traceback=frame.error.traceback
        )
    return ExecutionResult(
        stdout=frame.stdout,
        stderr=frame.stderr,
        exit_code=frame.exit_code,
        error=error,
        timed_out=frame.timed_out,
        oom_killed=frame.oom_killed,
        truncated=bool(frame.stdout_dropped or frame.stderr_dropped),
        stdout_dropped_bytes=frame.stdout_dropped,
        stderr_dropped_bytes=frame.stderr_dropped,
        state_reset=frame.state_reset and persistent,
        duration_s=round(duration, 4),
        cpu_seconds=frame.cpu_seconds,
        peak_memory_bytes=frame.peak_memory_bytes,
        artifacts=artifacts,
        refused_artifacts=listed,
        refused_unlisted=unlisted,
        results=[display_result(item) for item in frame.results],
        results_dropped=frame.results_dropped,
        execution_count=frame.execution_count,
    )


TEXT_FORMATS = {"text/plain": "text", "text/html": "html", "text/markdown": "markdown",
                "image/svg+xml": "svg", "text/latex": "latex"}
BINARY_FORMATS = {"image/png": "png", "image/jpeg": "jpeg", "application/pdf": "pdf"}
MAX_TEXT_CHARS = 100_000
"""Characters of one textual format kept (the runner's own bound); a longer one is dropped."""
MAX_JSON_CHARS = 100_000


def display_result(item: DisplayFrame) -> DisplayResult:
    """One result of the runner's frame, with only well-formed formats within their bounds."""
    fields: dict[str, Any] = {"is_main_result": item.main, "data": item.data,
                              "chart": item.chart}
    for mime, name in TEXT_FORMATS.items():
        value = item.bundle.get(mime)
        if isinstance(value, str) and len(value) <= MAX_TEXT_CHARS:
            fields[name] = value
    for mime, name in BINARY_FORMATS.items():
        value = item.bundle.get(mime)
        if isinstance(value, str) and _is_base64(value):
            fields[name] = value
    value = item.bundle.get("application/json")
    if isinstance(value, (dict, list)) and len(json.dumps(value)) <= MAX_JSON_CHARS:
        fields["json_data"] = value
    return DisplayResult(**fields)


def _is_base64(text: str) -> bool:
    """Strict base64 (no other characters): it goes into `data:` URLs as it is."""
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def lost_runner_result(
    exc: Exception,
    *,
    oom: bool,
    duration: float,
    timed_out: bool,
    persistent: bool = True,
) -> ExecutionResult:
    """The result when the runner stopped answering and its container was replaced."""
    return ExecutionResult(
        exit_code=124 if timed_out else (137 if oom else 1),
        timed_out=timed_out,
        oom_killed=oom,
        state_reset=persistent,
        duration_s=round(duration, 4),
        notes=[f"the sandbox container was replaced ({str(exc)[:200]})"],
    )


def merge_host_figures(
    result: ExecutionResult, before: Snapshot, after: Snapshot, peak: int | None
) -> None:
    """Prefer the host's view of the cgroup over what the runner reported.

    The host's counters cannot be forged by the code in the container, and
    they exist under gVisor too, where the runner sees no cgroup at all. An
    OOM kill the host saw but the runner missed (a child process, or the
    runner itself) becomes `oom_killed` when the execution failed. `peak` is
    the high-water mark since it was last restarted, or None when it could not be.
    """
    cpu = cpu_seconds_between(before, after)
    if cpu is not None:
        result.cpu_seconds = cpu
    if peak:
        result.peak_memory_bytes = peak
    if oom_between(before, after) and not result.oom_killed and not result.ok:
        result.oom_killed = True
        if not result.timed_out:
            result.exit_code = 137

"""The executions a restore re-runs, read from a conversation's record (`sbx.agent.core.restore`).

Which executions built the state (the successful ones since the state was
last lost without being restored) and the names each binds (what may differ
when one is not restored as recorded).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

from sbx.agent.core.events import Event, ModelReplied, RunStart, StateRestored, ToolResult
from sbx.agent.provenance.record import code_of
from sbx.tools.outcome import ToolOutcome


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One recorded execution that built the conversation's state."""

    call_id: str
    """The recorded call's id (the model's); the replay's audit call id is `restore-<it>`."""
    code: str
    """The program as it ran."""
    stdout: str = ""
    """What it printed then: the re-run must print the same (see the module)."""
    error_type: str | None = None
    """Always None for a cell that built state (failed calls are not replayed)."""
    artifacts: tuple[str, ...] = ()
    """Host paths of the files it left in `/output` when it ran."""


def cells_of(events: Iterable[Event]) -> list[Cell]:
    """The executions a replay must re-run, from a conversation's events (see the module).

    A run that began with `sandbox_reset` lost what came before unless its
    `state_restored` says it was restored (fully or partly).
    """
    cells: list[Cell] = []
    held: list[Cell] = []
    calls: dict[str, str] = {}
    for event in events:
        if isinstance(event, RunStart):
            calls = {}
            if event.sandbox_reset:
                held, cells = cells, []
        elif isinstance(event, StateRestored):
            cells = held + cells if event.status != "not_restored" else []
            held = []
        elif isinstance(event, ModelReplied):
            calls.update(_codes(event.message))
        elif isinstance(event, ToolResult):
            cell = _cell(event, calls)
            if cell is not None:
                cells.append(cell)
    return cells


def _codes(message: dict[str, object]) -> dict[str, str]:
    """`{call id: code}` of the `execute_python` calls of one assistant message."""
    found: dict[str, str] = {}
    for call in message.get("tool_calls") or []:  # type: ignore[attr-defined]
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and function.get("name") == "execute_python":
            code = code_of(str(function.get("arguments")))
            if code is not None:
                found[str(call.get("id"))] = code
    return found


def _cell(event: ToolResult, calls: dict[str, str]) -> Cell | None:
    record = event.execution
    code = calls.get(event.call_id)
    if event.name != "execute_python" or event.status != "ok" or event.failed:
        return None
    if record is None or code is None or record.error_type or record.timed_out:
        return None
    if record.oom_killed or record.state_reset:
        return None
    return Cell(call_id=event.call_id, code=code, stdout=record.stdout,
                artifacts=tuple(event.artifacts))


def assigned_names(code: str) -> list[str]:
    """The top-level names a program binds (assignments, imports, defs, loop targets)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.append(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.extend((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return list(dict.fromkeys(name for name in names if name != "_"))


def cell_of(call_id: str, code: object, outcome: ToolOutcome) -> Cell | None:
    """A live execution as a cell to replay later (a face without a transcript: MCP)."""
    result = outcome.execution
    if outcome.status != "ok" or result is None or not result.ok or not isinstance(code, str):
        return None
    return Cell(call_id=call_id, code=code, stdout=result.stdout,
                artifacts=tuple(artifact.path for artifact in result.artifacts))

"""The executions a restore re-runs, read from a conversation's record (`sbx.agent.core.restore`).

Which executions built the state (the successful ones since the state was
last lost without being restored) and the names each binds (what may differ
when one is not restored as recorded).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

from sbx.agent.core.events import Event
from sbx.agent.core.history import history_of
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

    The conversation's history (`sbx.agent.core.history`) says which: every execution
    that built the state since the state was last lost for good.
    """
    return [
        Cell(call_id=execution.call_id, code=execution.code, stdout=execution.stdout,
             artifacts=execution.artifacts)
        for execution in history_of(events).state_cells()
    ]


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

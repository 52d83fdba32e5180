"""The conversation's history: where its state was lost, and which losses a restore rebuilt.

Built from typed events as the core writes them (the end-to-end tests in
`test_history_export.py` record them from real runs): export, re-run and
restore read this one answer to "what did the interpreter hold here?".
"""

from __future__ import annotations

import json

from sbx.agent.core.events import (
    Event,
    ExecutionRecord,
    ModelReplied,
    RunEnd,
    RunStart,
    StateRestored,
    ToolResult,
)
from sbx.agent.core.history import history_of
from sbx.agent.core.restore import cells_of, forgotten


def _cell(run: str, call: str, code: str, **record: object) -> list[Event]:
    message = {"role": "assistant", "tool_calls": [{"id": call, "function": {
        "name": "execute_python", "arguments": json.dumps({"code": code})}}]}
    failed = bool(record.get("timed_out") or record.get("error_type"))
    return [ModelReplied(run_id=run, turn=1, message=message),
            ToolResult(run_id=run, turn=1, call_id=call, name="execute_python", status="ok",
                       failed=failed, content="", execution=ExecutionRecord.model_validate(
                           {"stdout": f"{call}\n", **record}))]


def _restored(run: str, status: str, cause: str) -> StateRestored:
    return StateRestored.model_validate({"run_id": run, "status": status, "cause": cause,
                                         "reason": cause})


def _start(run: str, cause: str = "") -> RunStart:
    return RunStart(run_id=run, sandbox_reset=bool(cause), reset_cause=cause)


def test_a_restored_loss_is_no_boundary_and_a_reset_is_one():
    events: list[Event] = [
        _start("r1"), *_cell("r1", "a", "a = 1"), *_cell("r1", "k", "loop", timed_out=True,
                                                          state_reset=True),
        *_cell("r1", "b", "b = 2"),  # after the kill: a fresh interpreter, for now
        RunEnd(run_id="r1", status="completed"),
        _start("r2", "timeout"), _restored("r2", "restored", "timeout"),
        *_cell("r2", "c", "print(a + b)"),
        RunEnd(run_id="r2", status="completed"),
        _start("r3", "idle_release"), _restored("r3", "not_restored", "idle_release"),
        *_cell("r3", "d", "d = 4"),
        forgotten(),  # the user's reset between runs
        _start("r4"), *_cell("r4", "e", "print(1)"),
        RunEnd.model_validate({"run_id": "r4", "status": "needs_input", "question": "Which?"}),
    ]

    runs = history_of(events).runs
    executions = [e for run in runs for e in run.executions]

    assert [e.call_id for e in executions] == ["a", "k", "b", "c", "d", "e"]
    assert [e.reset_before for e in executions] == [False, False, False, False, True, True]
    assert executions[1].unfinished and not executions[1].built_state
    assert executions[2].loss_before is not None
    assert executions[2].loss_before.cause == "timeout"  # the kill, later restored
    assert executions[4].loss_before.cause == "idle_release"  # never restored: a boundary
    assert executions[5].loss_before.cause == "reset"
    assert runs[-1].needs_input == "Which?"
    assert [cell.call_id for cell in cells_of(events)] == ["e"]  # since the reset
    assert [cell.call_id for cell in cells_of(events[:13])] == ["a", "b", "c"]  # not the killer

"""The scripted turns of the plan's acceptance: a plan of three steps kept current across a failure.

Shared by the core and CLI tests (`test_plan_run.py`) and the browser test (`test_web_plan.py`).
"""

from __future__ import annotations

from sbx.agent.testing.scripted_model import Reply, assistant, tool_call

EXEC = "execute_python"
LOAD = "load the numbers"
SUM_BY_KEY = "sum by the 'group' column"
SUM_BY_ROW = "sum the rows"
REPORT = "write the total to a file"


def plan_call(*steps: tuple[str, str], note: str = "") -> Reply:
    """An `update_plan` call with these (description, status) steps, each using execute_python."""
    return tool_call("update_plan", steps=[
        {"description": text, "status": status, "tool": EXEC} for text, status in steps
    ], note=note)


def planned_turns() -> list[Reply]:
    """Three steps; the second fails; the plan drops it and adds another; one step stays open."""
    return [
        plan_call((LOAD, "in_progress"), (SUM_BY_KEY, "pending"), (REPORT, "pending")),
        tool_call(EXEC, code="rows = [{'n': 1}, {'n': 2}, {'n': 3}]\nprint(len(rows))"),
        tool_call(EXEC, code="print(sum(r['group'] for r in rows))"),
        plan_call((LOAD, "done"), (SUM_BY_KEY, "dropped"), (SUM_BY_ROW, "in_progress"),
                  (REPORT, "pending"), note="there is no 'group' column"),
        tool_call(EXEC, code="total = sum(r['n'] for r in rows)\nprint(total)"),
        plan_call((LOAD, "done"), (SUM_BY_KEY, "dropped"), (SUM_BY_ROW, "done"),
                  (REPORT, "pending")),
        assistant("The total is 6."),
    ]

"""Reading tool outcomes for the loop: did the call fail, the same way as before, with files?

The observation text itself is the tools layer's (one renderer); the
agent adds nothing to it. What the agent adds is one harness message after a
tool fails the same way `REPEAT_LIMIT` times in a row, telling the model to
change approach (smolagents' "try a completely different approach"). It is
the gentle first step; the gate's circuit breaker (`sbx.tools.breaker`,
`quotas.max_identical_failures`, 5 by default) is the stop, and counts "the
same way" with the same signature. When the breaker trips on a call, its
observation already says so and no notice is added.

An `execute_python` outcome carries its `ExecutionResult` (`ToolOutcome.execution`),
typed by the tools layer, so the loop reads the error, the artifacts and the
figures without importing `sandbox` itself (DESIGN: only the application layer
and the faces do).
"""

from __future__ import annotations

from collections.abc import Sequence

from sbx.agent.core.state import RunState
from sbx.tools.breaker import BREAKER_RULE
from sbx.tools.breaker import failure_signature as breaker_signature
from sbx.tools.outcome import ToolOutcome

REPEAT_LIMIT = 3


def failure_signature(outcome: ToolOutcome) -> str | None:
    """What makes two failures "the same": the gate's breaker's definition, so both agree."""
    return breaker_signature(outcome.status, outcome.text, outcome.execution)


def artifact_paths(outcome: ToolOutcome) -> list[str]:
    """Host paths of the files an execution copied out of `/output`."""
    return [artifact.path for artifact in outcome.artifacts]


def count_execution(state: RunState, outcome: ToolOutcome) -> None:
    """Add an execution's wall time, CPU seconds and peak memory to the run's totals."""
    result = outcome.execution
    if result is not None:
        state.sandbox.add(result.duration_s, result.cpu_seconds, result.peak_memory_bytes)


def repeated_failure_notices(state: RunState, outcomes: Sequence[ToolOutcome]) -> list[str]:
    """Update the per-tool failure streaks; a notice for each that reaches `REPEAT_LIMIT`."""
    notices: list[str] = []
    for outcome in outcomes:
        signature = failure_signature(outcome)
        if signature is None:
            state.failure_streaks.pop(outcome.name, None)
            continue
        previous, count = state.failure_streaks.get(outcome.name, ("", 0))
        count = count + 1 if previous == signature else 1
        state.failure_streaks[outcome.name] = (signature, count)
        if count % REPEAT_LIMIT == 0 and outcome.rule != BREAKER_RULE:
            notices.append(notice_text(outcome.name, signature, count))
    return notices


def notice_text(tool: str, signature: str, count: int) -> str:
    """The harness message after repeated identical failures."""
    shown = signature if len(signature) <= 200 else signature[:199] + "…"
    return (
        f"[sbx] The last {count} calls to {tool} failed the same way ({shown}). "
        "Repeating it will not help. Step back and try a completely different approach: "
        "check the names and types you rely on, print intermediate values, or simplify."
    )

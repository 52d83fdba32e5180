"""The circuit breaker: a tool that keeps failing the same way is disabled for the rest of the run.

A model that resubmits the call that just failed, unchanged in effect, spends
the budget and learns nothing. After `quotas.max_identical_failures` failures
of one tool in a row, each with the same signature, the gate refuses every
later call of that tool in the run (`denied`, rule
`quotas.max_identical_failures`), and the observation of the failure that
tripped it says so. A success, or a different failure, starts the count anew.

The agent's gentler cousin (`sbx.agent.core.feedback`: a "try another approach"
notice after `REPEAT_LIMIT` identical failures) uses the same
`failure_signature`, so both agree on what "the same way" means; it fires
first, the breaker after.
"""

from __future__ import annotations

import threading

from sbx.sandbox.result import ExecutionResult
from sbx.tools.outcome import CallStatus

BREAKER_RULE = "quotas.max_identical_failures"


def failure_signature(
    status: CallStatus, text: str, execution: ExecutionResult | None
) -> str | None:
    """What makes two failures "the same": the error type and message, else the first line.

    None when the call did not fail (a status `ok` whose code, if any, ran cleanly).
    """
    if status == "ok" and (execution is None or execution.ok):
        return None
    if execution is not None and execution.error is not None:
        return f"{execution.error.type}: {execution.error.message}"
    lines = [line for line in text.splitlines() if line.strip()]
    return f"{status}: {lines[0] if lines else ''}"


class Breaker:
    """Per-tool streaks of identical failures in one run; thread-safe."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._streaks: dict[str, tuple[str, int]] = {}
        self._open: set[str] = set()

    def is_open(self, name: str) -> bool:
        """Whether `name` is disabled for the rest of the run."""
        with self._lock:
            return name in self._open

    def record(self, name: str, signature: str | None) -> bool:
        """Count one ran call of `name`; True when this failure disables the tool."""
        with self._lock:
            if signature is None:
                self._streaks.pop(name, None)
                return False
            previous, count = self._streaks.get(name, ("", 0))
            count = count + 1 if previous == signature else 1
            self._streaks[name] = (signature, count)
            if self.limit is None or count < self.limit or name in self._open:
                return False
            self._open.add(name)
            return True


def tripped_text(name: str, limit: int) -> str:
    """What the model reads after the failure that disabled the tool."""
    return (
        f"[sbx] {name} failed the same way {limit} times in a row, so it is now disabled for "
        f"the rest of this run ({BREAKER_RULE} = {limit}). Answer with what you have, say what "
        "you could not compute, or use another tool."
    )

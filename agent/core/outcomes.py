"""One vocabulary of outcomes: the words every face shows for how a call, a run or a sandbox ended.

The CLI's progress, the service's event stream, the web page and the notes
the model reads must never disagree about what happened. So the words are
made here, once: the core puts them on the events it emits (`tool_result.
outcome`, `run_end.outcome`, `state_restored.cause`), and a face shows the
word it is given instead of deriving its own from status fields.

A call through the gate ends in one of `CALL_OUTCOMES`; a run in one of
`RUN_OUTCOMES` (a word for each `RunResult.status`); a sandbox's state is
lost for one of `LOSS_CAUSES`, each with the phrase people and the model read.
The glossary in `docs/architecture.md` defines the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

CALL_OUTCOMES = (
    "ok", "error", "timed out", "memory limit", "killed", "cancelled", "denied",
    "invalid arguments", "unknown tool", "halted",
)
"""How one tool call ended, in the words every face shows."""

_REFUSED = {"denied": "denied", "invalid": "invalid arguments", "unknown": "unknown tool",
            "halted": "halted", "cancelled": "cancelled"}


def call_outcome(status: str, *, failed: bool, execution: object) -> str:
    """The word for one call: the gate's `status` first, then what its execution did.

    `execution` is the execution's record (`tool_result.execution`) as plain data,
    None (or anything not a mapping) for a tool that runs no code.
    """
    if status in _REFUSED:
        return _REFUSED[status]
    if isinstance(execution, Mapping):
        if execution.get("timed_out"):
            return "timed out"
        if execution.get("oom_killed"):
            return "memory limit"
        if execution.get("state_reset") and not execution.get("error_type"):
            return "killed"
    return "error" if failed or status != "ok" else "ok"


RUN_OUTCOMES: dict[str, str] = {
    "completed": "completed",
    "step_limit": "limit reached (steps)",
    "time_limit": "limit reached (wall time)",
    "token_limit": "limit reached (tokens)",
    "tool_limit": "limit reached (tool calls)",
    "cost_limit": "limit reached (cost)",
    "budget_exceeded": "limit reached (spending budget)",
    "gate_halt": "halted by the gate",
    "truncated": "answer cut off",
    "needs_input": "needs input",
    "model_error": "model error",
    "cancelled": "cancelled",
    "interrupted": "interrupted by a restart",
    "error": "error",
}
"""The word for each way a run ends (`RunResult.status`, and the store's `interrupted`)."""


def run_outcome(status: str) -> str:
    """The word for a run's ending; an unknown status is shown as it is."""
    return RUN_OUTCOMES.get(status, status)


def outcome_of(event: Mapping[str, Any]) -> str:
    """The word a `tool_result` or `run_end` carries; derived the same way for older files."""
    word = event.get("outcome")
    if isinstance(word, str) and word:
        return word
    status = str(event.get("status") or "")
    if event.get("type") == "run_end":
        return run_outcome(status)
    return call_outcome(status, failed=bool(event.get("failed")), execution=event.get("execution"))


LossCause = Literal[
    "timeout", "memory_limit", "killed", "cancel", "idle_release", "restart", "reset",
    "replaced",
]
"""Why a sandbox's state was lost."""

LOSS_CAUSES: dict[str, str] = {
    "timeout": "a timeout",
    "memory_limit": "a kill at the memory limit",
    "killed": "the interpreter stopped (killed or exited)",
    "cancel": "a cancel by the user",
    "idle_release": "an idle release",
    "restart": "a restart",
    "reset": "a reset the user asked for",
    "replaced": "the sandbox was replaced",
}
"""The phrase each cause reads as, in every face and in the model's notes."""


def loss_text(cause: str, detail: str = "") -> str:
    """`an idle release: idle for more than 120 s`: the cause's phrase and its detail."""
    words = LOSS_CAUSES.get(cause, cause)
    return f"{words}: {detail}" if detail else words


def execution_loss(execution: Mapping[str, Any]) -> LossCause:
    """Why an execution that reset its interpreter lost it (a limit, or the runner stopped)."""
    if execution.get("timed_out"):
        return "timeout"
    if execution.get("oom_killed"):
        return "memory_limit"
    return "killed"


def idle_reason(idle_s: float) -> str:
    """Why an idle release removed a sandbox (the model's and the client's note)."""
    return loss_text("idle_release", f"idle for more than {idle_s:g} s")


RESET_NOTE = "[sbx] The sandbox was reset"
"""How every note of a reset begins (`reset_note`), for the model and for tests."""


def reset_note(reason: str, *, before: str = "before this call") -> str:
    """What the model is told when its sandbox was replaced since it last ran code."""
    return (
        f"{RESET_NOTE} {before} ({reason}): variables, imports and files written in the "
        "sandbox by earlier calls are gone (artifacts already copied out are kept). "
        "Re-run what you need."
    )

"""What one run changes (`RunState`), how it ended (`Ending`), and what it returns (`RunResult`).

All mutable run data lives in `RunState`: a configured agent (settings,
model client, gate) can serve many runs because nothing of a run is kept on
them. Every way out of the loop is one of the `Status` values:

    completed     the model answered without asking for a tool
    step_limit    the next request would pass Budget.max_turns
    time_limit    the run's wall time reached Budget.max_wall_time
    token_limit   used plus the next request's estimate would pass Budget.max_total_tokens
    tool_limit    a reply asked for more tool calls than a turn or the run may make
    gate_halt     the tool gate halted the run (a policy event an operator must see,
                  e.g. too many denied calls); no tool can run any more
    truncated     the model's answer was cut off (finish_reason `length` or `content_filter`)
    needs_input   the model asked the user (`ask_user`) and no one could answer now: the
                  result carries the question; the face continues the run with the answer
    model_error   the endpoint failed after its retries, or replied unusably
    cancelled     Ctrl-C (or SIGTERM)

Only `completed` carries an answer; a budget end is never presented as one. A
completed answer says whether every number in it was printed by the run's code
(`verified`, `sources`, `unsupported`: see `agent.provenance`).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from sbx.agent.core.outcomes import run_outcome
from sbx.agent.model.reply import TokenUsage
from sbx.agent.provenance.parts import PartsCheck
from sbx.agent.provenance.trace import Output, Provenance, Source
from sbx.tools.builtin.plan import PlanStep

Status = Literal[
    "completed",
    "step_limit",
    "time_limit",
    "token_limit",
    "tool_limit",
    "cost_limit",
    "budget_exceeded",
    "gate_halt",
    "truncated",
    "needs_input",
    "model_error",
    "cancelled",
]
STATUSES: tuple[Status, ...] = typing.get_args(Status)


@dataclass(kw_only=True)
class SandboxUsage:
    """Totals over a run's executions: the figures ops teams bill and alert on."""

    executions: int = 0
    """Programs run in the sandbox."""
    execution_s: float = 0.0
    """Wall-clock seconds spent executing, summed."""
    cpu_seconds: float = 0.0
    """CPU seconds used by the sandbox, summed (from the container's cgroup)."""
    peak_memory_bytes: int = 0
    """Highest memory use of any one execution."""
    gb_seconds: float = 0.0
    """Each execution's peak memory (GiB) times its wall time, summed (what memory costs)."""

    def add(self, wall: float, cpu: float | None, peak: int | None) -> None:
        """Count one execution."""
        self.executions += 1
        self.execution_s += wall
        self.cpu_seconds += cpu or 0.0
        self.peak_memory_bytes = max(self.peak_memory_bytes, peak or 0)
        self.gb_seconds += (peak or 0) / 2**30 * wall

    def as_dict(self) -> dict[str, Any]:
        """For the transcript and `--json`."""
        return {
            "executions": self.executions,
            "execution_s": round(self.execution_s, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
            "peak_memory_bytes": self.peak_memory_bytes,
            "gb_seconds": round(self.gb_seconds, 6),
        }


@dataclass(kw_only=True, frozen=True)
class PriorWork:
    """Sandbox work done for a run before its loop began (a restore's replay), charged to it.

    It counts in the run's usage, cost, budgets and quotas like the run's own executions:
    work the run caused is never free because it ran before the first model request.
    """

    sandbox: SandboxUsage
    """The executions' wall time, CPU seconds and memory."""
    artifacts: tuple[str, ...] = ()
    """Host paths of the files it kept (recorded as the run's artifacts)."""


@dataclass(kw_only=True, frozen=True)
class Observation:
    """Where a tool observation sits in the conversation, for shortening old context."""

    index: int
    """Position of the `tool` message in `RunState.messages`."""
    tool: str
    """The tool that produced it."""
    failed: bool
    """The call failed (refused, tool error, or code that raised, timed out or was killed)."""
    turn: int
    """The model turn whose tool calls produced it."""


@dataclass(kw_only=True)
class RunState:
    """Everything that changes during one run, and nothing else."""

    run_id: str
    """Shared by the transcript, the audit log and the sandbox's container labels."""
    started: float
    """`time.monotonic()` when the run began; the wall-time budget counts from here."""
    messages: list[dict[str, Any]]
    """The conversation as the model will next see it. Old observations in it may have
    been shortened to bound the context; the transcript keeps every one whole."""
    turns: int = 0
    """Model requests made (answered or not)."""
    tool_calls: int = 0
    """Tool calls sent to the gate, whatever their verdict."""
    usage: TokenUsage = field(default_factory=TokenUsage)
    """Tokens used so far, summed from every reply's usage."""
    observations: list[Observation] = field(default_factory=list)
    """Every tool message appended, oldest first."""
    failure_streaks: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Per tool: the signature of its last failure and how many times in a row it happened."""
    shortened: int = 0
    """Observations shortened so far to keep the context under `context_tokens`."""
    artifacts: list[str] = field(default_factory=list)
    """Host paths of the files the sandbox copied out of `/output`, in order."""
    sandbox: SandboxUsage = field(default_factory=SandboxUsage)
    """Executions, CPU seconds and peak memory of the run's sandbox, so far."""
    question: str = ""
    """The question as the model received it: numbers it gives are not the answer's claims."""
    history: int = 0
    """How many of `messages` came from the conversation's earlier runs."""
    outputs: list[Output] = field(default_factory=list)
    """What the answer may quote: each execution's stdout, each `calculate` result."""
    executions: int = 0
    """`execute_python` calls the gate ran (numbers the outputs: execution 1, 2, ...)."""
    pending: PendingAnswer | None = None
    """The answer whose unsupported numbers the validation turn asked about (asked once)."""
    plan: tuple[PlanStep, ...] = ()
    """The model's current plan (`update_plan`); a follow-up starts from the last run's."""
    plan_revision: int = 0
    """Plans saved in the conversation so far (the last one's number; 0: none yet)."""
    plan_inherited: int = 0
    """The revision the run started from: a plan this run never revised is an earlier
    question's, and its open steps are not this answer's to warn about."""


@dataclass(kw_only=True, frozen=True)
class PendingAnswer:
    """An answer sent back once for its unsupported numbers."""

    answer: str
    """The answer as the model first gave it."""
    provenance: Provenance
    """Its numbers' check."""


@dataclass(kw_only=True, frozen=True)
class Ending:
    """Why the run stopped: a status and a sentence an operator can act on."""

    status: Status
    """One of the closed set above."""
    message: str
    """For limits: which limit, its value and the flag that changes it."""
    answer: str | None = None
    """The model's answer; set only with `completed`."""
    question: str | None = None
    """The model's question to the user; set only with `needs_input`."""
    provenance: Provenance | None = None
    """Its numbers traced to the run's outputs; set only with `completed`."""
    parts: PartsCheck | None = None
    """Its measured and interpreted parts, checked; set only with `completed`."""


@dataclass(kw_only=True, frozen=True)
class RunResult:
    """What a run produced, for the CLI, `--json` and callers."""

    run_id: str
    """The run's id (transcript, audit log, container labels)."""
    status: Status
    """How the run ended."""
    answer: str | None
    """The model's final answer when `status == "completed"`, else None."""
    message: str
    """Why the run ended, in one sentence."""
    turns: int
    """Model requests made."""
    tool_calls: int
    """Tool calls made."""
    usage: TokenUsage
    """Tokens used."""
    duration_s: float
    """Wall-clock seconds of the whole run."""
    artifacts: tuple[str, ...]
    """Host paths of files copied out of the sandbox's `/output`."""
    sandbox: SandboxUsage
    """Totals over the run's executions (wall, CPU seconds, peak memory)."""
    messages: tuple[dict[str, Any], ...] = ()
    """The conversation as it stands after this run (the next question continues it);
    not part of `as_dict`: the transcript has every message already."""
    question: str | None = None
    """With `needs_input`: what the model asks the user (answer it to continue the run)."""
    verified: bool | None = None
    """Every number the answer states was printed by an output of the run (`agent.provenance`);
    None without an answer, or when the answer states no number to check."""
    sources: tuple[Source, ...] = ()
    """Each traced number of the answer, with the execution and output line that printed it."""
    unsupported: tuple[str, ...] = ()
    """Numbers of the answer that no output printed, as written."""
    parts: PartsCheck | None = None
    """With an answer: its measured part, its interpretation and assumptions, and the
    sentences presented as measured that are interpretation (`agent.provenance.parts`)."""
    plan: tuple[PlanStep, ...] = ()
    """The final plan, as the model last saved it (empty when it wrote none)."""
    plan_revision: int = 0
    """The final plan's revision number in the conversation (0: no plan)."""
    plan_pending: tuple[str, ...] = ()
    """With an answer: the steps of the final plan still pending or in progress."""
    cost: dict[str, Any] | None = None
    """What the run cost (`agent.core.cost.Cost.as_dict`), by the policy's price table."""

    def as_dict(self) -> dict[str, Any]:
        """The machine-readable form (`sbx ask --json`, the transcript's `run_end`)."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            "outcome": run_outcome(self.status),
            "answer": self.answer,
            "message": self.message,
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "usage": self.usage.as_dict(),
            "duration_s": round(self.duration_s, 3),
            "artifacts": list(self.artifacts),
            "sandbox": self.sandbox.as_dict(),
            **({"question": self.question} if self.question is not None else {}),
            "verified": self.verified,
            "sources": [source.as_dict() for source in self.sources],
            "unsupported": list(self.unsupported),
            **({"cost": self.cost} if self.cost is not None else {}),
            **(self._plan_dict() if self.plan else {}),
            **(_parts_dict(self.parts) if self.parts is not None else {}),
        }

    def _plan_dict(self) -> dict[str, Any]:
        return {
            "plan": [step.model_dump() for step in self.plan],
            "plan_revision": self.plan_revision,
            "plan_pending": list(self.plan_pending),
        }


def _parts_dict(checked: PartsCheck) -> dict[str, Any]:
    return {"parts": checked.parts.as_dict(), "mislabelled": list(checked.mislabelled)}

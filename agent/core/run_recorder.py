"""`RunRecorder`: the one interface through which a face's store hears of every run.

Every kind of run goes through the core: a question (or the answer that
continues one) in a conversation, one program (`POST /v1/execute`, `sbx
exec`), one execution of a tool session (MCP, E2B), a rerun of a recorded
conversation's code. Each has the same life, told to the recorder by one
function (`recorded`), so a store (the service's) implements it once for all:

    admitted(ticket)            the run may run now (a quota, a queue place; or raise to
                                refuse it: nothing was recorded and nothing runs); the
                                ticket carries the run's `Cancellation`, which the store
                                may fire (a client's cancel, the drain after SIGTERM)
    started(ticket)             it runs now
    finished(ticket, outcome)   how it ended: status, message, answer, CPU, artifacts
    withdrawn(ticket)           nothing ran after all (the host's sandbox cap was full, the
                                gate refused the call): no run is counted

After `admitted`, exactly one of `finished` and `withdrawn` follows. A run
has one ticket, built by the core (`Workspace.ticket`): a face that admits a
conversation's run when it is posted (the service) gets it from
`Conversation.admit` and hands that same ticket to `ask` or `answer`. How a
tool call's outcome maps to a run's status is written here once
(`call_outcome`), as is a conversation run's (`result_outcome`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from sbx.agent.core.cost import Tariff
from sbx.agent.core.state import PriorWork, RunResult, SandboxUsage
from sbx.agent.model.cancellation import Cancellation
from sbx.agent.model.reply import TokenUsage
from sbx.sandbox.errors import HostBusy
from sbx.sandbox.session import new_run_id as new_run_id
from sbx.tools.outcome import ToolOutcome

RunKind = Literal["question", "execute", "mcp", "e2b", "rerun"]
"""A conversation's run, one program, one execution of an MCP session or of an E2B sandbox,
a rerun of a recorded conversation's code."""
NOTHING_RAN = ("invalid", "denied", "unknown", "halted")
"""Gate statuses of a call that ran no code (without an execution record)."""
MAX_MESSAGE_CHARS = 2000

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class RunTicket:
    """One run, as the recorder knows it before it starts."""

    run_id: str
    """The run's id (audit `run_start`, transcript, store)."""
    kind: RunKind
    """Which kind of run it is."""
    principal: str
    """Who runs it, as the face authenticated them."""
    team: str | None = None
    """The principal's team, when the face's authentication gives one."""
    conversation_id: str | None = None
    """The conversation or MCP session it belongs to; None for one program."""
    question: str = ""
    """The question asked (empty for programs)."""
    output_dir: Path | None = None
    """Where its artifacts are copied."""
    cancel: Cancellation = field(default_factory=Cancellation, compare=False)
    """The run's token: a store that drains (or a client's cancel) fires it."""


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """How a run ended: what the recorder stores and reports."""

    status: str
    """`completed`, `needs_input`, `cancelled`, ... for questions; `ok`, `error`,
    `timeout`, `cancelled`, ... for programs."""
    message: str
    """One line saying why (bounded)."""
    answer: str | None = None
    """The final answer (questions)."""
    question: str | None = None
    """What the model asked the user, when the run ended `needs_input`."""
    result: dict[str, Any] | None = None
    """Totals (questions) or the execution's record (programs), as JSON."""
    cpu_seconds: float = 0.0
    """CPU seconds the sandbox used (the daily quota counts them)."""
    cost: float = 0.0
    """What the run cost in the price table's currency (the money budgets count it)."""
    cost_estimated: bool = False
    """Some token count behind `cost` was estimated (the endpoint sent none)."""
    artifacts: tuple[str, ...] = ()
    """Host paths of the artifacts copied out."""
    holds_sandbox: bool = False
    """The conversation's sandbox is kept for its next question."""
    error: BaseException | None = field(default=None, compare=False)
    """What failed, for a run that raised (a store words it for its tenants)."""


class RunRecorder(Protocol):
    """What the core tells a face's store about each run (see the module docstring)."""

    def admitted(self, ticket: RunTicket) -> None:
        """The run may go ahead (raise to refuse it)."""
        ...

    def started(self, ticket: RunTicket) -> None:
        """The run runs now."""
        ...

    def finished(self, ticket: RunTicket, outcome: RunOutcome) -> None:
        """The run ended with `outcome`."""
        ...

    def withdrawn(self, ticket: RunTicket) -> None:
        """Nothing ran: the run is not counted."""
        ...


class NoRecorder:
    """The recorder of a face without a store (the CLI): the transcript and audit suffice."""

    def admitted(self, ticket: RunTicket) -> None:
        """Always admitted."""

    def started(self, ticket: RunTicket) -> None:
        """Nothing to record."""

    def finished(self, ticket: RunTicket, outcome: RunOutcome) -> None:
        """Nothing to record."""

    def withdrawn(self, ticket: RunTicket) -> None:
        """Nothing to record."""


def recorded(recorder: RunRecorder, ticket: RunTicket, work: Callable[[], T],
             outcome: Callable[[T], RunOutcome | None], *, admitted: bool = False) -> T:
    """A run's whole life, for every kind: admitted, started, then finished or withdrawn.

    `admitted`: the face admitted the ticket already (`Conversation.admit`, when
    the run was posted). `outcome` maps what `work` returned to the run's outcome
    (None: nothing ran, the run is withdrawn). `HostBusy` withdraws it too; any
    other exception ends it `error` and propagates.
    """
    if not admitted:
        recorder.admitted(ticket)
    recorder.started(ticket)
    try:
        value = work()
    except HostBusy:
        recorder.withdrawn(ticket)
        raise
    except BaseException as exc:
        recorder.finished(ticket, failed_outcome(exc))
        raise
    ended = outcome(value)
    if ended is None:
        recorder.withdrawn(ticket)
    else:
        recorder.finished(ticket, ended)
    return value


def recorded_call(recorder: RunRecorder, ticket: RunTicket,
                  call: Callable[[], ToolOutcome], tariff: Tariff | None = None,
                  prior: Callable[[], PriorWork | None] | None = None) -> ToolOutcome:
    """One program's life (`recorded`), its outcome the gate's.

    `tariff` prices its sandbox time (CPU seconds, GB-seconds) as the run's cost;
    `prior()`, asked when it ends, is work `call` did for it first (a restore's replay).
    """
    return recorded(recorder, ticket, call, lambda outcome: call_outcome(
        outcome, tariff, prior() if prior is not None else None))


def failed_outcome(exc: BaseException) -> RunOutcome:
    """A run that raised (the sandbox, the host or the audit log failed)."""
    return RunOutcome(status="error", message=f"{type(exc).__name__}: {exc}"[:MAX_MESSAGE_CHARS],
                      error=exc)


def result_outcome(result: RunResult) -> RunOutcome:
    """A conversation run's outcome from its `RunResult`."""
    data = result.as_dict()
    summary = {key: data[key] for key in ("turns", "tool_calls", "usage", "duration_s", "sandbox")}
    summary.update({key: data[key] for key in ("plan", "plan_pending", "cost", "parts",
                                               "mislabelled", "verified", "sources",
                                               "unsupported") if key in data})
    return RunOutcome(
        status=result.status, message=result.message[:MAX_MESSAGE_CHARS], answer=result.answer,
        question=result.question, result=summary, cpu_seconds=result.sandbox.cpu_seconds,
        cost=float((result.cost or {}).get("total") or 0.0),
        cost_estimated=bool((result.cost or {}).get("estimated")),
        artifacts=result.artifacts, holds_sandbox=result.status != "cancelled",
    )


def call_outcome(outcome: ToolOutcome, tariff: Tariff | None = None,
                 prior: PriorWork | None = None) -> RunOutcome | None:
    """One program's outcome from the gate's; None when nothing ran (the gate refused it).

    `prior` (a restore's replay before it) counts in its CPU seconds, cost and artifacts.
    """
    ran = outcome.execution
    if ran is None and outcome.status in NOTHING_RAN and prior is None:
        return None
    execution = ran.model_dump(mode="json") if ran is not None else None
    message = outcome.text.splitlines()[0] if outcome.text else ""
    result: dict[str, Any] | None = {"execution": execution} if execution is not None else None
    used = replace(prior.sandbox) if prior is not None else SandboxUsage()
    if ran is not None:
        used.add(ran.duration_s, ran.cpu_seconds, ran.peak_memory_bytes)
    cost = 0.0
    if tariff is not None and used.executions:
        priced = tariff.cost(TokenUsage(), used)
        cost, result = priced.total, {**(result or {}), "cost": priced.as_dict()}
    if prior is not None:
        result = {**(result or {}), "restore": prior.sandbox.as_dict()}
    return RunOutcome(
        status=call_status(outcome), message=message[:MAX_MESSAGE_CHARS], result=result,
        cpu_seconds=used.cpu_seconds, cost=cost,
        artifacts=(*(prior.artifacts if prior is not None else ()),
                   *(artifact.path for artifact in outcome.artifacts)),
        holds_sandbox=True,
    )


def call_status(outcome: ToolOutcome) -> str:
    """A program's status: the gate's, except that code which raised is `error`, not `ok`."""
    return outcome.status if outcome.status != "ok" else ("error" if outcome.failed else "ok")

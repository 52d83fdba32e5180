"""The agent loop: ask the model, run the tools it asks for through the gate, repeat.

`run` is the whole loop; `take_turn` is one model request and what follows
from it, and ends in one of four next steps (`FinalAnswer`, `CutOff`,
`RunTools`, `EmptyReply`). Each way out is an `Ending` with a status from the closed set
in `agent.state`. Errors the model can fix are observations (the gate never
raises for them); errors the operator must fix (sandbox, audit log) propagate
as exceptions and stop the run. The loop never imports `sandbox`: the code
runner reaches it inside the gate, wired by the CLI.

Everything that happens is reported to `emit` as a typed event (see
`sbx.agent.core.events`), which the conversation sends to the transcript and to
its subscribers (the CLI's progress display, the service's event stream).
A run may continue a conversation: `history` holds the messages of the
earlier runs, system prompt first.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sbx.agent.core.asking import awaiting_input
from sbx.agent.core.budget import before_request, before_tools, model_ending, remaining_s
from sbx.agent.core.charts import show_charts
from sbx.agent.core.compaction import shorten_observations
from sbx.agent.core.cost import Tariff
from sbx.agent.core.dispatch import ToolDispatcher
from sbx.agent.core.events import (
    Compaction,
    EventSink,
    MessageAdded,
    ModelReplied,
    RunEnd,
    ToolResult,
    discard,
)
from sbx.agent.core.feedback import artifact_paths, count_execution, repeated_failure_notices
from sbx.agent.core.outcomes import call_outcome
from sbx.agent.core.plan import follow_up_notice, note_plan, pending_steps
from sbx.agent.core.settings import AgentSettings
from sbx.agent.core.spend import SpendLimit
from sbx.agent.core.state import Ending, Observation, PriorWork, RunResult, RunState
from sbx.agent.core.tracing import traced_complete, traced_run
from sbx.agent.core.verification import answer_ending, execution_record, note_output, settle_ending
from sbx.agent.core.waiting import ModelWait
from sbx.agent.model.boundary import RequestGuard
from sbx.agent.model.cancellation import CANCELLED_MESSAGE as CANCELLED_MESSAGE
from sbx.agent.model.cancellation import Cancellation, Cancelled
from sbx.agent.model.client import ModelClient, ModelError, ModelReply, ToolCallRequest
from sbx.agent.model.request_size import estimate_tokens
from sbx.tools.builtin.plan import PlanStep
from sbx.tools.gate import ToolGate
from sbx.tools.outcome import ToolOutcome


@dataclass(frozen=True)
class FinalAnswer:
    """The reply has text and no tool calls: the run is complete."""

    text: str
    """The answer, as the model wrote it."""


@dataclass(frozen=True)
class CutOff:
    """Text without tool calls that the endpoint says was cut off: not an answer."""

    finish_reason: str
    """`length` (the endpoint's output limit) or `content_filter`."""


CUT_OFF = frozenset({"length", "content_filter"})
"""Finish reasons that mean the text stopped before the model was done."""


@dataclass(frozen=True)
class RunTools:
    """The reply asks for tool calls (any text beside them is kept, not treated as an answer)."""

    calls: tuple[ToolCallRequest, ...]
    """The calls, in the reply's order."""


@dataclass(frozen=True)
class EmptyReply:
    """Neither text nor tool calls: nothing to act on."""

    finish_reason: str | None
    """Why the model stopped, as the endpoint said."""


NextStep = FinalAnswer | CutOff | RunTools | EmptyReply


@traced_run
def run(
    question: str,
    *,
    model: ModelClient,
    gate: ToolGate,
    settings: AgentSettings,
    system_prompt: str,
    history: Sequence[dict[str, Any]] = (),
    emit: EventSink = discard,
    cancel: Cancellation | None = None,
    plan: Sequence[PlanStep] = (),
    plan_revision: int = 0,
    spend: SpendLimit | None = None,
    prior: PriorWork | None = None,
) -> RunResult:
    """Answer `question` with the model and the gate's tools, within `settings.budget`.

    `history` continues a conversation (its first message is the system prompt
    it began with); without it the run starts from `system_prompt`. `plan` is the
    plan the conversation's previous run left (revision `plan_revision`): the run
    starts from it and the model is shown it before the question. Returns a
    `RunResult` for every ending, Ctrl-C and a fired `cancel` token included
    (`cancelled`); raises only for operator errors from the gate (the sandbox
    or the audit log failed). `spend` is the budget above the run (a key's or team's,
    from the face's store): asked before every request and tool batch (`budget_exceeded`).
    `prior` is sandbox work done for the run before it (a restore's replay): counted as its own.
    """
    state = RunState(
        run_id=gate.run_id, started=time.monotonic(), messages=list(history), question=question,
        history=len(history),
    )
    if prior is not None:
        state.sandbox, state.artifacts = replace(prior.sandbox), list(prior.artifacts)
    if not history:
        add_message(state, {"role": "system", "content": system_prompt}, emit)
    elif plan:
        state.plan, state.plan_revision = tuple(plan), plan_revision
        state.plan_inherited = plan_revision
        add_message(state, {"role": "user", "content": follow_up_notice(plan)}, emit)
    add_message(state, {"role": "user", "content": question}, emit)
    tools = gate.schemas()
    gate.set_deadline(state.started + settings.budget.max_wall_time)  # running code is cut too
    dispatcher = ToolDispatcher(gate, workers=settings.parallel_tools)
    cancel = cancel or Cancellation()
    outgoing = RequestGuard(gate.guard, on_redaction=lambda counts: gate.record_redactions(
        "model_request", counts))  # the boundary: every request, whatever built its messages
    try:
        while True:
            ending = take_turn(state, model, dispatcher, tools, settings, emit, cancel, spend,
                               outgoing=outgoing)
            if ending is not None:
                break
    except (KeyboardInterrupt, Cancelled):
        cancel.cancel()
        ending = Ending(status="cancelled", message=cancel.reason)
    finally:
        dispatcher.close(wait=not cancel.cancelled)
    return finish(state, ending, emit, tariff=settings.prices.tariff(model.model))


def take_turn(
    state: RunState,
    model: ModelClient,
    dispatcher: ToolDispatcher,
    tools: Sequence[dict[str, Any]],
    settings: AgentSettings,
    emit: EventSink,
    cancel: Cancellation,
    spend: SpendLimit | None = None,
    *,
    outgoing: RequestGuard,
) -> Ending | None:
    """One model request and its tool calls; an `Ending` when the run must stop here.

    Every request passes `outgoing`, the run's data guard at the boundary. Raises
    `Cancelled` once `cancel` fired (before the request, during it, or after the tools).
    """
    budget, tariff = settings.budget, settings.prices.tariff(model.model)
    cancel.check()
    compact(state, settings, tools, emit)
    estimate = estimate_tokens(state.messages, tools)
    ending = before_request(state, budget, now=time.monotonic(), prompt_estimate=estimate,
                            tariff=tariff, spend=spend)
    if ending is not None:
        return ending
    timeout = remaining_s(state, budget, time.monotonic())  # retries included
    try:
        with ModelWait(run_id=state.run_id, turn=state.turns + 1, model=model.model,
                       emit=emit) as wait:
            reply = traced_complete(model, state.messages, tools, timeout=max(timeout, 0.001),
                                    guard=outgoing, cancel=cancel, on_retry=wait.retried)
    except ModelError as exc:
        return model_ending(state, budget, exc, now=time.monotonic())
    record_reply(state, reply, emit)
    match next_step(reply):
        case FinalAnswer(text=text):  # numbers traced; one validation turn when some are not
            return answer_ending(state, text, settings, tools, emit)
        case CutOff(finish_reason=reason):
            return Ending(status="truncated", message=cut_off_message(reason))
        case EmptyReply(finish_reason=reason):
            said = f"finish_reason={reason!r}"
            message = f"The model replied with neither text nor tool calls ({said})"
            return Ending(status="model_error", message=message)
        case RunTools(calls=calls):
            ending = before_tools(state, budget, now=time.monotonic(), calls=len(calls),
                                  tariff=tariff, spend=spend)
            if ending is not None:
                return ending
            outcomes = dispatcher.run(calls)
            record_outcomes(state, outcomes, emit)
            show_charts(state, outcomes, settings, model.model, emit)  # or describe them
            cancel.check()
            return halted(outcomes) or awaiting_input(outcomes)
    raise TypeError(f"Unknown next step for reply {reply!r}")  # pragma: no cover


def next_step(reply: ModelReply) -> NextStep:
    """What the reply asks the loop to do."""
    if reply.tool_calls:
        return RunTools(calls=reply.tool_calls)
    if reply.finish_reason in CUT_OFF:
        return CutOff(finish_reason=str(reply.finish_reason))
    if reply.content and reply.content.strip():
        return FinalAnswer(text=reply.content)
    return EmptyReply(finish_reason=reply.finish_reason)


def cut_off_message(reason: str) -> str:
    """Why a cut-off reply is no answer, and what to change."""
    if reason == "length":
        return (
            "The model's answer was cut off at the endpoint's output limit "
            "(finish_reason='length'); raise the endpoint's max_tokens or ask for a shorter answer"
        )
    return f"The model's answer was cut off by the endpoint (finish_reason={reason!r})"


def add_message(state: RunState, message: dict[str, Any], emit: EventSink) -> None:
    """Append a message the harness wrote (system prompt, question, notices)."""
    state.messages.append(message)
    emit(MessageAdded(run_id=state.run_id, turn=state.turns, message=message))


def record_reply(state: RunState, reply: ModelReply, emit: EventSink) -> None:
    """Count the turn and its tokens, append the assistant message."""
    state.turns += 1
    state.usage = state.usage + reply.usage
    message = reply.message()
    state.messages.append(message)
    emit(
        ModelReplied(
            run_id=state.run_id,
            turn=state.turns,
            message=message,
            usage=reply.usage.as_dict(),
            total_usage=state.usage.as_dict(),
            finish_reason=reply.finish_reason,
            duration_s=round(reply.duration_s, 3),
        )
    )


def record_outcomes(state: RunState, outcomes: Sequence[ToolOutcome], emit: EventSink) -> None:
    """Append one `tool` message per outcome, in call order, then any repeated-failure notice."""
    for outcome in outcomes:
        state.tool_calls += 1
        failed = outcome.failed
        index = len(state.messages)
        message = {"role": "tool", "tool_call_id": outcome.call_id, "content": outcome.text}
        state.messages.append(message)
        state.observations.append(
            Observation(index=index, tool=outcome.name, failed=failed, turn=state.turns)
        )
        saved = artifact_paths(outcome)
        state.artifacts.extend(saved)
        count_execution(state, outcome)
        note_output(state, outcome)
        record = execution_record(outcome)
        emit(
            ToolResult(
                run_id=state.run_id,
                turn=state.turns,
                call_id=outcome.call_id,
                audit_id=outcome.audit_id,
                name=outcome.name,
                status=outcome.status,
                failed=failed,
                rule=outcome.rule,
                duration_s=round(outcome.duration_s, 3),
                content=outcome.text,
                artifacts=saved,
                execution=record,
                outcome=call_outcome(outcome.status, failed=failed,
                                     execution=record.model_dump() if record else None),
            )
        )
        note_plan(state, outcome, emit)
    for notice in repeated_failure_notices(state, outcomes):
        add_message(state, {"role": "user", "content": notice}, emit)


def halted(outcomes: Sequence[ToolOutcome]) -> Ending | None:
    """The gate halted the run (e.g. too many denied calls): no tool can run any more."""
    for outcome in outcomes:
        if outcome.status == "halted":
            message = f"The tool gate halted the run: {outcome.text}"
            return Ending(status="gate_halt", message=message)
    return None


def compact(
    state: RunState, settings: AgentSettings, tools: Sequence[dict[str, Any]], emit: EventSink
) -> None:
    """Shorten older observations if the context nears `context_tokens`; say which."""
    done = shorten_observations(state, limit_tokens=settings.context_tokens, tools=tools)
    if done:
        estimate = estimate_tokens(state.messages, tools)
        emit(
            Compaction(run_id=state.run_id, turn=state.turns, shortened=done, estimate=estimate)
        )


def finish(
    state: RunState, ending: Ending, emit: EventSink, *, tariff: Tariff | None = None
) -> RunResult:
    """The run's result; only `completed` carries an answer, with its numbers' provenance."""
    ending = settle_ending(state, ending)
    traced = ending.provenance if ending.status == "completed" else None
    result = RunResult(
        run_id=state.run_id,
        status=ending.status,
        answer=ending.answer if ending.status == "completed" else None,
        message=ending.message,
        turns=state.turns,
        tool_calls=state.tool_calls,
        usage=state.usage,
        duration_s=time.monotonic() - state.started,
        artifacts=tuple(dict.fromkeys(state.artifacts)),  # a file rewritten is listed once
        sandbox=state.sandbox,
        messages=tuple(state.messages),
        question=ending.question if ending.status == "needs_input" else None,
        verified=traced.verdict if traced is not None else None,
        sources=traced.sources if traced is not None else (),
        unsupported=traced.unsupported if traced is not None else (),
        parts=ending.parts if ending.status == "completed" else None,
        plan=state.plan,
        plan_revision=state.plan_revision,
        plan_pending=pending_steps(state.plan) if ending.status == "completed"
        and state.plan_revision > state.plan_inherited else (),
        cost=tariff.cost(state.usage, state.sandbox).as_dict() if tariff is not None else None,
    )
    emit(RunEnd.model_validate(result.as_dict()))
    return result

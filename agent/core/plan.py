"""The model's plan in the run: kept in the state, recorded per revision, carried to follow-ups.

`update_plan` (`sbx.tools.builtin.plan`) checks and echoes a plan; here its
accepted value becomes the run's current plan (`RunState.plan`, the one place
run data lives), and each revision is a `plan` event with the whole plan and
what changed since the previous one (steps added, removed, or changed
status), which the transcript records and every face renders. A follow-up in
the same conversation starts from the last run's plan and is shown it
(`follow_up_notice`); compaction never shortens the newest plan observation
(`sbx.agent.core.compaction`). When the run answers, the steps still pending or in
progress are listed beside the answer (`pending_steps`).

Steps are matched between revisions by their description (case and spacing
ignored): a step the model renames counts as one removed and one added.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from sbx.agent.core.events import EventSink, PlanChange, PlanStepRecord, PlanUpdated
from sbx.agent.core.state import RunResult, RunState
from sbx.tools.builtin.plan import PlanStep, PlanUpdate, plan_text
from sbx.tools.outcome import ToolOutcome

OPEN = frozenset({"pending", "in_progress"})
"""Statuses of a step that is not finished."""


def note_plan(state: RunState, outcome: ToolOutcome, emit: EventSink) -> None:
    """Make an accepted `update_plan` call's plan the current one, and record the revision."""
    if outcome.status != "ok" or not isinstance(outcome.value, PlanUpdate):
        return
    update = outcome.value
    found = changes(state.plan, update.steps)
    state.plan = update.steps
    state.plan_revision += 1
    emit(
        PlanUpdated(
            run_id=state.run_id, turn=state.turns, call_id=outcome.call_id,
            revision=state.plan_revision, note=update.note,
            steps=[PlanStepRecord.model_validate(step.model_dump()) for step in update.steps],
            changes=found,
        )
    )


def changes(old: Sequence[PlanStep], new: Sequence[PlanStep]) -> list[PlanChange]:
    """What `new` changed about `old`: steps added, removed, and status changes, in order."""
    before = {_key(step): step for step in old}
    after = {_key(step) for step in new}
    found: list[PlanChange] = []
    for step in new:
        previous = before.get(_key(step))
        if previous is None:
            found.append(PlanChange(change="added", step=step.description, after=step.status))
        elif previous.status != step.status:
            found.append(PlanChange(change="status", step=step.description,
                                    before=previous.status, after=step.status))
    found.extend(
        PlanChange(change="removed", step=step.description, before=step.status)
        for step in old
        if _key(step) not in after
    )
    return found


def pending_steps(plan: Sequence[PlanStep]) -> tuple[str, ...]:
    """Descriptions of the steps not finished (pending or in progress)."""
    return tuple(step.description for step in plan if step.status in OPEN)


def pending_note(pending: Sequence[str]) -> str:
    """One line for beside the answer: how many plan steps it leaves open, and which."""
    listed = "; ".join(pending)
    return f"The answer leaves {len(pending)} plan step(s) not done: {listed}"


def follow_up_notice(plan: Sequence[PlanStep]) -> str:
    """The harness message that shows a follow-up the plan the previous run left."""
    return (
        "[sbx] Your plan as the previous question left it:\n"
        f"{plan_text(plan)}\n"
        "Revise it with update_plan if this question needs more steps."
    )


def plan_from_messages(messages: Sequence[dict[str, Any]]) -> tuple[tuple[PlanStep, ...], int]:
    """The last plan saved in a conversation's messages, and how many were saved.

    For a conversation taken up from its record (a new process, another replica),
    where no run result holds the plan: each accepted `update_plan` call is an
    assistant tool call whose `tool` message starts `Plan saved`.
    """
    saved = {
        m.get("tool_call_id") for m in messages
        if m.get("role") == "tool" and str(m.get("content") or "").startswith("Plan saved")
    }
    plan: tuple[PlanStep, ...] = ()
    count = 0
    for message in messages:
        for call in message.get("tool_calls") or [] if message.get("role") == "assistant" else []:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or function.get("name") != "update_plan":
                continue
            if call.get("id") not in saved:
                continue
            try:
                steps = json.loads(str(function.get("arguments") or "{}")).get("steps") or []
                plan = tuple(PlanStep.model_validate(step) for step in steps)
            except (ValueError, AttributeError, ValidationError):
                continue
            count += 1
    return plan, count


def _key(step: PlanStep) -> str:
    return " ".join(step.description.split()).casefold()


def last_plan(runs: list[RunResult], messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The plan a follow-up starts from: the last run's, else the messages' (`restore`).

    None after `reset()` or at the start.
    """
    if not messages:
        return {}
    if runs:
        return {"plan": runs[-1].plan, "plan_revision": runs[-1].plan_revision}
    plan, revision = plan_from_messages(messages)
    return {"plan": plan, "plan_revision": revision}

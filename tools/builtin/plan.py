"""`update_plan`: the model writes its plan, and keeps it current as results arrive.

A plan is an ordered list of steps, each a short description, a status
(`pending`, `in_progress`, `done`, `dropped`) and, where the model knows it,
the tool it expects to use. Each call sends the whole plan as it stands now;
the agent layer keeps the current plan in the run's state and records each
revision with what changed (`sbx.agent.core.plan`). The tool itself only checks and
echoes: it changes nothing outside the run.

Everything in a plan is model-written, so it is bounded here, before the tool
runs (`check_plan_call`, called by the gate): the number of steps, the
characters of each description, tool name and note, and the revisions per run
(`[tools.update_plan]`). A refusal is a `denied` observation naming the rule.
The same check refuses `execute_python` until a plan exists, in runs whose data
is at least `require_plan_from_data` bytes, when the operator asks for that.

`update_plan` shares `execute_python`'s sequential key, so a plan and the code
of one reply are decided and run in the model's order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from sbx.tools.builtin.execute_python import SESSION_KEY
from sbx.tools.context import PlanBook, ToolContext
from sbx.tools.observation import Denied
from sbx.tools.policy import PlanRule, Policy
from sbx.tools.registry import Tool, ToolReturn, build_tool

PlanStatus = Literal["pending", "in_progress", "done", "dropped"]
MAX_NOTE_CHARS = 500
"""Longest note on a revision (why the plan changed)."""
MAX_TOOL_CHARS = 64
"""Longest tool name a step may name (the API's own bound on tool names)."""
MAX_DATA_ENTRIES = 10_000
"""Files looked at when summing a run's data size; past it, the data counts as large."""
MARKS = {"pending": "[ ]", "in_progress": "[>]", "done": "[x]", "dropped": "[-]"}
"""How a step's status is shown in text (observations, the CLI, exports)."""


class PlanStep(BaseModel):
    """One step of the model's plan."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True
    )

    description: str
    """What the step does, in a few words (model-written: bounded, and escaped where shown)."""
    status: PlanStatus
    """`pending`, `in_progress`, `done` or `dropped` (given up, e.g. after a failure)."""
    tool: str | None = None
    """The tool the model expects to use for it, where it knows (e.g. `execute_python`)."""


class PlanUpdate(BaseModel):
    """The value of an accepted `update_plan` call: the agent keeps it as the current plan."""

    model_config = ConfigDict(frozen=True)

    steps: tuple[PlanStep, ...]
    """The whole plan, in order, as the model sent it."""
    note: str = ""
    """Why it changed, if the model said."""


def make_update_plan(rule: PlanRule) -> Tool:
    """The `update_plan` tool; its bounds are checked by the gate (`check_plan_call`)."""

    def update_plan(steps: list[PlanStep], ctx: ToolContext, note: str = "") -> ToolReturn:
        """Write or revise your plan: the whole ordered list of steps, each with its status.

        Call it before your first execution when the question needs more than one or two,
        and again whenever a step finishes, fails or the approach changes. Send every step
        each time (done and dropped ones too): it replaces the previous plan.

        Args:
            steps: The plan in order; status is pending, in_progress, done or dropped.
            ctx: The run's context, injected by the gate (not part of the schema).
            note: Why the plan changed, in one sentence (optional).
        """
        update = PlanUpdate(steps=tuple(steps), note=note.strip())
        count = ctx.plan.accepted()
        text = (
            f"Plan saved (revision {count} of at most {rule.max_updates} in this run):\n"
            f"{plan_text(update.steps)}\nKeep it current: update it when a step finishes, "
            "fails or the approach changes."
        )
        return ToolReturn(text=text, value=update, audit={"steps": len(steps)})

    return build_tool(update_plan, sequential=SESSION_KEY)


def plan_text(steps: Sequence[PlanStep]) -> str:
    """The plan as numbered lines: `1. [x] load the data (execute_python)`."""
    return "\n".join(
        f"{index}. {MARKS[step.status]} {step.description}"
        + (f" ({step.tool})" if step.tool else "")
        for index, step in enumerate(steps, start=1)
    )


def check_plan_call(
    policy: Policy, context: ToolContext, name: str, args: BaseModel
) -> Denied | None:
    """The plan's rules for one allowed call: its bounds, or a plan required before code.

    Called by the gate after the argument rules and before the quota, so a
    refused plan is not counted as a revision.
    """
    rule = policy.tools.update_plan
    if not rule.enabled:
        return None
    if name == "update_plan":
        return _bounds(rule, context.plan, args)
    if name == "execute_python" and rule.require_plan_from_data is not None:
        if not context.plan.written and _data_bytes(context.data_paths) >= (
            rule.require_plan_from_data
        ):
            reason = (
                "this run must write a plan before its first execution; call update_plan "
                "with your steps, then run the code"
            )
            return Denied(tool=name, rule="tools.update_plan.require_plan_from_data",
                          reason=reason)
    return None


def _bounds(rule: PlanRule, book: PlanBook, args: BaseModel) -> Denied | None:
    steps: list[PlanStep] = list(getattr(args, "steps", []))
    note = str(getattr(args, "note", ""))

    def denied(key: str, reason: str) -> Denied:
        return Denied(tool="update_plan", rule=f"tools.update_plan.{key}", reason=reason)

    if not steps:
        return denied("max_steps", "the plan has no steps; send at least one")
    if len(steps) > rule.max_steps:
        return denied("max_steps", f"the plan has {len(steps)} steps, at most {rule.max_steps} "
                      "are allowed; merge steps into fewer, larger ones")
    for index, step in enumerate(steps, start=1):
        if not step.description.strip():
            return denied("max_step_chars", f"step {index} has an empty description")
        if len(step.description) > rule.max_step_chars:
            return denied("max_step_chars", f"step {index}'s description has "
                          f"{len(step.description)} characters, at most {rule.max_step_chars} "
                          "are allowed; describe it in a few words")
        if step.tool is not None and len(step.tool) > MAX_TOOL_CHARS:
            return denied("max_step_chars", f"step {index}'s tool name is longer than "
                          f"{MAX_TOOL_CHARS} characters")
    if len(note) > MAX_NOTE_CHARS:
        return denied("max_step_chars", f"the note has {len(note)} characters, at most "
                      f"{MAX_NOTE_CHARS} are allowed")
    if not book.reserve(rule.max_updates):
        return denied("max_updates", f"this run already saved its plan {rule.max_updates} "
                      "times, the most allowed; go on with the plan you have")
    return None


def _data_bytes(paths: Sequence[Path]) -> int:
    """Total bytes of the run's data files (directories walked, at most MAX_DATA_ENTRIES)."""
    total = 0
    seen = 0
    for path in paths:
        walked = os.walk(path) if path.is_dir() else iter([("", [], [str(path)])])
        for root, _dirs, files in walked:
            for name in files:
                seen += 1
                if seen > MAX_DATA_ENTRIES:
                    return 1 << 62  # too many files to sum: count the data as large
                try:
                    total += os.stat(os.path.join(root, name)).st_size
                except OSError:
                    continue
    return total

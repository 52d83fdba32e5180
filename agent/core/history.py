"""What happened in a conversation, read back from its transcript: one model for every reader.

The transcript (`sbx.agent.core.transcript`) records events as they happen;
this module reads them back into one model of the conversation: each run's
question (or the answer it continues with), its executions with their code and
outputs, its plan, its ending (the answer and its verification, or the
question it is waiting on), and every loss of the sandbox's state with its
cause and whether a restore brought it back. Export (`agent.export`), re-run
(`agent.replay`) and restore (`agent.core.restore`) read this model, so they
agree on what the conversation's interpreter held at every step:

- a run's executions are its `execute_python` calls that the gate ran
  (`tool_result` status `ok`), in order, numbered 1, 2, ... as provenance
  numbers them; a call the gate refused or a cancel stopped is not one;
- the code is the call's `code` argument as the model sent it (`model_reply`);
  the output is the execution's own stdout, stderr and error (`tool_result.
  execution`), or, for transcripts written before it was recorded, the
  `[stdout]` section of the observation (`tools.observation.section_of`);
- a state loss (a timeout, a memory kill, a cancel, an idle release, a
  restart, a reset the user asked for) is a `StateLoss`. A later restore that
  rebuilt the state (`state_restored`, `restored` or `partial`) makes it
  invisible: the interpreter held the earlier variables again. A loss never
  restored is a boundary (`RecordedExecution.reset_before`): the executions
  after it ran without what came before, and re-run and export reset there too.

A transcript is a file anyone may have edited: it is validated line by line
(`agent.core.transcript`), and its code is only ever run in the sandbox.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sbx.agent.core.events import (
    Event,
    ExecutionRecord,
    ModelReplied,
    PlanUpdated,
    RunEnd,
    RunStart,
    StateRestored,
    ToolResult,
)
from sbx.agent.core.outcomes import execution_loss, loss_text
from sbx.agent.core.transcript import read_transcript
from sbx.agent.provenance.parts import PART_KEYS, AnswerParts
from sbx.sandbox.errors import SbxError
from sbx.tools.observation import error_type_of, section_of


@dataclass(frozen=True, kw_only=True)
class StateLoss:
    """The interpreter's state was lost here: why, and whether a restore brought it back."""

    cause: str
    """One of `sbx.agent.core.outcomes.LOSS_CAUSES` (`replaced` when older files say no more)."""
    reason: str
    """The words the run used for it (`a timeout`, `an idle release: idle for ...`)."""
    restored: str = ""
    """`restored` or `partial` (a restore rebuilt it), `not_restored`, or "" (none came)."""
    variables: tuple[str, ...] = ()
    """After a `partial` restore: the variables whose values may differ."""

    @property
    def visible(self) -> bool:
        """A boundary: the state was gone for what came after (no restore rebuilt it)."""
        return self.restored not in ("restored", "partial")


class RecordedExecution(ExecutionRecord):
    """One `execute_python` call that ran, as the transcript recorded it: its output and where."""

    number: int
    """1-based position among the run's executions."""
    call_id: str
    """The tool call's id (the model's)."""
    code: str
    """The program as the model sent it."""
    failed: bool = False
    """It raised, timed out or was killed."""
    artifacts: tuple[str, ...] = ()
    """Host paths of the files it left in `/output`."""
    loss_before: StateLoss | None = None
    """The state loss just before it, restored or not (None: it continued the state)."""

    @property
    def reset_before(self) -> bool:
        """It ran in a fresh interpreter that no restore filled: re-run and export reset here."""
        return self.loss_before is not None and self.loss_before.visible

    @property
    def unfinished(self) -> bool:
        """It did not run to its end (a timeout, a memory kill, its interpreter stopped)."""
        return self.timed_out or self.oom_killed or (self.state_reset and not self.error_type)

    @property
    def built_state(self) -> bool:
        """It ran to its end without an error: a restore replays it."""
        return not self.failed and not self.error_type and not self.unfinished


@dataclass(kw_only=True)
class RecordedRun:
    """One question's run."""

    run_id: str
    question: str = ""
    """The question as asked (for a run that continues another: the user's answer)."""
    model: str = ""
    prompt_version: str = ""
    image: str = ""
    data: tuple[str, ...] = ()
    """Data paths as given on the host."""
    data_sha256: dict[str, str] = field(default_factory=dict)
    """Digests by path under `/data`, when the run began (empty in older transcripts)."""
    continues: str | None = None
    """The run that ended `needs_input` and this one continues with the user's answer."""
    executions: list[RecordedExecution] = field(default_factory=list)
    status: str | None = None
    """How it ended (None when the transcript stops before `run_end`)."""
    message: str = ""
    """Why it ended so, for an ending other than `completed`."""
    answer: str | None = None
    needs_input: str | None = None
    """The question the model asked the user, when the run ended `needs_input`."""
    verified: bool | None = None
    sources: list[dict[str, Any]] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    parts: AnswerParts | None = None
    """The answer's measured part, interpretation and assumptions (None: recorded before
    answers had parts, or no answer)."""
    mislabelled: list[str] = field(default_factory=list)
    """Sentences the answer presented as measured that are interpretation."""
    plan: list[dict[str, Any]] = field(default_factory=list)
    """The plan as the run left it (its last `plan` event, or `run_end`'s)."""
    plan_revisions: int = 0
    """How many `plan` events the run recorded."""


@dataclass(frozen=True, kw_only=True)
class RecordedConversation:
    """Every run of one transcript, in order."""

    path: Path
    """The transcript file."""
    runs: tuple[RecordedRun, ...]

    def state_cells(self) -> list[RecordedExecution]:
        """The executions that built the state a restore rebuilds now, in order.

        Every execution that ran to its end without an error since the conversation
        last lost its state for good (a loss a restore could not rebuild, a reset the
        user asked for); a loss not yet followed by a restore is what the restore is for.
        """
        cells: list[RecordedExecution] = []
        for run in self.runs:
            for execution in run.executions:
                loss = execution.loss_before
                if loss is not None and loss.restored == "not_restored":
                    cells = []
                if execution.built_state:
                    cells.append(execution)
        return cells


class RecordError(SbxError):
    """The transcript holds nothing to re-run or export (the message says why)."""


def read_record(path: Path, *, until_run: str | None = None) -> RecordedConversation:
    """The runs of the transcript at `path`; with `until_run`, only up to and including it.

    Raises `TranscriptError` for a damaged line, `RecordError` when no run is found.
    """
    history = history_of(read_transcript(path), path=path, until_run=until_run)
    if until_run is not None and not any(run.run_id == until_run for run in history.runs):
        raise RecordError(f"{path}: no run {until_run!r} in this transcript")
    if not history.runs:
        raise RecordError(f"{path}: the transcript records no run")
    return history


def history_of(
    events: Iterable[Event], *, path: Path = Path("-"), until_run: str | None = None
) -> RecordedConversation:
    """The conversation that `events` (a transcript's, in order) record; maybe no run."""
    reader = _Reader()
    for event in events:
        if isinstance(event, RunStart):
            if until_run is not None and reader.runs and reader.runs[-1].run_id == until_run:
                break
        reader.read(event)
    return RecordedConversation(path=path, runs=tuple(reader.finished()))


class _Reader:
    """The conversation so far, while its events are read; losses settle as restores come."""

    def __init__(self) -> None:
        self.runs: list[RecordedRun] = []
        self._calls: dict[str, tuple[str, str]] = {}
        self._losses: list[dict[str, Any]] = []
        """Every loss, in order, as mutable data until `finished` (a restore settles them)."""
        self._open: list[dict[str, Any]] = []
        """Losses no `state_restored` has settled yet."""
        self._next: dict[str, Any] | None = None
        """The loss the next execution starts after."""
        self._at: dict[tuple[int, int], dict[str, Any]] = {}

    def read(self, event: Event) -> None:
        if isinstance(event, RunStart):
            self.runs.append(_run(event))
            self._calls = {}
            if event.sandbox_reset and len(self.runs) > 1:
                cause = event.reset_cause or "replaced"
                self._lose(cause, event.reset_reason or loss_text(cause))
        elif isinstance(event, StateRestored):
            self._settle(event)
        elif not self.runs:
            return
        elif isinstance(event, ModelReplied):
            self._calls.update(_calls(event.message))
        elif isinstance(event, ToolResult):
            self._execution(event)
        elif isinstance(event, PlanUpdated):
            self.runs[-1].plan = [step.model_dump() for step in event.steps]
            self.runs[-1].plan_revisions += 1
        elif isinstance(event, RunEnd):
            _end(self.runs[-1], event)

    def _lose(self, cause: str, reason: str, **settled: Any) -> None:
        loss = {"cause": cause, "reason": reason, **settled}
        self._losses.append(loss)
        if not settled:
            self._open.append(loss)
        self._next = loss

    def _settle(self, event: StateRestored) -> None:
        """A restore (or a reset the user asked for) settles every loss still open."""
        if not self._open:
            ran = any(run.executions for run in self.runs)
            if event.status == "not_restored" and ran:  # a reset between runs: a boundary
                self._lose(event.cause or "reset", event.reason, restored="not_restored")
            return
        for loss in self._open:
            loss["restored"] = event.status
            loss["variables"] = tuple(event.variables)
        self._open = []

    def _execution(self, event: ToolResult) -> None:
        run = self.runs[-1]
        if event.name != "execute_python" or event.status != "ok":
            return
        name, arguments = self._calls.get(event.call_id, ("", ""))
        code = code_of(arguments) if name == "execute_python" else None
        if code is None:
            return
        record = event.execution
        if record is None:  # an older transcript: the observation is all there is
            record = ExecutionRecord(
                stdout=section_of(event.content, "[stdout]"),
                stderr=section_of(event.content, "[stderr]"),
                error_type=error_type_of(event.content),
                state_reset=_says_reset(event.content),
            )
        lost = record.state_reset or record.timed_out or record.oom_killed
        if self._next is not None:
            self._at[(len(self.runs) - 1, len(run.executions))] = self._next
            self._next = None
        run.executions.append(
            RecordedExecution(
                **record.model_dump(exclude={"state_reset"}), number=len(run.executions) + 1,
                call_id=event.call_id, code=code, failed=event.failed,
                artifacts=tuple(event.artifacts), state_reset=lost,
            )
        )
        if lost:
            cause = execution_loss(record.model_dump())
            self._lose(cause, loss_text(cause))

    def finished(self) -> list[RecordedRun]:
        """The runs, each execution with the loss before it as it was settled."""
        for (run_index, index), loss in self._at.items():
            executions = self.runs[run_index].executions
            executions[index] = executions[index].model_copy(
                update={"loss_before": StateLoss(**loss)})
        return self.runs


def _run(event: RunStart) -> RecordedRun:
    return RecordedRun(
        run_id=event.run_id or "", question=event.question, model=event.model,
        prompt_version=event.prompt_version, image=event.image, data=tuple(event.data),
        data_sha256=dict(event.data_sha256), continues=event.continues,
    )


def _calls(message: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """`{call id: (tool name, arguments JSON)}` of one assistant message."""
    found: dict[str, tuple[str, str]] = {}
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            continue
        function = call["function"]
        found[str(call.get("id"))] = (str(function.get("name")), str(function.get("arguments")))
    return found


def code_of(arguments: str) -> str | None:
    """The `code` argument of an `execute_python` call, or None when it has none."""
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        return None
    code = parsed.get("code") if isinstance(parsed, dict) else None
    return code if isinstance(code, str) else None


def _says_reset(observation: str) -> bool:
    """An older observation's notes say the interpreter was lost (`sandbox.outcome`'s words)."""
    return "variables were reset" in observation or "- state reset:" in observation


def _end(run: RecordedRun, event: RunEnd) -> None:
    run.status = event.status
    run.message = event.message
    run.answer = event.answer
    asked = (event.model_extra or {}).get("question")
    run.needs_input = asked if event.status == "needs_input" and isinstance(asked, str) else None
    run.verified = event.verified
    run.sources = [source.model_dump() for source in event.sources]
    run.unsupported = list(event.unsupported)
    run.parts = AnswerParts(**event.parts.model_dump(include=set(PART_KEYS))) if event.parts \
        else None
    run.mislabelled = list(event.mislabelled)
    if event.plan:
        run.plan = [step.model_dump() for step in event.plan]

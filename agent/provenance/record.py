"""A past conversation read back from its transcript: each run's question, code, outputs, answer.

Re-run (`agent.replay`) and export (`agent.export`) start here. A run's
executions are its `execute_python` calls that the gate ran (`tool_result`
status `ok`), in order, numbered 1, 2, ... as provenance numbers them; a call
the gate refused never ran, so it is neither re-run nor exported. The code is
the call's `code` argument as the model sent it (the `model_reply` event);
the output is the execution's own stdout, stderr and error (`tool_result.
execution`), or, for transcripts written before it was recorded, the
`[stdout]` section of the observation, read back by the module that writes it
(`tools.observation.section_of`).

A transcript is a file anyone may have edited: it is validated line by line
(`agent.transcript`), and its code is only ever run in the sandbox.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sbx.agent.core.events import (
    ExecutionRecord,
    ModelReplied,
    PlanUpdated,
    RunEnd,
    RunStart,
    ToolResult,
)
from sbx.agent.core.transcript import read_transcript
from sbx.agent.provenance.parts import PART_KEYS, AnswerParts
from sbx.sandbox.errors import SbxError
from sbx.tools.observation import error_type_of, section_of


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
    reset_before: bool = False
    """It ran in a fresh interpreter: the previous execution reset the state, or the sandbox
    was replaced before its run began. Re-run and export reset the state here too."""


@dataclass(kw_only=True)
class RecordedRun:
    """One question's run."""

    run_id: str
    question: str = ""
    model: str = ""
    prompt_version: str = ""
    image: str = ""
    data: tuple[str, ...] = ()
    """Data paths as given on the host."""
    data_sha256: dict[str, str] = field(default_factory=dict)
    """Digests by path under `/data`, when the run began (empty in older transcripts)."""
    executions: list[RecordedExecution] = field(default_factory=list)
    status: str | None = None
    """How it ended (None when the transcript stops before `run_end`)."""
    answer: str | None = None
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


class RecordError(SbxError):
    """The transcript holds nothing to re-run or export (the message says why)."""


def read_record(path: Path, *, until_run: str | None = None) -> RecordedConversation:
    """The runs of the transcript at `path`; with `until_run`, only up to and including it.

    Raises `TranscriptError` for a damaged line, `RecordError` when no run is found.
    """
    runs: list[RecordedRun] = []
    calls: dict[str, tuple[str, str]] = {}
    reset = False  # the next execution runs in a fresh interpreter
    for event in read_transcript(path):
        if isinstance(event, RunStart):
            if until_run is not None and runs and runs[-1].run_id == until_run:
                break
            runs.append(_run(event))
            calls = {}
            reset = reset or (event.sandbox_reset and len(runs) > 1)
        elif not runs:
            continue
        elif isinstance(event, ModelReplied):
            calls.update(_calls(event.message))
        elif isinstance(event, ToolResult):
            reset = _add_execution(runs[-1], event, calls, reset)
        elif isinstance(event, PlanUpdated):
            runs[-1].plan = [step.model_dump() for step in event.steps]
            runs[-1].plan_revisions += 1
        elif isinstance(event, RunEnd):
            _end(runs[-1], event)
    if until_run is not None and not any(run.run_id == until_run for run in runs):
        raise RecordError(f"{path}: no run {until_run!r} in this transcript")
    if not runs:
        raise RecordError(f"{path}: the transcript records no run")
    return RecordedConversation(path=path, runs=tuple(runs))


def _run(event: RunStart) -> RecordedRun:
    return RecordedRun(
        run_id=event.run_id or "", question=event.question, model=event.model,
        prompt_version=event.prompt_version, image=event.image, data=tuple(event.data),
        data_sha256=dict(event.data_sha256),
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


def _add_execution(
    run: RecordedRun, event: ToolResult, calls: dict[str, tuple[str, str]], reset: bool
) -> bool:
    """Append the execution `event` records, if it ran; return whether the state reset since."""
    if event.name != "execute_python" or event.status != "ok":
        return reset
    name, arguments = calls.get(event.call_id, ("", ""))
    code = code_of(arguments) if name == "execute_python" else None
    if code is None:
        return reset
    record = event.execution
    if record is None:  # an older transcript: the observation is all there is
        record = ExecutionRecord(
            stdout=section_of(event.content, "[stdout]"),
            stderr=section_of(event.content, "[stderr]"),
            error_type=error_type_of(event.content),
            state_reset=_says_reset(event.content),
        )
    lost = record.state_reset or record.timed_out or record.oom_killed
    run.executions.append(
        RecordedExecution(
            **record.model_dump(exclude={"state_reset"}), number=len(run.executions) + 1,
            call_id=event.call_id, code=code, failed=event.failed,
            artifacts=tuple(event.artifacts), state_reset=lost, reset_before=reset,
        )
    )
    return lost


def _says_reset(observation: str) -> bool:
    """An older observation's notes say the interpreter was lost (`sandbox.outcome`'s words)."""
    return "variables were reset" in observation or "- state reset:" in observation


def _end(run: RecordedRun, event: RunEnd) -> None:
    run.status = event.status
    run.answer = event.answer
    run.verified = event.verified
    run.sources = [source.model_dump() for source in event.sources]
    run.unsupported = list(event.unsupported)
    run.parts = AnswerParts(**event.parts.model_dump(include=set(PART_KEYS))) if event.parts \
        else None
    run.mislabelled = list(event.mislabelled)
    if event.plan:
        run.plan = [step.model_dump() for step in event.plan]

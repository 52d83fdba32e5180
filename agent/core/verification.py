"""Verification in the loop: keep what an answer may quote, check the answer, ask once to fix it.

The loop calls three helpers, so its own functions stay small:

- `note_output` after every tool outcome: an `execute_python` stdout (as the
  sandbox returned it) or a `calculate` result is kept in `RunState.outputs`;
- `answer_ending` in the `FinalAnswer` path: trace the answer's numbers
  (`agent.provenance`) and split it into its measured and interpreted parts
  (`agent.provenance.parts`); if a number is unsupported or interpretation is
  presented as measurement, and no validation turn was asked yet, and the
  budget allows one more request, append one harness message that names them
  and let the loop go on; else end `completed` with the verdict;
- `settle_ending` when the run ends: a budget or model failure during the
  validation turn still ends `completed`, with the first answer, unverified
  (the model did answer; only the re-check was cut short). A cancel or a gate
  halt keeps its own status.

`execution_record` gives the transcript each execution's own stdout, stderr
and error, so re-run and export need not parse the observation text.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sbx.agent.core.budget import before_request
from sbx.agent.core.events import EventSink, ExecutionRecord, MessageAdded, ResultTable
from sbx.agent.core.settings import AgentSettings
from sbx.agent.core.state import Ending, PendingAnswer, RunState
from sbx.agent.model.request_size import estimate_tokens
from sbx.agent.provenance.parts import check_parts, parts_request
from sbx.agent.provenance.trace import Output, Provenance, trace_numbers, validation_request
from sbx.tools.outcome import ToolOutcome

QUOTED_TOOLS = frozenset({"calculate"})
"""Tools besides `execute_python` whose result text an answer may quote."""
EARLIER_RUN = "earlier run"
_KEEP_STATUSES = frozenset({"completed", "cancelled", "gate_halt"})
"""Endings that stand even after a validation turn was asked."""


def note_output(state: RunState, outcome: ToolOutcome) -> None:
    """Keep an outcome's quotable output (ran at the gate: `ok`) for the answer's check."""
    if outcome.status != "ok":
        return
    if outcome.execution is not None:
        state.executions += 1
        text, execution = outcome.execution.stdout, state.executions
    elif outcome.name in QUOTED_TOOLS:
        text, execution = outcome.text, None
    else:
        return
    state.outputs.append(
        Output(
            tool=outcome.name, call_id=outcome.call_id, audit_id=outcome.audit_id,
            execution=execution, text=text,
        )
    )


def earlier_outputs(messages: Sequence[dict[str, Any]]) -> list[Output]:
    """Observations of a conversation's earlier runs, as the model received them.

    Their `[notes]` sections and `[resources]` lines are left out: limits, sizes and
    timings there are sbx's figures, not output (cut markers are dropped when traced).
    """
    found = []
    for message in messages:
        content = message.get("content")
        if message.get("role") != "tool" or not isinstance(content, str):
            continue
        kept, in_notes = [], False
        for line in content.splitlines():
            if line in ("[stdout]", "[stderr]", "[notes]"):
                in_notes = line == "[notes]"
            if in_notes or line.startswith("[resources] "):
                continue
            kept.append(line)
        text = "\n".join(kept)
        found.append(Output(tool=EARLIER_RUN, call_id=str(message.get("tool_call_id")), text=text))
    return found


def check(state: RunState, answer: str) -> Provenance:
    """The answer's numbers traced to this run's outputs, then to earlier runs'."""
    outputs = [*earlier_outputs(state.messages[: state.history]), *state.outputs]
    return trace_numbers(answer, outputs, question=state.question)


def answer_ending(
    state: RunState,
    answer: str,
    settings: AgentSettings,
    tools: Sequence[dict[str, Any]],
    emit: EventSink,
) -> Ending | None:
    """`completed` with the verdict, or None after asking for the one validation turn."""
    report = check(state, answer)
    labels = check_parts(answer, report)
    relabel = labels.needs_turn(require_parts=settings.require_answer_parts)
    if (report.verified and not relabel) or state.pending is not None or not tools:
        return completed(answer, report)
    asked = [validation_request(report.unsupported) if not report.verified else "",
             parts_request(labels) if relabel else ""]
    message = {"role": "user", "content": "\n\n".join(text for text in asked if text)}
    estimate = estimate_tokens([*state.messages, message], tools)
    blocked = before_request(state, settings.budget, now=time.monotonic(), prompt_estimate=estimate)
    if blocked is not None:
        return completed(answer, report, note=f"no validation turn: {blocked.message}")
    state.pending = PendingAnswer(answer=answer, provenance=report)
    state.messages.append(message)
    emit(MessageAdded(run_id=state.run_id, turn=state.turns, message=message))
    return None


def completed(answer: str, report: Provenance, *, note: str = "") -> Ending:
    """The `completed` ending; its message names any unsupported number and mislabelled part."""
    labels = check_parts(answer, report)
    message = "The model answered."
    if not report.verified:
        count = len(report.unsupported)
        listed = ", ".join(report.unsupported[:10]) + (", ..." if count > 10 else "")
        message = (
            f"The model answered, but {count} number(s) in it were not printed by any output: "
            f"{listed}"
        )
    if labels.mislabelled:
        message = f"{message} {len(labels.mislabelled)} sentence(s) presented as measured are " \
                  "interpretation."
    if note:
        message = f"{message} ({note})"
    return Ending(status="completed", message=message, answer=answer, provenance=report,
                  parts=labels)


def settle_ending(state: RunState, ending: Ending) -> Ending:
    """A validation turn cut short (a budget, the endpoint) keeps the first answer, unverified."""
    pending = state.pending
    if pending is None or ending.status in _KEEP_STATUSES:
        return ending
    note = f"the validation turn ended {ending.status}: {ending.message}"
    return completed(pending.answer, pending.provenance, note=note)


MAX_TABLES = 4
"""DataFrame results one execution's record keeps for the page."""


def execution_record(outcome: ToolOutcome) -> ExecutionRecord | None:
    """The execution's own output for the transcript (None for other tools)."""
    result = outcome.execution
    if result is None:
        return None
    error = result.error
    return ExecutionRecord(
        stdout=result.stdout, stderr=result.stderr, exit_code=result.exit_code,
        error_type=error.type if error else None, error_message=error.message if error else None,
        traceback=error.traceback if error else None, timed_out=result.timed_out,
        oom_killed=result.oom_killed, state_reset=result.state_reset,
        duration_s=round(result.duration_s, 6),
        cpu_seconds=result.cpu_seconds, peak_memory_bytes=result.peak_memory_bytes,
        tables=[ResultTable.of(shown.data, shown.text) for shown in result.results
                if shown.data is not None][:MAX_TABLES],
    )

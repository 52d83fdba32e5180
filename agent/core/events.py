"""What happens in a conversation, as typed events: one discriminated union, one vocabulary.

The loop and the conversation report every happening as an event; the
transcript writes each one as a JSON line, the CLI renders them, and the
service will send them as Server-Sent Events. `parse_event` reads a
transcript line back into the same types (what `sbx replay` renders).

    conversation_start  a conversation opened: its id, who asked, its data
    run_start           one question's run: question, model, prompt version, budget, tools,
                        the data files' SHA-256
    message             a message the harness added (system prompt, question, notices)
    model_waiting       the run waits on the model: which model, seconds so far, retries
                        (subscribers only, once a second while a request is out)
    model_reply         the assistant message (text and tool calls), usage, timing
    output_chunk        live stdout or stderr of an execution while it runs (subscribers
                        only: never written to the transcript, where tool_result keeps it)
    tool_result         one observation exactly as the model received it, status, its outcome
                        in words, artifacts, and an execution's own stdout, stderr and error
    plan                the model saved its plan (the first or a revision): every step with
                        its status, and what changed since the previous one
    compaction          which older observations were shortened before a request
    run_end             how the run ended (status and outcome), the answer (completed only),
                        totals, and whether the answer's numbers were printed by an output
                        (verified, sources)
    run_error           an operator error stopped the run (engine, audit log)
    state_restored      a lost sandbox's state was rebuilt by replaying earlier executions
                        (or could not be): the loss's cause, how many, what differed, which
                        variables may differ

The outcome and cause words come from `sbx.agent.core.outcomes`, so every face
shows the same words; `sbx.agent.core.history` reads a transcript's events back
into what happened.

Events keep unknown keys (`extra="allow"`), so a newer transcript still
replays here and a field added by one emitter is never silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


class _Event(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    run_id: str | None = None
    """The run it belongs to (None for conversation-level events)."""


class ConversationStart(_Event):
    """A conversation opened; every later event of its transcript belongs to it."""

    type: Literal["conversation_start"] = "conversation_start"
    conversation_id: str
    """Shared by every run of the conversation, the sandbox's labels and the audit log."""
    principal: str
    """Who asks: the OS user on the CLI, the API key's principal over HTTP."""
    data: list[str] = Field(default_factory=list)
    """The data files given, as host paths."""
    label: str | None = None
    """Shown first (the demo's "scripted model")."""


class RunStart(_Event):
    """One question's run begins: what it is and what it may spend."""

    type: Literal["run_start"] = "run_start"
    conversation_id: str | None = None
    label: str | None = None
    question: str = ""
    model: str = ""
    base_url: str = ""
    prompt_version: str = ""
    policy_sha256: str = ""
    tools: list[str] = Field(default_factory=list)
    budget: dict[str, Any] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    data: list[str] = Field(default_factory=list)
    output_dir: str = ""
    image: str = ""
    principal: str | None = None
    data_sha256: dict[str, str] = Field(default_factory=dict)
    """SHA-256 of each data file when the run began, by its path under `/data`
    (`sales.csv`, `dir/a.csv`): re-run names a file that changed since."""
    sandbox_reset: bool = False
    """The sandbox was replaced since the previous run: earlier variables are gone."""
    reset_cause: str = ""
    """Why, with `sandbox_reset` (`sbx.agent.core.outcomes.LOSS_CAUSES`; "" in older files)."""
    reset_reason: str = ""
    """The same in words (`a cancel by the user`), as the model and every face read it."""
    continues: str | None = None
    """The run this one continues with the user's answer (it ended `needs_input`)."""


class MessageAdded(_Event):
    """A message the harness wrote: the system prompt, the question, a notice."""

    type: Literal["message"] = "message"
    turn: int = 0
    message: dict[str, Any]


class ModelWaiting(_Event):
    """The run waits on the model, so a slow one is not a hang; for watching, not transcribed.

    Sent every `WAITING_INTERVAL_S` while a request is out, and at once on a retry.
    """

    type: Literal["model_waiting"] = "model_waiting"
    turn: int
    """The turn the reply will be."""
    model: str
    """The model asked."""
    elapsed_s: float
    """Seconds since the request began, every attempt included."""
    retries: int = 0
    """Attempts that failed and were tried again so far."""
    retry_reason: str = ""
    """Why the last one was tried again (`HTTP 503`, `no answer within 60 s`)."""


WAITING_INTERVAL_S = 1.0
"""Seconds between two `model_waiting` events of one request."""
LIVE_ONLY = frozenset({"output_chunk", "model_waiting"})
"""Event types for watching a run as it happens: subscribers get them, transcripts do not."""


class ModelReplied(_Event):
    """The assistant's reply to one request."""

    type: Literal["model_reply"] = "model_reply"
    turn: int
    message: dict[str, Any]
    usage: dict[str, int] = Field(default_factory=dict)
    total_usage: dict[str, int] = Field(default_factory=dict)
    finish_reason: str | None = None
    duration_s: float = 0.0


MAX_TABLE_COLUMNS = 20
MAX_TABLE_ROWS = 50
MAX_TABLE_CELL = 100
"""A DataFrame result in an event: its first columns and rows, each cell this many characters."""


class ResultTable(BaseModel):
    """A DataFrame an execution showed (its rich result's `data`), bounded for the page."""

    model_config = ConfigDict(extra="allow", frozen=True)

    columns: list[str]
    rows: list[list[str | int | float | bool | None]]
    text: str | None = None
    """The value as the cell printed it on stdout (the page shows the table instead)."""

    @classmethod
    def of(cls, data: dict[str, list[Any]], text: str | None) -> ResultTable:
        """The first columns and rows of `{column: [values]}`, each cell bounded."""
        columns = list(data)[:MAX_TABLE_COLUMNS]
        height = min(MAX_TABLE_ROWS, max((len(data[c]) for c in columns), default=0))
        rows = [[_cell(data[c][i]) if i < len(data[c]) else None for c in columns]
                for i in range(height)]
        return cls(columns=[c[:MAX_TABLE_CELL] for c in columns], rows=rows, text=text)


def _cell(value: Any) -> str | int | float | bool | None:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)[:MAX_TABLE_CELL]


class ExecutionRecord(BaseModel):
    """One execution's own output, beside the observation (re-run and export read it)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    stdout: str = ""
    """stdout as the sandbox kept it."""
    stderr: str = ""
    """stderr as the sandbox kept it."""
    exit_code: int = 0
    error_type: str | None = None
    """The uncaught exception's class name, if the code raised."""
    error_message: str | None = None
    traceback: str | None = None
    timed_out: bool = False
    oom_killed: bool = False
    state_reset: bool = False
    """The interpreter was lost with it (timeout, OOM kill, a lost runner): the next
    execution started without this one's or any earlier variables."""
    duration_s: float = 0.0
    """Wall-clock seconds of the execution (the host's measure)."""
    cpu_seconds: float | None = None
    """CPU seconds the sandbox used, where its cgroup reports it (metrics read these three)."""
    peak_memory_bytes: int | None = None
    """Highest memory use during the execution, where its cgroup reports it."""
    tables: list[ResultTable] = Field(default_factory=list)
    """The DataFrames it showed (its rich results' data), for the page to draw as tables."""


MAX_OUTPUT_CHUNK_CHARS = 8192
"""Most characters of one `output_chunk` event: a longer chunk becomes several events."""


class OutputChunk(_Event):
    """Part of an execution's stdout or stderr, as the sandbox streamed it while the code ran.

    For watching a long execution (the CLI's progress, the service's events,
    MCP progress); the `tool_result` that follows holds the output as kept. The
    text is the sandboxed program's, so hostile: show it escaped. Bounded
    per event here, and per execution by the sandbox (the head of each stream).
    """

    type: Literal["output_chunk"] = "output_chunk"
    call_id: str
    """The id of the tool call whose execution printed it (`tool_result.call_id`)."""
    stream: Literal["stdout", "stderr"]
    text: str = Field(max_length=MAX_OUTPUT_CHUNK_CHARS)


def output_chunks(run_id: str, call_id: str, stream: str, text: str) -> list[OutputChunk]:
    """`text` as events of at most MAX_OUTPUT_CHUNK_CHARS characters each."""
    kind: Literal["stdout", "stderr"] = "stderr" if stream == "stderr" else "stdout"
    size = MAX_OUTPUT_CHUNK_CHARS
    return [
        OutputChunk(run_id=run_id, call_id=call_id, stream=kind, text=text[i : i + size])
        for i in range(0, len(text), size)
    ]


class ToolResult(_Event):
    """One tool call's observation, exactly as the model received it."""

    type: Literal["tool_result"] = "tool_result"
    turn: int
    call_id: str
    """The id the model's `tool` message carries."""
    audit_id: str | None = None
    """The gate's own id of the call (`<run_id>-c<n>`): what keys the audit records."""
    name: str
    status: str
    failed: bool
    rule: str | None = None
    duration_s: float = 0.0
    content: str
    artifacts: list[str] = Field(default_factory=list)
    execution: ExecutionRecord | None = None
    """For `execute_python`: stdout, stderr and the error apart (None in older transcripts)."""
    outcome: str = ""
    """How the call ended, in the one vocabulary (`sbx.agent.core.outcomes.call_outcome`:
    `ok`, `error`, `timed out`, `cancelled`...); "" in older transcripts."""


class PlanStepRecord(BaseModel):
    """One step of a plan as recorded (`sbx.tools.builtin.plan.PlanStep`); model-written."""

    model_config = ConfigDict(extra="allow", frozen=True)

    description: str
    status: str
    """`pending`, `in_progress`, `done` or `dropped`."""
    tool: str | None = None


class PlanChange(BaseModel):
    """What one revision changed about one step."""

    model_config = ConfigDict(extra="allow", frozen=True)

    change: str
    """`added`, `removed` (left out of the new plan) or `status`."""
    step: str
    """The step's description."""
    before: str | None = None
    """The status it had (None when added)."""
    after: str | None = None
    """The status it has now (None when removed)."""


class PlanUpdated(_Event):
    """The model saved its plan through `update_plan`: the whole plan and what changed."""

    type: Literal["plan"] = "plan"
    turn: int = 0
    call_id: str = ""
    """The `update_plan` call that saved it."""
    revision: int = 1
    """1 for the conversation's first plan, then one more per revision."""
    steps: list[PlanStepRecord] = Field(default_factory=list)
    changes: list[PlanChange] = Field(default_factory=list)
    note: str = ""
    """Why it changed, as the model said (model-written)."""


class Compaction(_Event):
    """Older observations were shortened to keep the context under its bound."""

    type: Literal["compaction"] = "compaction"
    turn: int
    shortened: list[int]
    estimate: int


class SourceRecord(BaseModel):
    """Where one number of the answer was printed (`sbx.agent.provenance.trace.Source`)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    number: str
    tool: str = ""
    call_id: str = ""
    audit_id: str = ""
    execution: int | None = None
    line: int = 0
    text: str = ""


class AnswerPartsRecord(BaseModel):
    """An answer's parts (`sbx.agent.provenance.parts.AnswerParts`)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    measured: str = ""
    interpretation: str = ""
    assumptions: str = ""
    unmarked: str = ""
    """The whole answer when it has no parts."""


class RunEnd(_Event):
    """How a run ended (`sbx.agent.core.state.RunResult.as_dict`)."""

    type: Literal["run_end"] = "run_end"
    status: str
    outcome: str = ""
    """The status in the one vocabulary (`sbx.agent.core.outcomes.run_outcome`)."""
    answer: str | None = None
    message: str = ""
    turns: int = 0
    tool_calls: int = 0
    usage: dict[str, int] = Field(default_factory=dict)
    duration_s: float = 0.0
    artifacts: list[str] = Field(default_factory=list)
    sandbox: dict[str, Any] = Field(default_factory=dict)
    verified: bool | None = None
    """Every number of the answer was printed by an output (None without an answer)."""
    sources: list[SourceRecord] = Field(default_factory=list)
    unsupported: list[str] = Field(default_factory=list)
    """Numbers of the answer no output printed."""
    parts: AnswerPartsRecord | None = None
    """The answer's measured part, interpretation and assumptions (None before they existed)."""
    mislabelled: list[str] = Field(default_factory=list)
    """Sentences presented as measured that explain, guess or state an untraced number."""
    plan: list[PlanStepRecord] = Field(default_factory=list)
    """The final plan (empty when the model wrote none)."""
    plan_revision: int = 0
    """The final plan's revision number (0: no plan)."""
    plan_pending: list[str] = Field(default_factory=list)
    """Steps of the final plan still pending or in progress when the run answered."""
    cost: dict[str, Any] | None = None
    """What the run cost by the policy's price table (`agent.core.cost.Cost.as_dict`)."""


class CellDifference(BaseModel):
    """One replayed execution that did not come back as recorded."""

    model_config = ConfigDict(extra="allow", frozen=True)

    call_id: str
    """The recorded call's id (the model's)."""
    detail: str
    """What differs, in words (`line 1: 1.7e9 recorded, 1.7e9 now`), or why it failed."""
    variables: list[str] = Field(default_factory=list)
    """Names the execution assigns: their values may differ from the conversation's."""


class StateRestored(_Event):
    """A lost sandbox's state, rebuilt (or not) by replaying the conversation's executions."""

    type: Literal["state_restored"] = "state_restored"
    status: Literal["restored", "partial", "not_restored"]
    """`restored`: every cell as recorded; `partial`: some differ or failed; `not_restored`:
    a bound or the engine stopped it (the sandbox is fresh, as without restore)."""
    cells: int = 0
    """Executions the replay had to re-run."""
    replayed: int = 0
    """Executions re-run, in order, before it ended."""
    from_snapshot: int = 0
    """Executions whose state a snapshot brought back instead (`sbx.agent.core.snapshot`)."""
    snapshot: str = ""
    """Why a snapshot was not used, when there was one (then every cell was replayed)."""
    differed: list[CellDifference] = Field(default_factory=list)
    """Re-run without error, but their output differs from the record."""
    failed: list[CellDifference] = Field(default_factory=list)
    """Raised, timed out or were refused now although they succeeded then."""
    variables: list[str] = Field(default_factory=list)
    """Every variable whose value may differ (from `differed` and `failed`)."""
    reason: str = ""
    """Why it was lost (`an idle release`, `a timeout`...) and, when not restored, why not."""
    cause: str = ""
    """The loss's cause (`sbx.agent.core.outcomes.LOSS_CAUSES`: `idle_release`, `cancel`,
    `reset`...); "" in older transcripts."""
    duration_s: float = 0.0
    cpu_seconds: float = 0.0


class RunError(_Event):
    """An error the operator must fix stopped the run."""

    type: Literal["run_error"] = "run_error"
    error: str


Event = Annotated[
    ConversationStart
    | RunStart
    | MessageAdded
    | ModelWaiting
    | ModelReplied
    | OutputChunk
    | ToolResult
    | PlanUpdated
    | Compaction
    | RunEnd
    | RunError
    | StateRestored,
    Field(discriminator="type"),
]
EventSink = Callable[[Event], None]
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)
KNOWN_TYPES = frozenset(
    str(model.model_fields["type"].default)
    for model in (
        ConversationStart, RunStart, MessageAdded, ModelWaiting, ModelReplied, OutputChunk,
        ToolResult, PlanUpdated, Compaction, RunEnd, RunError, StateRestored,
    )
)


def parse_event(data: object) -> Event | None:
    """A transcript line's event; None for a type this version does not know (skipped).

    Raises `ValueError` when a known type is malformed.
    """
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ValueError("not a transcript event (no 'type')")
    if data["type"] not in KNOWN_TYPES:
        return None
    try:
        return _EVENT.validate_python(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"][1:]) or "event"
        raise ValueError(f"malformed {data['type']} event: {where}: {first['msg']}") from None


def discard(event: Event) -> None:
    """The sink that keeps nothing."""


def fanout(*sinks: EventSink) -> EventSink:
    """One sink that feeds each event to every sink, in order."""

    def emit(event: Event) -> None:
        for sink in sinks:
            sink(event)

    return emit

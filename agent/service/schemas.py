"""The wire types: every request body is validated here, every response is built from here.

Requests forbid unknown keys (`extra="forbid"`): a typo is a 422 naming the
field, never a silently ignored option. Responses are the same pydantic
models, so `/openapi.json` is generated from exactly what is sent.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sbx.agent import LimitsRequest

MAX_DATASETS = 20


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CreateConversation(_Request):
    """`POST /v1/conversations`."""

    datasets: list[str] = Field(default_factory=list, max_length=MAX_DATASETS)
    """Ids of your datasets, mounted read-only at `/data/<name>`."""
    model: str | None = Field(default=None, max_length=128)
    """A model the operator allows (`[service] models`); default the configured one."""
    limits: LimitsRequest | None = None
    """Lower limits for this conversation's sandbox (memory, cpus, pids, timeout, runtime,
    network); above the policy's `[sandbox]` is a 422 naming the knob."""


class AskQuestion(_Request):
    """`POST /v1/conversations/{id}/questions`."""

    question: str = Field(min_length=1)
    """The question; follow-ups see the variables of the conversation's earlier runs."""


class AnswerQuestion(_Request):
    """`POST /v1/conversations/{id}/answer`: the user's answer to a run's `ask_user`."""

    answer: str = Field(min_length=1)
    """The answer; a new run continues the paused one with it (the same sandbox if alive)."""


class ExecuteCode(_Request):
    """`POST /v1/execute`: one program in a sandbox of its own, for callers with their own agent."""

    code: str = Field(min_length=1)
    """Python source (at most the policy's `max_code_bytes`)."""
    datasets: list[str] = Field(default_factory=list, max_length=MAX_DATASETS)
    """Ids of your datasets, mounted read-only at `/data/<name>`."""
    limits: LimitsRequest | None = None
    """Lower limits for this execution."""


class DatasetOut(BaseModel):
    """A dataset you uploaded."""

    id: str
    name: str
    """The name it has in the sandbox: `/data/<name>`."""
    format: str
    size: int
    sha256: str
    created_at: float
    preview: str | None = None
    """What the model is told about the file (columns, dtypes, first rows) when it is used;
    for text, the encoding it came in (text is stored as UTF-8)."""


class NoteIn(BaseModel):
    """A note's text (a new note on the dataset, or new text for one)."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=10_000)
    """What the note says; the policy's `[tools.remember] max_chars` bounds it."""


class NoteOut(BaseModel):
    """A note about a dataset: context the model sees in later conversations, never a fact."""

    id: str
    dataset: str
    """The dataset's name (`/data/<name>`); a note holds for every upload of that name."""
    text: str
    """Written by a person or the model (escape it where shown)."""
    author: str
    """Who wrote it (the model writes on behalf of the principal who asked)."""
    team: str | None
    """The team it is shared with (None: its author's alone)."""
    by_model: bool
    """Saved by the model's `remember` tool."""
    stale: bool
    """This dataset's content differs from the one the note was written about."""
    created_at: float
    updated_at: float


class ArtifactOut(BaseModel):
    """A file a run saved under `/output`."""

    name: str
    size: int
    content_type: str
    url: str


class PlanStepOut(BaseModel):
    """One step of a run's final plan, as the model wrote it (escape it where shown)."""

    description: str
    status: Literal["pending", "in_progress", "done", "dropped"]
    tool: str | None = None


class AnswerPartsOut(BaseModel):
    """A completed answer in its parts, as the model wrote them (escape them where shown)."""

    measured: str = ""
    """The direct answer and what the code measured (its numbers are in the run's sources)."""
    interpretation: str = ""
    """Conclusions the model drew from the measurements."""
    assumptions: str = ""
    """What the model took for granted about the data."""
    unmarked: str = ""
    """The whole answer when the model did not separate it into parts."""


class RunOut(BaseModel):
    """A run: a question in a conversation, or one `/v1/execute` call."""

    id: str
    kind: Literal["question", "execute"]
    conversation_id: str | None
    status: str
    """`queued`, `running`, then one of the agent's endings (`completed`, `step_limit`, ...,
    `cancelled`), `error` (the sandbox or host failed) or `interrupted` (its replica died)."""
    outcome: str = ""
    """The status in the words every face shows (`completed`, `limit reached (steps)`,
    `cancelled`, `interrupted by a restart`...)."""
    question: str
    answer: str | None
    message: str
    verified: bool | None = None
    """Every number the answer states was printed by the run's code (None: no answer, or
    no number in it), as the page and the CLI show it."""
    sources: list[dict[str, Any]] = Field(default_factory=list)
    """Where each number of the answer was printed: `number`, `execution`, `line`, `text`."""
    unsupported: list[str] = Field(default_factory=list)
    """Numbers of the answer no output printed."""
    result: dict[str, Any] | None
    """Usage, sandbox totals (executions, CPU seconds, peak memory), turns, tool calls."""
    asked: str | None = None
    """What the model asked the user (`ask_user`) when the run ended `needs_input`: answer
    it with `POST /v1/conversations/{id}/answer`, and a new run continues."""
    artifacts: list[ArtifactOut] = Field(default_factory=list)
    plan: list[PlanStepOut] = Field(default_factory=list)
    """The model's final plan (`update_plan`), once the run has ended; its revisions are
    `plan` events in the run's event stream."""
    plan_pending: list[str] = Field(default_factory=list)
    """Steps of the final plan the answer leaves pending or in progress."""
    parts: AnswerPartsOut | None = None
    """A completed answer's parts: what was measured apart from interpretation and
    assumptions (None for other runs)."""
    mislabelled: list[str] = Field(default_factory=list)
    """Sentences the answer presents as measured that explain, guess or state a number no
    output printed."""
    cost: dict[str, Any] | None = None
    """What the run cost once it ended: `total`, `model`, `sandbox`, `currency`, `estimated`
    (some token count was estimated), `priced` (its model had a price)."""
    team: str | None = None
    """The team whose budget the run counts toward (None: no team)."""
    created_at: float
    started_at: float | None
    ended_at: float | None
    events_url: str


class RunAccepted(BaseModel):
    """The answer to a question being posted: the run started (or queued)."""

    run_id: str
    status: str
    url: str
    events_url: str


class ConversationOut(BaseModel):
    """A conversation."""

    id: str
    status: str
    """`active`, `closed` (deleted) or `interrupted` (its replica died or shut down)."""
    datasets: list[str]
    model: str
    limits: dict[str, Any]
    sandbox: str
    """`none` (not started), `held`, or `released` (idle; the next question gets a fresh one)."""
    message: str
    created_at: float
    last_active_at: float
    runs: list[str] = Field(default_factory=list)


class ExecutionOut(BaseModel):
    """The result of `POST /v1/execute`."""

    run_id: str
    status: str
    """`ok`; `error` (the code raised, timed out or was killed); `denied` by the policy."""
    observation: str
    """The result as the tool gate renders it for a model."""
    execution: dict[str, Any] | None
    """stdout, stderr, exit code, error, timed_out, oom_killed, duration, CPU, peak memory."""
    artifacts: list[ArtifactOut] = Field(default_factory=list)


class Listing(BaseModel):
    """A list of resources."""

    items: list[Any]

"""What a tool receives for one run: the `ToolContext`, and the `CodeRunner` it may call.

The gate injects the context into any tool function that declares a parameter
annotated `ToolContext`; that parameter never appears in the tool's schema, so
the model can neither see nor forge it. `tools` depends on the `CodeRunner`
protocol, not on a concrete sandbox class, so the CLI can hand in a session,
a fresh-container runner, or a test double that really runs code.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from sbx.sandbox.live_output import OutputCallback
from sbx.sandbox.result import ExecutionResult

OutputSink = Callable[[str, str, str], None]
"""`sink(call_id, stream, text)`: an execution's stdout or stderr while it runs."""


class CodeRunner(Protocol):
    """Runs one program in the run's sandbox and reports what happened (bad code is data)."""

    def run(
        self,
        code: str,
        *,
        on_output: OutputCallback | None = None,
        timeout: float | None = None,
        show_values: bool = True,
        print_values: bool = True,
    ) -> ExecutionResult:
        """Execute `code` and return its result; raise only for errors the operator must fix.

        `on_output(stream, text)`, when given, receives stdout and stderr while the code
        runs (a runner that cannot stream may ignore it: the result has the output).
        `timeout`, when given, is the run's time left: the execution must end by then
        (a runner shortens its own limit to it, never lengthens it). `show_values=False`:
        print no trailing expression's value (a one-shot program's stdout is its own);
        `print_values=False`: that value is a result only, not printed (a notebook's way).
        """
        ...


class DataDrop(Protocol):
    """Where a host-side tool leaves a file for the run's sandbox: its `/data`, while it runs."""

    def put(self, name: str, data: bytes) -> str:
        """Keep `data` as file `name` (a plain, checked name) and return its path in the sandbox.

        A file of that name from an earlier call is replaced; the running sandbox sees the
        new file at once, and a sandbox that replaces it later sees it too.
        """
        ...


class Operator(Protocol):
    """A person the face can ask now (at a terminal); `ask_user` goes to them."""

    def ask(self, question: str, *, stop: threading.Event, timeout: float) -> str | None:
        """Their answer; None when they gave none (end of input, `stop` set, `timeout` passed)."""
        ...


class NoteKeeper(Protocol):
    """Where `remember` saves a note: the conversation's notes, for its principal."""

    def remember(self, dataset: str, text: str) -> str:
        """Save `text` about `dataset` (a name under /data); the confirmation for the model.

        Raises `ValueError` (its message for the model) when the note is refused.
        """
        ...


class PlanBook:
    """A run's count of accepted `update_plan` calls (the plan itself is the agent's state).

    The gate reserves a revision when it allows a call (`reserve`), the tool
    numbers it (`accepted`); `written` tells whether this run has a plan yet.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reserved = 0
        self._accepted = 0

    def reserve(self, limit: int) -> bool:
        """Reserve one revision; False when `limit` revisions were reserved already."""
        with self._lock:
            if self._reserved >= limit:
                return False
            self._reserved += 1
            return True

    def accepted(self) -> int:
        """Count one saved revision; returns its number in this run (1, 2, ...)."""
        with self._lock:
            self._accepted += 1
            return self._accepted

    @property
    def written(self) -> bool:
        """Whether a plan was allowed in this run (code may then run where a plan is required)."""
        with self._lock:
            return self._reserved > 0


@dataclass(kw_only=True)
class ToolContext:
    """What the built-in tools need for one agent run, chosen by the operator, not the model."""

    run_id: str
    """The run's id: shared by the audit log, the transcript and the sandbox labels."""
    runner: CodeRunner | None
    """Where `execute_python` sends code; `None` when no sandbox was started for this run."""
    data_paths: list[Path] = field(default_factory=list)
    """Files or directories the operator gave with `--data`; the only files data tools can read."""
    principal: str = "local"
    """Who asked, as the face authenticated them (the OS user on the CLI, the API key's
    principal over HTTP); written into every audit record. The model never sets it."""
    team: str | None = None
    """The principal's team (a key's, or a signed-in person's from the provider's claim);
    written into every audit record beside the principal. The model never sets it."""
    conversation_id: str | None = None
    """The conversation this run belongs to (follow-up questions share one)."""
    operator: Operator | None = None
    """Who answers `ask_user` now (the operator at a terminal); None: no one at this moment."""
    defer_questions: bool = False
    """Without an operator, `ask_user` ends the run `needs_input` and the face continues it
    later with the answer; with neither, `ask_user` is not offered at all."""
    continues: str | None = None
    """The run this one continues (after `needs_input`); named in the audit's `run_start`."""
    stop: threading.Event = field(default_factory=threading.Event)
    """Set when the run is cancelled: a tool waiting for a person stops waiting."""
    on_output: OutputSink | None = None
    """Where `execute_python` sends stdout and stderr while the code runs (the conversation
    turns them into `output_chunk` events); None: nowhere, the result alone."""
    observation_chars: int | None = None
    """Most characters of one tool result the model reads (`AgentSettings.observation_tokens`
    times four); longer output is cut to its head and tail with a marker. None: unbounded."""
    deadline: float | None = None
    """`time.monotonic()` past which the run's time budget (`--max-time`) is spent: an
    execution is cut there, as a model request is. None: only the sandbox's own timeout."""
    show_values: bool = True
    """Print a program's trailing expression's value, as a notebook does; False for a
    one-shot program (`sbx exec`, `POST /v1/execute`), whose stdout is exactly its own."""
    print_values: bool = True
    """With `show_values`, also print the value (sbx's agent reads it beside the output);
    False: a result only, as a notebook's stdout never holds it (E2B's `run_code`)."""
    plan: PlanBook = field(default_factory=PlanBook)
    """This run's plan revisions, counted (shared by every call's copy of the context)."""
    data_drop: DataDrop | None = None
    """Where `query_sql` writes its results (the workspace's `/data/queries`); None: no
    sandbox in this run, so no query result has anywhere to go."""
    notes: NoteKeeper | None = None
    """Where `remember` saves notes (the face's note store); None: no notes, no `remember`."""
    call_id: str | None = None
    """The call being served: the gate sets it on the copy each call receives (`for_call`)."""

    def who(self) -> dict[str, str]:
        """The principal, and the team when there is one: what every audit record names."""
        return {"principal": self.principal, **({"team": self.team} if self.team else {})}

    def for_call(self, call_id: str) -> ToolContext:
        """This context for one call: the same run, `stop` event and sinks, and its call id."""
        return replace(self, call_id=call_id)

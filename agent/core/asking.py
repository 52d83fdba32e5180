"""The model asked the user: ending a run `needs_input`, and continuing it with the answer.

`ask_user` (`sbx.tools.builtin.ask_user`) either gets an answer at once (an
operator at a terminal: the answer is the call's observation and the run goes
on) or, where nobody can answer now, returns an `InputRequest`. The loop then
ends the run `needs_input` with the question (`awaiting_input`). The face
continues it later: `Conversation.answer` runs a new run in the same
conversation whose first message carries the answer (`answer_message`), whose
records name the run it continues, and whose sandbox is the same one if it is
still alive, or a fresh one, in which case the model is told its variables
are gone. `PendingQuestion` holds the open question and lets exactly one answer
take it, even when two arrive at once.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from sbx.agent.core.state import Ending
from sbx.tools.builtin.ask_user import InputRequest
from sbx.tools.outcome import ToolOutcome


@dataclass(frozen=True, kw_only=True)
class PendingInput:
    """A run that ended `needs_input`, waiting for the user's answer."""

    run_id: str
    """The run that asked."""
    question: str
    """What the model asked."""


class PendingQuestion:
    """The question a run left open, and the one answer that may take it (thread-safe).

    A face that queues an answer before it runs `claim`s the question first, in one
    step: a second answer, even at the same moment, finds it taken. `take` (the
    answering run) consumes it when unclaimed or claimed by that run.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._input: PendingInput | None = None
        self._claimed: str | None = None

    @property
    def value(self) -> PendingInput | None:
        """The open question, None when no run waits for an answer."""
        return self._input

    def set(self, pending: PendingInput | None) -> None:
        """A run asked (or a new question or a restore replaced the question): claims end."""
        with self._lock:
            self._input, self._claimed = pending, None

    def claim(self, run_id: str) -> PendingInput:
        """Reserve the question for `run_id`'s answer; `ValueError` when none or taken."""
        with self._lock:
            if self._input is None or self._claimed is not None:
                raise ValueError("no run of this conversation is waiting for an answer")
            self._claimed = run_id
            return self._input

    def unclaim(self, run_id: str) -> None:
        """Give back what `run_id` claimed and will not answer (idempotent)."""
        with self._lock:
            if self._claimed == run_id:
                self._claimed = None

    def take(self, run_id: str) -> PendingInput:
        """Consume the question for `run_id`; `ValueError` when none or claimed by another."""
        with self._lock:
            pending = self._input
            if pending is None or self._claimed not in (None, run_id):
                raise ValueError("no run of this conversation is waiting for an answer")
            self._input, self._claimed = None, None
            return pending


def awaiting_input(outcomes: Sequence[ToolOutcome]) -> Ending | None:
    """The run's ending when one of the calls passed a question to the user, else None."""
    for outcome in outcomes:
        if outcome.status == "ok" and isinstance(outcome.value, InputRequest):
            question = outcome.value.question
            return Ending(
                status="needs_input",
                message="The model asked the user a question; continue the run with the answer",
                question=question,
            )
    return None


def answer_message(pending: PendingInput, answer: str) -> str:
    """The message that continues a run: the question it answers and the user's answer."""
    return f"[sbx] The user answered your question ({pending.question!r}):\n\n{answer}"

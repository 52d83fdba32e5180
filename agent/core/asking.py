"""The model asked the user: ending a run `needs_input`, and continuing it with the answer.

`ask_user` (`sbx.tools.builtin.ask_user`) either gets an answer at once (an
operator at a terminal: the answer is the call's observation and the run goes
on) or, where nobody can answer now, returns an `InputRequest`. The loop then
ends the run `needs_input` with the question (`awaiting_input`). The face
continues it later: `Conversation.answer` runs a new run in the same
conversation whose first message carries the answer (`answer_message`), whose
records name the run it continues, and whose sandbox is the same one if it is
still alive, or a fresh one, in which case the model is told its variables
are gone.
"""

from __future__ import annotations

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

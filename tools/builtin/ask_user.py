"""`ask_user`: the model asks the person who asked, when it cannot go on without them.

Offered only where someone can answer (`sbx.tools.context.ToolContext`): an
operator at a terminal is asked at once and the answer is the observation; a
face that can continue a run later (`sbx ask` without a terminal, the
service) lets the call end the run `needs_input`, carrying the question, and
continues it with the answer (`sbx ask --continue RUN_ID "answer"`). Where
neither holds the tool is not registered, so the model never sees it.

The question is model-written: it is bounded here and escaped by whatever
face shows it. The answer is the operator's, bounded too.
"""

from __future__ import annotations

from dataclasses import dataclass

from sbx.tools.context import ToolContext
from sbx.tools.policy import AskUserRule
from sbx.tools.registry import Tool, ToolFailure, ToolReturn, build_tool

MAX_QUESTION_CHARS = 2000
"""Longest question the model may ask (it is shown to a person, and kept in the run's result)."""
MAX_ANSWER_CHARS = 10_000
"""Longest answer kept; the rest is cut with a marker."""
PENDING_TEXT = (
    "[sbx] Your question was passed to the user. This run ends here; it continues when they "
    "answer."
)


@dataclass(frozen=True, kw_only=True)
class InputRequest:
    """The value of a deferred `ask_user` call: the loop ends the run `needs_input` with it."""

    question: str
    """The model's question, as it asked it (bounded)."""


def make_ask_user(rule: AskUserRule) -> Tool:
    """The `ask_user` tool; its operator and whether it may defer come from the run's context."""

    def ask_user(question: str, ctx: ToolContext) -> ToolReturn:
        """Ask the user a question and get their answer, when you cannot go on without it.

        Use it only for what the data and the question cannot tell you (which of two
        columns they mean, a threshold they care about); never for permission to run code.

        Args:
            question: One short, specific question for the user.
            ctx: The run's context, injected by the gate (not part of the schema).
        """
        question = question.strip()
        if not question:
            raise ToolFailure("the question is empty; ask one short, specific question")
        if len(question) > MAX_QUESTION_CHARS:
            raise ToolFailure(f"the question is longer than {MAX_QUESTION_CHARS} characters")
        if ctx.operator is not None:
            answer = ctx.operator.ask(question, stop=ctx.stop, timeout=rule.timeout)
            if answer is None:
                raise ToolFailure(
                    "the user gave no answer; go on without it and say what you assumed"
                )
            kept = bounded_answer(answer)
            return ToolReturn(text=f"The user answered: {kept}", value=kept,
                              audit={"answered": True})
        if ctx.defer_questions:
            return ToolReturn(text=PENDING_TEXT, value=InputRequest(question=question),
                              audit={"needs_input": True})
        raise ToolFailure("no one can answer questions in this run; answer with what you have")

    return build_tool(ask_user)


def bounded_answer(answer: str) -> str:
    """The answer, stripped, at most `MAX_ANSWER_CHARS` (the cut is marked)."""
    answer = answer.strip()
    if len(answer) <= MAX_ANSWER_CHARS:
        return answer
    return f"{answer[:MAX_ANSWER_CHARS]} [answer cut at {MAX_ANSWER_CHARS} characters]"


def answerable(context: ToolContext) -> bool:
    """Whether someone can answer `ask_user` in this run, now or later."""
    return context.operator is not None or context.defer_questions

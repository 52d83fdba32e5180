"""Bounded context: shorten older tool observations when the conversation nears its size.

Before each request the conversation's size is estimated (4 characters per
token, the usual rule of thumb for English and code; no tokenizer is
shipped, since each endpoint has its own). Past `AgentSettings.context_tokens`,
the oldest observations are cut to their head and tail, oldest first, until
the estimate is back under three quarters of the limit, so this does not
happen again on the very next turn.

Never shortened: the system prompt (it carries the data preview) and the
user's question (only `tool` messages are touched at all); the newest failed
observation (the model is fixing it); the data tools' previews; the newest
`update_plan` observation (the current plan); and every observation of the
latest turn (the model has not read them yet). Earlier runs' observations (a
conversation's history) are shortened first. The
transcript recorded each observation whole when it was appended, so nothing
is lost, only left out of what the model is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sbx.agent.core.state import RunState
from sbx.agent.model.request_size import CHARS_PER_TOKEN, request_chars

SHRINK_TO = 0.75
"""After shortening, aim for this fraction of the limit."""
HEAD_CHARS = 600
TAIL_CHARS = 300
DATA_TOOLS = frozenset({"preview_data_file", "list_data_files"})


def shorten_observations(
    state: RunState, *, limit_tokens: int, tools: Sequence[dict[str, Any]]
) -> list[int]:
    """Shorten old observations in place if the context is over the limit; return their indexes.

    Earlier runs' observations (the conversation's history) go first, oldest first, then
    this run's: a follow-up question is never refused for what an earlier answer read.
    """
    chars = request_chars(state.messages, tools)
    if chars // CHARS_PER_TOKEN <= limit_tokens:
        return []
    target = int(limit_tokens * SHRINK_TO) * CHARS_PER_TOKEN
    done: list[int] = []
    for index in candidates(state):
        if chars <= target:
            break
        message = state.messages[index]
        text = str(message.get("content") or "")
        short = shorten_text(text)
        if short is None:
            continue
        state.messages[index] = {**message, "content": short}
        chars -= len(text) - len(short)
        done.append(index)
    state.shortened += len(done)
    return done


def candidates(state: RunState) -> list[int]:
    """Indexes of the observations that may be shortened, in the order they are tried."""
    earlier = [
        index
        for index, message in enumerate(state.messages[: state.history])
        if message.get("role") == "tool"
    ]
    keep = protected_indexes(state)
    return earlier + [o.index for o in state.observations if o.index not in keep]


def protected_indexes(state: RunState) -> set[int]:
    """Observations kept whole: newest failure, data previews, current plan, latest turn's."""
    if not state.observations:
        return set()
    latest = max(observation.turn for observation in state.observations)
    keep = {
        o.index for o in state.observations if o.turn == latest or o.tool in DATA_TOOLS
    }
    failed = [o.index for o in state.observations if o.failed]
    if failed:
        keep.add(failed[-1])
    plans = [o.index for o in state.observations if o.tool == "update_plan" and not o.failed]
    if plans:  # the current plan is never cut
        keep.add(plans[-1])
    return keep


def shorten_text(text: str) -> str | None:
    """Head and tail of `text` with a marker, or None when it is already short."""
    if len(text) <= HEAD_CHARS + TAIL_CHARS + 200:
        return None
    cut = len(text) - HEAD_CHARS - TAIL_CHARS
    marker = (
        f"\n[... {cut} characters of this older observation were cut to save context; "
        "re-run the code if you need them ...]\n"
    )
    return text[:HEAD_CHARS] + marker + text[-TAIL_CHARS:]

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
latest turn (the model has not read them yet). The
transcript recorded each observation whole when it was appended, so nothing
is lost, only left out of what the model is sent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sbx.agent.core.state import RunState

CHARS_PER_TOKEN = 4
SHRINK_TO = 0.75
"""After shortening, aim for this fraction of the limit."""
HEAD_CHARS = 600
TAIL_CHARS = 300
DATA_TOOLS = frozenset({"preview_data_file", "list_data_files"})


def estimate_tokens(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> int:
    """Estimated prompt tokens of a request: its JSON size over `CHARS_PER_TOKEN`."""
    return _chars(messages, tools) // CHARS_PER_TOKEN + 1


def _chars(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> int:
    return len(json.dumps(list(messages), ensure_ascii=False)) + len(json.dumps(list(tools)))


def shorten_observations(
    state: RunState, *, limit_tokens: int, tools: Sequence[dict[str, Any]]
) -> list[int]:
    """Shorten old observations in place if the context is over the limit; return their indexes."""
    chars = _chars(state.messages, tools)
    if chars // CHARS_PER_TOKEN <= limit_tokens:
        return []
    target = int(limit_tokens * SHRINK_TO) * CHARS_PER_TOKEN
    keep = protected_indexes(state)
    done: list[int] = []
    for observation in state.observations:
        if chars <= target:
            break
        if observation.index in keep:
            continue
        message = state.messages[observation.index]
        text = str(message.get("content") or "")
        short = shorten_text(text)
        if short is None:
            continue
        state.messages[observation.index] = {**message, "content": short}
        chars -= len(text) - len(short)
        done.append(observation.index)
    state.shortened += len(done)
    return done


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

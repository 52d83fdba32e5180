"""`RequestGuard`: the data guard over everything one run sends to the model provider.

The gate filters observations and the prompt filters its data summary as they
are made, which saves work; this is the guarantee. `ModelClient.complete`
passes every request through it, whatever built the messages: the system
prompt, observations, harness notes (a repeated failure's notice), restore
notes, chart descriptions, plans, the questions `ask_user` put, compaction
summaries, tool errors, hints, the model's own earlier text and code. Every
string of every message is filtered, except the protocol's own fields (role,
ids, part types, the name of the function called). A tool call's arguments
are JSON: their strings are filtered one by one, so the JSON stays valid.

Images: a chart shown to a vision model travels as image parts beside its
description (file name, titles, axis labels). Pixels cannot be scanned, so
when the guard replaces anything in a message's text, that message's images
are withheld too (`IMAGE_WITHHELD`): an image is sent only after its own text
passed the guard unchanged (security.md).

Each distinct text is filtered once per run (the history is resent every
turn); what is replaced is reported once, by count, to `on_redaction` (the
audit log), never the value.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sbx.tools.guard import DataGuard

IMAGE_WITHHELD = "[an image was withheld: its description held data the guard replaced]"
PROTOCOL_KEYS = frozenset({"role", "tool_call_id", "id", "type"})
"""Message fields that are the protocol's, never data (the call's function `name` is too)."""
MAX_REMEMBERED = 4096
"""Distinct texts remembered per run (beyond them, a text is filtered again each time)."""


class _Tally:
    """What filtering one message did: replacements newly counted, whether any text changed."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.changed = False


class RequestGuard:
    """The data guard of one run's principal, applied to each request's messages."""

    def __init__(
        self, guard: DataGuard, *, on_redaction: Callable[[dict[str, int]], None] | None = None
    ) -> None:
        self.guard = guard
        self._on_redaction = on_redaction
        self._seen: dict[str, str] = {}

    def messages(self, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The messages as they may leave: every data string filtered, images per the policy."""
        counts: Counter[str] = Counter()
        sent = []
        for message in messages:
            tally = _Tally()
            sent.append(self._message(message, tally))
            counts.update(tally.counts)
        if counts and self._on_redaction is not None:
            self._on_redaction(dict(counts))
        return sent

    def _message(self, message: Mapping[str, Any], tally: _Tally) -> dict[str, Any]:
        guarded: dict[str, Any] = {key: self._field(key, value, tally)
                                   for key, value in message.items()}
        content = guarded.get("content")
        if tally.changed and isinstance(content, list):
            guarded["content"] = [
                {"type": "text", "text": IMAGE_WITHHELD} if _is_image(part) else part
                for part in content
            ]
        return guarded

    def _field(self, key: str, value: Any, tally: _Tally) -> Any:
        if key in PROTOCOL_KEYS:
            return value
        if key == "tool_calls" and isinstance(value, list):
            return [self._call(call, tally) for call in value]
        return self._value(value, tally)

    def _call(self, call: Any, tally: _Tally) -> Any:
        """A tool call the model made: its id, type and function name kept, arguments filtered."""
        if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
            return self._value(call, tally)
        function = dict(call["function"])
        if isinstance(function.get("arguments"), str):
            function["arguments"] = self._arguments(function["arguments"], tally)
        return {**call, "function": function}

    def _arguments(self, text: str, tally: _Tally) -> str:
        """JSON arguments with each string (and each number the guard would replace) filtered."""
        try:
            parsed = json.loads(text)
        except ValueError:
            return self._text(text, tally)
        changed, tally.changed = tally.changed, False
        guarded = self._value(parsed, tally, numbers=True)
        shown = json.dumps(guarded, ensure_ascii=False) if tally.changed else text
        tally.changed = tally.changed or changed
        return shown

    def _value(self, value: Any, tally: _Tally, *, numbers: bool = False) -> Any:
        if isinstance(value, str):
            return self._text(value, tally)
        if isinstance(value, Mapping):
            if _is_image(value):
                return value
            return {key: value[key] if key in PROTOCOL_KEYS else
                    self._value(value[key], tally, numbers=numbers) for key in value}
        if isinstance(value, list):
            return [self._value(item, tally, numbers=numbers) for item in value]
        if numbers and isinstance(value, int) and not isinstance(value, bool):
            shown = self._text(str(value), tally)
            return value if shown == str(value) else shown
        return value

    def _text(self, text: str, tally: _Tally) -> str:
        guarded = self._seen.get(text)
        if guarded is None:
            found = self.guard.text(text)
            tally.counts.update(found.counts)  # counted the first time it is sent, only
            guarded = found.text
            if len(self._seen) < MAX_REMEMBERED:
                self._seen[text] = guarded
        if guarded != text:
            tally.changed = True
        return guarded


def _is_image(part: Any) -> bool:
    return isinstance(part, Mapping) and part.get("type") == "image_url"

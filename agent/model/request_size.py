"""What a request to the model weighs before it is sent: its estimated prompt tokens.

The loop shortens old observations when the estimate passes the context
budget (`sbx.agent.core.compaction`), and the model client sends the estimate
with each request so a reply without token counts is still metered
(`sbx.agent.model.reply`). An image part counts `IMAGE_TOKENS`, not the length
of its data URL; the transcript and the estimate see it as a short text
(`without_images`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

CHARS_PER_TOKEN = 4
"""The estimate's ratio (as the reply parser's, when the endpoint sends no counts)."""
IMAGE_TOKENS = 1000
"""What one image part counts for in the size estimate (endpoints bill a few hundred to
about a thousand tokens for an image of this size)."""
SHOWN_PLACEHOLDER = "[an image was shown to the model here]"


def estimate_tokens(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> int:
    """Estimated prompt tokens of a request: its JSON size over `CHARS_PER_TOKEN`."""
    return request_chars(messages, tools) // CHARS_PER_TOKEN + 1


def request_chars(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> int:
    """JSON size; an image part counts `IMAGE_TOKENS`, not its data URL's length."""
    text = [without_images(message) for message in messages]
    images = image_parts(messages) * IMAGE_TOKENS * CHARS_PER_TOKEN
    return len(json.dumps(text, ensure_ascii=False)) + len(json.dumps(list(tools))) + images


def without_images(message: dict[str, Any]) -> dict[str, Any]:
    """The message with each image part replaced by a short text (transcript, estimates)."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    parts = [
        {"type": "text", "text": SHOWN_PLACEHOLDER}
        if isinstance(part, dict) and part.get("type") == "image_url"
        else part
        for part in content
    ]
    return {**message, "content": parts}


def image_parts(messages: Sequence[dict[str, Any]]) -> int:
    """How many image parts the messages carry (each counts `IMAGE_TOKENS` in estimates)."""
    return sum(
        1
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
    )

"""`--tool-format text`: for models served without a tool-call parser, code in fenced blocks.

Small local models behind a server that does not parse tool calls can still
write code. In text mode the request carries no `tools`; each ```python
fenced block of a reply becomes one `execute_python` call, in order, and from
there everything is unchanged: the budgets count the calls, the gate checks
and audits them, the sandbox runs them, and the conversation, the transcript
and provenance see ordinary tool calls and tool messages.

Parsing is strict: a block opens with a line that is exactly ```python
(trailing blanks allowed) at the start of a line and closes with a line that
is exactly ```; ```py, ~~~, an unlabelled fence, an indented or unclosed one
do not count, nor does a block holding only blanks. A reply without a block
is the answer. Native tool calls, if a server sends any anyway, are left as
they are (the gate decides about them like about any call).

The model reads its own turns back as text: each assistant message is sent
without its synthesized calls, and the observations of one reply's blocks go
back as one user message, block by block.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sbx.agent.model.reply import ModelReply, ToolCallRequest

CODE_TOOL = "execute_python"
_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def code_blocks(text: str | None) -> list[str]:
    """The programs of the reply's ```python blocks, in order (blank ones skipped)."""
    if not text:
        return []
    return [found for found in _BLOCK.findall(text) if found.strip()]


def with_code_calls(reply: ModelReply, *, max_argument_bytes: int) -> ModelReply:
    """The reply with one `execute_python` call per block (unchanged when it has none)."""
    if reply.tool_calls:
        return reply
    calls = tuple(_call(code, max_argument_bytes) for code in code_blocks(reply.content))
    return replace(reply, tool_calls=calls) if calls else reply


def _call(code: str, max_argument_bytes: int) -> ToolCallRequest:
    arguments = json.dumps({"code": code}, ensure_ascii=False)
    size = len(arguments.encode("utf-8"))
    kept = None
    if size > max_argument_bytes:  # the gate refuses it; the conversation keeps a note only
        note = f"{size} bytes of arguments not kept: over max_argument_bytes, {max_argument_bytes}"
        kept = json.dumps({"sbx_note": note})
    return ToolCallRequest(
        id=f"call_text_{secrets.token_hex(8)}", model_id=None, name=CODE_TOOL,
        arguments=arguments, kept_arguments=kept,
    )


def as_text_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as a model without tool calling reads it."""
    out: list[dict[str, Any]] = []
    outputs: list[str] = []
    for message in messages:
        if message.get("role") == "tool":
            outputs.append(str(message.get("content") or ""))
            continue
        if outputs:
            out.append(_outputs_message(outputs))
            outputs = []
        if message.get("role") == "assistant":
            out.append({"role": "assistant", "content": message.get("content") or ""})
        else:
            out.append(message)
    if outputs:
        out.append(_outputs_message(outputs))
    return out


def _outputs_message(outputs: list[str]) -> dict[str, Any]:
    """The observations of one reply's blocks, as the user message that follows it."""
    if len(outputs) == 1:
        return {"role": "user", "content": f"Output of your python block:\n{outputs[0]}"}
    parts = [f"Output of python block {n}:\n{text}" for n, text in enumerate(outputs, start=1)]
    return {"role": "user", "content": "\n\n".join(parts)}

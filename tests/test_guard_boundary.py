"""The data guard at the boundary: every string of every message, as the request leaves."""

from __future__ import annotations

import json

from sbx.agent.model.boundary import IMAGE_WITHHELD, RequestGuard
from sbx.tools.guard import DataGuard
from sbx.tools.guard_policy import GuardRules

CARD = "4111111111111111"
KEY = "sk-abcdefghijklmnopqrstuvwxyz123456"
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


def _guard(audited: list[dict[str, int]] | None = None) -> RequestGuard:
    return RequestGuard(DataGuard(GuardRules()),
                        on_redaction=audited.append if audited is not None else None)


def test_every_kind_of_message_is_filtered_and_the_protocol_fields_are_kept():
    messages = [
        {"role": "system", "content": f"data: {CARD}"},
        {"role": "user", "content": f"[sbx] The last 3 calls failed (KeyError: {CARD})"},
        {"role": "assistant", "content": f"Plan: look up {KEY}", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {
                "name": "execute_python",
                "arguments": json.dumps({"code": f"print('{CARD}')", "n": int(CARD)})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": f"error: {KEY}"},
        {"role": "user", "content": [{"type": "text", "text": f"{CARD}_statement.png: image/png"}]},
    ]
    audited: list[dict[str, int]] = []

    sent = _guard(audited).messages(messages)

    body = json.dumps(sent)
    assert CARD not in body and KEY not in body
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]
    call = sent[2]["tool_calls"][0]
    assert (call["id"], call["type"], call["function"]["name"]) == (
        "call_1", "function", "execute_python")
    assert json.loads(call["function"]["arguments"]) == {"code": "print('[card]')", "n": "[card]"}
    assert sent[3]["tool_call_id"] == "call_1"
    assert audited == [{"card": 5, "secret": 2}]
    assert messages[0]["content"] == f"data: {CARD}"  # the caller's history keeps the real text


def test_each_text_is_counted_once_per_run_and_clean_requests_are_sent_unchanged():
    audited: list[dict[str, int]] = []
    guard = _guard(audited)
    history = [{"role": "user", "content": f"card {CARD}"}]
    guard.messages(history)
    guard.messages([*history, {"role": "user", "content": "and now?"}])
    assert audited == [{"card": 1}]
    arguments = '{"code":  "print(1)"}'  # not re-serialised when nothing is replaced
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    sent = guard.messages([{"role": "assistant", "content": None, "tool_calls": [call]}])
    assert sent[0]["tool_calls"][0]["function"]["arguments"] == arguments


def test_an_image_is_sent_only_when_its_own_text_passed_the_guard_unchanged():
    guard = _guard()
    clean = {"role": "user", "content": [{"type": "text", "text": "figure-1.png: 'Revenue'"},
                                         IMAGE]}
    leaky = {"role": "user", "content": [
        {"type": "text", "text": f"figure-1.png: title 'card {CARD}'"}, IMAGE]}
    assert guard.messages([clean])[0]["content"][1] == IMAGE
    for _ in range(2):  # the second time, from what the run remembers
        withheld = guard.messages([leaky])[0]["content"]
        assert withheld == [{"type": "text", "text": "figure-1.png: title 'card [card]'"},
                            {"type": "text", "text": IMAGE_WITHHELD}]

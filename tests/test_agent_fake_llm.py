"""The scripted model fails loudly: an extra request names its index; leftovers fail."""

from __future__ import annotations

import pytest

import scripted_llm
from sbx.agent.core.settings import AgentSettings, Endpoint
from sbx.agent.model.boundary import RequestGuard
from sbx.agent.model.client import ModelClient, ModelError
from sbx.agent.testing.scripted_model import (
    HttpFailure,
    ScriptedLLM,
    ScriptError,
    assistant,
    load_turns,
)
from sbx.tools.guard import DataGuard
from sbx.tools.guard_policy import GuardRules
from scripted_llm import FAKE_KEY, FIXTURES

no_real_model = scripted_llm.no_real_model

HELLO = [{"role": "user", "content": "hello"}]
GUARD = RequestGuard(DataGuard(GuardRules()))


def _client(server: ScriptedLLM) -> ModelClient:
    endpoint = Endpoint(base_url=server.base_url, api_key=FAKE_KEY, model="m")
    return ModelClient.connect(endpoint, AgentSettings(max_retries=2))


def test_an_extra_request_is_an_error_naming_the_call_index_and_is_not_retried():
    with ScriptedLLM([assistant("one")]) as server, _client(server) as model:
        assert model.complete(HELLO, [], timeout=5, guard=GUARD).content == "one"
        with pytest.raises(ModelError, match=r"unexpected model call #2 \(the script had 1 turn"):
            model.complete(HELLO, [], timeout=5, guard=GUARD)
        assert len(server.requests) == 2
        with pytest.raises(ScriptError, match="unexpected model call #2"):
            server.assert_complete()


def test_turns_left_unconsumed_fail_the_check():
    with ScriptedLLM([assistant("one"), assistant("two")]) as server, _client(server) as model:
        model.complete(HELLO, [], timeout=5, guard=GUARD)
        with pytest.raises(ScriptError, match="1 scripted turn"):
            server.assert_complete()


def test_a_responder_sees_the_request_and_a_broken_one_fails_the_test():
    def broken(request):
        raise KeyError("oops")

    with ScriptedLLM([lambda r: assistant(r.messages[-1]["content"].upper()), broken]) as server:
        with _client(server) as model:
            assert model.complete(HELLO, [], timeout=5, guard=GUARD).content == "HELLO"
            with pytest.raises(ModelError, match="responder for call #2 raised KeyError"):
                model.complete(HELLO, [], timeout=5, guard=GUARD)
        with pytest.raises(ScriptError, match=r"responder for call #2 raised KeyError\('oops'\)"):
            server.assert_complete()


def test_http_failures_carry_their_status_and_a_short_retry_delay():
    with ScriptedLLM([HttpFailure(status=429, message="slow down")] * 3) as server:
        with _client(server) as model, pytest.raises(ModelError, match="HTTP 429 after 2 retries"):
            model.complete(HELLO, [], timeout=5, guard=GUARD)
        server.assert_complete()


def test_json_turn_files_load():
    turns = load_turns(FIXTURES / "model_mistakes.json")
    assert [len(t.tool_calls) for t in turns] == [1, 1, 1, 0]
    assert turns[0].tool_calls[0].arguments == '{"expression": "1 +'

"""Idle sandboxes of one key do not keep the host from another key: while a caller waits, the
idle sandboxes of keys over their share of the host's cap are released, longest idle first."""

from __future__ import annotations

import pytest

import service_support
from sbx.agent.testing.scripted_model import assistant, tool_call
from service_support import stream

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster


def ask(client, conversation: str, question: str) -> str:
    answer = client.post(f"/v1/conversations/{conversation}/questions",
                         json={"question": question})
    assert answer.status_code == 202, answer.text
    return str(answer.json()["run_id"])


@pytest.mark.docker
def test_another_keys_question_gets_the_host_from_one_keys_idle_sandboxes(store, serve, llm):
    server = serve(store, env={"SBX_MAX_SANDBOXES": "2", "SBX_HOST_WAIT": "30"})
    ann, bob = server.client(server.key("ann")), server.client(server.key("bob"))
    llm.script([
        tool_call("execute_python", code="x = 1\nprint(x)"), assistant("one"),
        tool_call("execute_python", code="y = 2\nprint(y)"), assistant("two"),
        tool_call("execute_python", code="print(40 + 2)"), assistant("42"),
    ])
    held = []
    for question in ("first", "second"):  # ann's two conversations hold the host's two
        conversation = ann.post("/v1/conversations", json={}).json()["id"]
        run = ask(ann, conversation, question)
        assert stream(ann, run)[-1]["data"]["status"] == "completed"
        assert ann.get(f"/v1/conversations/{conversation}").json()["sandbox"] == "held"
        held.append(conversation)

    conversation = bob.post("/v1/conversations", json={}).json()["id"]
    run = ask(bob, conversation, "what is 40 + 2?")
    events = stream(bob, run)
    assert events[-1]["data"]["status"] == "completed", events[-3:]
    outputs = [e for e in events if e["event"] == "tool_result"]
    assert outputs and "42" in repr(outputs[0]["data"]), events
    sandboxes = [ann.get(f"/v1/conversations/{c}").json()["sandbox"] for c in held]
    assert sandboxes == ["released", "held"]  # the longest idle went; ann keeps its share

"""`[pool] max_size` over real HTTP: open conversations warm the pool before their questions.

The pool's figures are read where an operator reads them, `/metrics`
(`sbx_pool_target`, `sbx_pool_containers`, `sbx_pool_takes_total`).
"""

from __future__ import annotations

import pytest
from test_service_metrics import _admin_key, _scrape, _value

import service_support
from sbx.agent.testing.scripted_model import assistant, tool_call
from service_support import server_containers, stream, wait_for

serve = service_support.serve
llm = service_support.llm

pytestmark = pytest.mark.docker


def test_open_conversations_are_warmed_for_and_their_questions_hit(tmp_path, serve, llm, engine):
    policy = {"pool": {"max_size": 3, "window": "10m"}, "service": {"heartbeat": "0.2s"}}
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}", policy=policy)
    alice = server.client(server.key("alice", max_conversations=2))
    ops = server.client(_admin_key(server))
    assert _value(_scrape(ops), "sbx_pool_target") == 0  # nothing open: nothing warm
    opened = [alice.post("/v1/conversations", json={}) for _ in range(2)]
    assert all(answer.status_code == 201 for answer in opened)

    def warmed() -> bool:
        figures = _scrape(ops)
        return (_value(figures, "sbx_pool_target") == 2
                and _value(figures, "sbx_pool_containers", state="idle") == 2)

    wait_for(warmed, what="two warm containers for two open conversations")
    llm.script([tool_call("execute_python", code="print(6 * 7)"), assistant("42.")])
    conversation = opened[0].json()["id"]
    asked = alice.post(f"/v1/conversations/{conversation}/questions", json={"question": "6*7?"})
    assert asked.status_code == 202, asked.text
    assert stream(alice, asked.json()["run_id"])[-1]["data"]["type"] == "run_end"
    figures = _scrape(ops)
    assert _value(figures, "sbx_pool_takes_total", result="hit") == 1
    assert _value(figures, "sbx_pool_takes_total", result="miss") == 0
    for answer in opened:
        assert alice.delete(f"/v1/conversations/{answer.json()['id']}").status_code == 204
    assert server.stop() == 0
    assert server_containers(engine, server) == []

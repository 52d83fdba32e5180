"""A new conversation with data starts in a warm container, its files at `/data`.

Real Docker, the real SDK over HTTP to the scripted server, the real gate and
audit log; only the model is scripted. The application's pool is warmed for
the configuration's key, as a service that starts many conversations does.
"""

from __future__ import annotations

import pytest

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.core.app import App
from sbx.agent.core.config import load_config
from sbx.agent.core.conversation import ConversationSpec
from sbx.agent.core.settings import Endpoint
from sbx.agent.testing.scripted_model import assistant, tool_call
from sbx.sandbox.pool import PoolConfig, PoolKey
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model


@pytest.mark.docker
def test_a_new_conversation_with_data_is_served_by_a_warm_container(llm, tmp_path, engine):
    sales = tmp_path / "in" / "sales.csv"
    sales.parent.mkdir()
    sales.write_text("region,amount\nnorth,3\nsouth,4\n")
    llm.script([
        tool_call("execute_python", code="print(sum(int(line.split(',')[1]) for line in "
                                         "open('/data/sales.csv').read().split()[1:]))"),
        assistant("The total is 7."),
    ])
    config = load_config(None)
    pool_config = PoolConfig(size=1, data_root=tmp_path / "data-root")
    with App.open(
        config, environ={}, audit_log=tmp_path / "audit.jsonl", image=TEST_IMAGE,
        pool_config=pool_config,
    ) as app:
        assert app.pool is not None
        key = PoolKey(image=TEST_IMAGE, limits=config.limits)
        app.pool.warm(key)
        assert app.pool.wait_warm(key)
        warm = app.pool.idle_container_ids(key)
        spec = ConversationSpec(principal="os:tester", data=(sales,), output_root=tmp_path / "o")
        endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
        with app.conversation(spec, endpoint=endpoint, transcript=tmp_path / "c.jsonl") as conv:
            result = conv.ask("What is the total amount?")
            session = conv.workspace._session
            served_by = session.container_id if session is not None else None
        stats = app.pool.snapshot()
    assert (result.status, result.answer) == ("completed", "The total is 7.")
    assert llm.requests[1].last_tool_message.startswith("[stdout]\n7")
    assert served_by in warm
    assert (stats.hits, stats.misses, stats.data_delivered) == (1, 0, 1)
    assert list((tmp_path / "data-root").iterdir()) == []  # every directory went with its container

"""The run's time budget cuts running code, as it cuts model requests (`--max-time`).

Real Docker and the real SDK over HTTP to the scripted server; only the model is scripted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.core.app import App
from sbx.agent.core.config import load_config
from sbx.agent.core.conversation import ConversationSpec
from sbx.agent.core.settings import Endpoint
from sbx.agent.testing.scripted_model import tool_call
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model


@pytest.mark.docker
def test_max_time_stops_the_code_long_before_the_sandbox_timeout(llm, tmp_path: Path):
    llm.script([tool_call("execute_python", code="import time\ntime.sleep(600)")])
    policy = tmp_path / "sbx.toml"
    policy.write_text('[sandbox]\ntimeout = "120s"\n')  # the other tables: the defaults
    config = load_config(policy).with_flags({"max_wall_time": 5.0})
    spec = ConversationSpec(principal="os:tester", output_root=tmp_path / "out")
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    with App.open(config, environ={}, audit_log=tmp_path / "a.jsonl", image=TEST_IMAGE) as app:
        with app.conversation(spec, endpoint=endpoint, transcript=tmp_path / "c.jsonl") as conv:
            result = conv.ask("Sleep.")
    assert result.status == "time_limit", result.message
    tool_messages = [m for m in result.messages if m.get("role") == "tool"]
    assert "time budget (max_wall_time, --max-time) ran out" in tool_messages[-1]["content"]
    assert result.duration_s < 60  # the 120 s sandbox timeout did not decide it

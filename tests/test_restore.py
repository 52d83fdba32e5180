"""Restore by replay in the core: a conversation's state survives its sandbox.

Real Docker, the real SDK over HTTP to the scripted server, the real gate and
audit log; only the model is scripted. Ten questions build a DataFrame; the
sandbox is then lost (an idle release, a timeout kill, an OOM kill) and the
next question's code uses the variables.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.core.app import App
from sbx.agent.core.config import AppConfig, RestoreSettings, load_config
from sbx.agent.core.conversation import RESET_NOTE, Conversation, ConversationSpec
from sbx.agent.core.settings import Endpoint
from sbx.agent.testing.scripted_model import assistant, tool_call
from sbx.tools.audit_verify import verify_log
from scripted_llm import FAKE_KEY
from tools_support import records

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

BUILD = ["import pandas as pd\ndf = pd.DataFrame({'x': range(10)})\nprint(len(df))"] + [
    f"df['c{i}'] = df.x * {i}\nprint(df['c{i}'].sum())" for i in range(1, 10)
]
USE = "print(df.shape, int(df.c9.sum()))"
USED = "[stdout]\n(10, 10) 405\n"


def _config(**restore: Any) -> AppConfig:
    config = load_config(None)
    limits = config.limits.model_copy(update={"timeout": 15.0, "memory": 256 * 1024**2})
    return replace(config, limits=limits, restore=RestoreSettings(**restore))


def _app(tmp_path: Path, config: AppConfig) -> App:
    return App.open(config, environ={}, audit_log=tmp_path / "audit.jsonl", image=TEST_IMAGE)


def _open(app: App, llm, tmp_path: Path) -> Conversation:
    spec = ConversationSpec(principal="os:analyst", output_root=tmp_path / "out")
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    return app.conversation(spec, endpoint=endpoint, transcript=tmp_path / "conv.jsonl")


def _ask_code(conversation: Conversation, llm, code: str, answer: str = "done") -> None:
    llm.script([tool_call("execute_python", code=code), assistant(answer)])
    result = conversation.ask("next step")
    assert result.status == "completed", result


def _transcript(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "conv.jsonl").read_text().splitlines()]


def _restored(tmp_path: Path) -> list[dict[str, Any]]:
    return [e for e in _transcript(tmp_path) if e["type"] == "state_restored"]


def _question_sent(llm) -> str:
    users = [m for m in llm.requests[-2].body["messages"] if m["role"] == "user"]
    return str(users[-1]["content"])


@pytest.mark.docker
def test_ten_questions_survive_an_idle_release(llm, tmp_path, engine):
    with _app(tmp_path, _config()) as app, _open(app, llm, tmp_path) as conversation:
        for code in BUILD:
            _ask_code(conversation, llm, code)
        before = conversation.workspace._session
        conversation.workspace.discard(reason="an idle release")  # what the service's does
        _ask_code(conversation, llm, USE, "df has 10 rows; c9 sums to 405.")
        after = conversation.workspace._session
        run_id = conversation.runs[-1].run_id

    assert before is not None and after is not None and after is not before
    assert llm.requests[-1].last_tool_message.startswith(USED)  # the variables were there
    sent = _question_sent(llm)
    assert "restored 10 cells" in sent and "an idle release" in sent
    assert not sent.startswith(RESET_NOTE)
    [event] = _restored(tmp_path)
    assert (event["status"], event["cells"], event["replayed"]) == ("restored", 10, 10)
    assert event["run_id"] == run_id and event["differed"] == [] and event["failed"] == []
    start = next(e for e in _transcript(tmp_path) if e["type"] == "run_start"
                 and e["run_id"] == run_id)
    assert start["sandbox_reset"] is True
    audit = records(tmp_path / "audit.jsonl")
    replayed = [r for r in audit if r["run_id"] == f"{run_id}-restore"]
    outcomes = [r for r in replayed if r["event"] == "outcome"]
    assert len(outcomes) == 10 and {r["data"]["status"] for r in outcomes} == {"ok"}
    begun = next(r for r in replayed if r["event"] == "run_start")
    assert begun["data"]["principal"] == "os:analyst"  # audited under the conversation's principal
    assert verify_log(tmp_path / "audit.jsonl", key=None).ok


@pytest.mark.docker
@pytest.mark.parametrize("killer", [
    "while True:\n    pass",
    "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))",
], ids=["timeout", "oom"])
def test_a_kill_restores_the_cells_before_it_never_the_killer(llm, tmp_path, engine, killer):
    with _app(tmp_path, _config()) as app, _open(app, llm, tmp_path) as conversation:
        for code in BUILD[:3]:
            _ask_code(conversation, llm, code)
        _ask_code(conversation, llm, killer, "That was killed.")
        assert "reset" in llm.requests[-1].last_tool_message
        _ask_code(conversation, llm, "print(df.shape, int(df.c2.sum()))", "c2 sums to 90.")

    assert llm.requests[-1].last_tool_message.startswith("[stdout]\n(10, 3) 90\n")
    [event] = _restored(tmp_path)
    assert (event["status"], event["replayed"]) == ("restored", 3)  # the killer is not replayed
    assert "restored 3 cells" in _question_sent(llm)


@pytest.mark.docker
def test_a_cell_that_read_the_clock_restores_with_a_differs_notice(llm, tmp_path, engine):
    with _app(tmp_path, _config()) as app, _open(app, llm, tmp_path) as conversation:
        _ask_code(conversation, llm, "import time\nstarted = time.time()\nprint(started)")
        _ask_code(conversation, llm, "import random\nluck = random.random()\nprint(luck)")
        _ask_code(conversation, llm, "total = 6 * 7\nprint(total)")
        conversation.workspace.discard(reason="an idle release")
        _ask_code(conversation, llm, "print(total, type(started).__name__)")

    assert llm.requests[-1].last_tool_message.startswith("[stdout]\n42 float\n")
    [event] = _restored(tmp_path)
    assert event["status"] == "partial" and event["replayed"] == 3
    assert [d["variables"] for d in event["differed"]] == [["time", "started"],
                                                          ["random", "luck"]]
    assert "recorded" in event["differed"][0]["detail"]
    sent = _question_sent(llm)
    assert "restored 3 cells" in sent and " differs: " in sent
    assert "These variables may differ from before" in sent and "started" in sent
    assert "luck" in sent and "total" not in sent.split("may differ")[1]


@pytest.mark.docker
@pytest.mark.parametrize("bound", [{"max_cells": 2}, {"cpu_seconds": 0.0}],
                         ids=["cells", "cpu"])
def test_a_replay_past_its_bound_stops_with_state_not_restored(llm, tmp_path, engine, bound):
    with _app(tmp_path, _config(**bound)) as app, _open(app, llm, tmp_path) as conversation:
        for code in BUILD[:3]:
            _ask_code(conversation, llm, code)
        conversation.workspace.discard(reason="an idle release")
        _ask_code(conversation, llm, "print('df' in globals())")

    assert llm.requests[-1].last_tool_message.startswith("[stdout]\nFalse\n")  # empty, cleanly
    [event] = _restored(tmp_path)
    assert event["status"] == "not_restored"
    assert "past its bound" in event["reason"] or "exceed the replay bound" in event["reason"]
    assert "state not restored" in _question_sent(llm)


@pytest.mark.docker
def test_restore_off_keeps_the_old_notice(llm, tmp_path, engine):
    with _app(tmp_path, _config(enabled=False)) as app, _open(app, llm, tmp_path) as convo:
        _ask_code(convo, llm, "x = 1\nprint(x)")
        convo.workspace.discard(reason="an idle release")
        _ask_code(convo, llm, "print('x' in globals())")

    assert llm.requests[-1].last_tool_message.startswith("[stdout]\nFalse\n")
    assert _question_sent(llm).startswith(RESET_NOTE) and _restored(tmp_path) == []

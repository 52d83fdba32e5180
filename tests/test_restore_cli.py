"""`sbx chat --resume`: a conversation taken up in a new process gets its variables back.

The real CLI, the real SDK over HTTP to the scripted server, the real sandbox.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.cli.main import cli
from sbx.agent.testing.scripted_model import assistant, tool_call
from sbx.tools.audit_verify import verify_log
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model


def _flags(llm, tmp_path) -> list[str]:
    return ["--base-url", llm.base_url, "--api-key", FAKE_KEY, "--model", "scripted",
            "--image", TEST_IMAGE, "--audit-log", str(tmp_path / "audit.jsonl")]


@pytest.mark.docker
def test_chat_resume_replays_the_code_and_the_follow_up_uses_its_variables(llm, tmp_path):
    data = tmp_path / "sales.csv"
    data.write_text("region,revenue\nWest,100\nEast,250\nWest,125\n")
    transcript = tmp_path / "chat.jsonl"
    llm.script([
        tool_call("execute_python", code="import pandas as pd\n"
                  "sales = pd.read_csv('/data/sales.csv')\nprint(len(sales))"),
        assistant("3 rows."),
        tool_call("execute_python", code="west = sales[sales.region == 'West'].revenue.sum()\n"
                  "print(west)"),
        assistant("West sold 225."),
    ])
    first = CliRunner().invoke(cli, ["chat", "--data", str(data), "--transcript",
                                     str(transcript), *_flags(llm, tmp_path)],
                               input="How many rows?\nAnd West?\n/exit\n")
    assert first.exit_code == 0, first.output

    llm.script([tool_call("execute_python", code="print(west / len(sales))"),
                assistant("75 per row.")])
    second = CliRunner().invoke(cli, ["chat", "--resume", str(transcript),
                                      *_flags(llm, tmp_path)], input="West per row?\n/exit\n")

    assert second.exit_code == 0, second.output
    assert "75 per row." in second.stdout
    assert llm.requests[-1].last_tool_message.startswith("[stdout]\n75.0\n")
    assert "~  restored 2 cells (a restart: the previous process ended)" in second.stderr
    asked = [m for m in llm.requests[-2].body["messages"] if m["role"] == "user"][-1]
    assert "restored 2 cells" in asked["content"] and "West sold 225." in json.dumps(
        llm.requests[-2].body["messages"])  # the messages came back too
    lines = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert len({line["conversation_id"] for line in lines}) == 1  # one transcript, appended
    assert [line["seq"] for line in lines] == list(range(len(lines)))
    assert [e["replayed"] for e in lines if e["type"] == "state_restored"] == [2]
    assert verify_log(tmp_path / "audit.jsonl", key=None).ok


def test_chat_resume_refuses_data_beside_it(tmp_path):
    (tmp_path / "t.jsonl").write_text("")
    outcome = CliRunner().invoke(cli, ["chat", "--resume", str(tmp_path / "t.jsonl"),
                                       "--data", str(tmp_path / "t.jsonl")])
    assert outcome.exit_code == 2
    assert "--resume: the conversation keeps its own data" in outcome.stderr

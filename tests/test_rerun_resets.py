"""Re-run and the notebook export reset the state where the recorded run lost it.

The recorded run: `x = 21`, then code that kills its interpreter (`os._exit`), then
`print(x)`, which raised NameError in the run. Re-run must reset there too (no false
"DIFFERS"), and the notebook must forget `x` there too. The real CLI, the real SDK over
HTTP to the scripted server, the real sandbox.
"""

from __future__ import annotations

import json

import nbformat
import pytest
from click.testing import CliRunner

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.cli.main import cli
from sbx.agent.core.history import read_record
from sbx.agent.testing.scripted_model import assistant, tool_call
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model


def _record(llm, tmp_path):
    llm.script([
        tool_call("execute_python", code="x = 21\nprint(x)"),
        tool_call("execute_python", code="import os\nos._exit(3)"),
        tool_call("execute_python", code="print(x * 2)"),
        assistant("x was lost."),
    ])
    args = ["ask", "Use x.", "--base-url", llm.base_url, "--api-key", FAKE_KEY,
            "--model", "scripted", "--image", TEST_IMAGE,
            "--audit-log", str(tmp_path / "audit.jsonl"),
            "--transcript", str(tmp_path / "run.jsonl"), "--output", str(tmp_path / "out")]
    outcome = CliRunner().invoke(cli, args)
    assert outcome.exit_code == 0, outcome.output


@pytest.mark.docker
def test_rerun_and_notebook_reset_where_the_run_lost_its_interpreter(llm, tmp_path, engine):
    _record(llm, tmp_path)
    record = read_record(tmp_path / "run.jsonl")
    steps = record.runs[0].executions
    assert [e.reset_before for e in steps] == [False, False, True]
    assert steps[1].state_reset and steps[2].error_type == "NameError"

    again = CliRunner().invoke(cli, [
        "replay", "--rerun", str(tmp_path / "run.jsonl"), "--image", TEST_IMAGE,
        "--audit-log", str(tmp_path / "audit.jsonl"),
    ])
    assert again.exit_code == 0, again.output  # NameError again: the state was reset too
    assert "DIFFERS" not in again.stdout

    target = tmp_path / "run.ipynb"
    outcome = CliRunner().invoke(cli, ["export", str(tmp_path / "run.jsonl"), "-o", str(target)])
    assert outcome.exit_code == 0, outcome.output
    notebook = nbformat.reads(target.read_text(), as_version=4)
    sources = [cell.source for cell in notebook.cells]
    reset_at = next(i for i, s in enumerate(sources) if s.startswith("for _name in"))
    assert "print(x * 2)" in sources[reset_at + 1]
    assert "interpreter was reset here" in sources[reset_at - 1]
    namespace: dict = {}
    exec(next(s for s in sources if s.startswith("x = 21")), namespace)
    exec(sources[reset_at], namespace)
    assert "x" not in namespace
    lines = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    results = [line for line in lines if line["type"] == "tool_result"]
    assert results[1]["execution"]["state_reset"] is True

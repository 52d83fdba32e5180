"""`sbx replay --rerun`: a past run's code again, in a fresh sandbox, compared with its record.

Acceptance: the real CLI, the real SDK over HTTP to the
scripted server for the original run, the real sandbox for both.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent import App, RunOutcome, RunTicket, load_config, read_record
from sbx.agent.cli.main import cli
from sbx.agent.testing.scripted_model import assistant, tool_call
from sbx.sandbox.config import MANAGED_LABEL, RUN_ID_LABEL
from sbx.tools.audit_verify import verify_log
from scripted_llm import FAKE_KEY
from tools_support import records

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

LOAD = (
    "import pandas as pd\n"
    "sales = pd.read_csv('/data/sales.csv')\n"
    "print(sales.shape)\n"
    "print(sales.revenue.tolist()[0].mean())\n"  # raises: the recorded run failed here
)
SUMMARY = (
    "by_region = sales.groupby('region').revenue.sum()\n"  # `sales` survives the failure
    "print(by_region.to_string())\n"
    "print('total:', by_region.sum())\n"
    "print('share of West:', round(by_region['West'] / by_region.sum(), 4))\n"
    "print('mean:', sales.revenue.mean() / 3)\n"
)


def _record_a_run(llm, tmp_path):
    data = tmp_path / "sales.csv"
    data.write_text("region,revenue\nWest,100\nEast,250\nWest,125\n")
    llm.script([
        tool_call("execute_python", code=LOAD),
        tool_call("execute_python", code=SUMMARY),
        assistant("West has a share of 47.4% (225 of 475)."),
    ])
    args = ["ask", "What share is West's?", "--data", str(data), "--base-url", llm.base_url,
            "--api-key", FAKE_KEY, "--model", "scripted", "--image", TEST_IMAGE,
            "--audit-log", str(tmp_path / "audit.jsonl"),
            "--transcript", str(tmp_path / "run.jsonl"), "--output", str(tmp_path / "out")]
    outcome = CliRunner().invoke(cli, args)
    assert outcome.exit_code == 0, outcome.output
    return data


def _rerun(tmp_path):
    return CliRunner().invoke(cli, [
        "replay", "--rerun", str(tmp_path / "run.jsonl"), "--image", TEST_IMAGE,
        "--audit-log", str(tmp_path / "audit.jsonl"),
    ])


@pytest.mark.docker
def test_rerun_reports_every_execution_matching_then_names_a_changed_data_file(
    llm, tmp_path, engine
):
    data = _record_a_run(llm, tmp_path)
    transcript = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    start = next(e for e in transcript if e["type"] == "run_start")
    assert list(start["data_sha256"]) == ["sales.csv"]
    assert len(start["data_sha256"]["sales.csv"]) == 64
    assert transcript[-1]["verified"] is True

    same = _rerun(tmp_path)

    assert same.exit_code == 0, same.output
    lines = same.stdout.splitlines()
    assert [line.split(": ", 2)[1] for line in lines if line.startswith("ok ")] == [
        "matches", "matches"
    ]
    assert "execution 1 [call_" in same.stdout and "execution 2 [call_" in same.stdout
    assert lines[-1] == "== every execution matches (2); the data is unchanged"

    data.write_bytes(data.read_bytes().replace(b"West,100", b"West,109"))  # one byte

    changed = _rerun(tmp_path)

    assert changed.exit_code == 1, changed.output
    assert "ok run " in changed.stdout  # execution 1 still matches (its output has no sums)
    differs = [line for line in changed.stdout.splitlines() if line.startswith("!! ")]
    assert len(differs) == 1 and "execution 2" in differs[0]
    assert "DIFFERS: line 3: 225 recorded, 234 now (3 more line(s) differ)" in differs[0]
    assert "   data sales.csv: changed (sha256 " in changed.stdout
    assert changed.stdout.splitlines()[-1] == (
        "== 1 of 2 execution(s) differ; the data changed since the run: sales.csv "
        "(the differences may come from it, not from the code)"
    )
    audit = records(tmp_path / "audit.jsonl")
    reruns = [r for r in audit if r["run_id"].startswith("rerun-") and r["event"] == "outcome"]
    assert len(reruns) == 4  # two executions, re-run twice, each through the gate
    assert verify_log(tmp_path / "audit.jsonl", key=None).ok
    left = engine.api.containers(all=True, filters={"label": MANAGED_LABEL})
    assert not [c for c in left if c["Labels"].get(RUN_ID_LABEL, "").startswith("rerun-")]


def test_rerun_of_a_file_that_is_no_transcript_exits_2(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("not json\n")
    outcome = CliRunner().invoke(cli, ["replay", "--rerun", str(path)])
    assert outcome.exit_code == 2
    assert f"{path}:1: not a JSON line" in outcome.stderr


class Heard:
    """A face's recorder that keeps what it was told of each run."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, RunTicket, str | None]] = []

    def admitted(self, ticket: RunTicket) -> None:
        self.steps.append(("admitted", ticket, None))

    def started(self, ticket: RunTicket) -> None:
        self.steps.append(("started", ticket, None))

    def finished(self, ticket: RunTicket, outcome: RunOutcome) -> None:
        self.steps.append(("finished", ticket, outcome.status))

    def withdrawn(self, ticket: RunTicket) -> None:
        self.steps.append(("withdrawn", ticket, None))


@pytest.mark.docker
def test_a_rerun_is_one_run_on_one_ticket_with_the_life_of_every_run(llm, tmp_path, engine):
    _record_a_run(llm, tmp_path)
    heard = Heard()
    with App.open(load_config(None), environ={}, audit_log=tmp_path / "audit.jsonl",
                  image=TEST_IMAGE) as app:
        report = app.rerun(read_record(tmp_path / "run.jsonl"), principal="os:tester",
                           output_dir=tmp_path / "again", recorder=heard)

    assert report.ok and len(report.checks) == 2
    assert [(step, status) for step, _, status in heard.steps] == [
        ("admitted", None), ("started", None), ("finished", "ok")]
    tickets = {id(ticket) for _, ticket, _ in heard.steps}
    ticket = heard.steps[0][1]
    assert len(tickets) == 1 and ticket.kind == "rerun" and ticket.run_id == report.rerun_id
    assert ticket.principal == "os:tester" and ticket.conversation_id is None

"""execute_python through the gate into a real sandbox session: observation and audit agree."""

from __future__ import annotations

import json

import pytest

from conftest import TEST_IMAGE
from sbx.agent.core.config import load_config
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec
from tools_support import make_gate

pytestmark = pytest.mark.docker


def test_execute_python_runs_in_the_session_and_is_audited(engine, runtime, tmp_path) -> None:
    policy = load_config(None).policy
    limits = Limits(timeout="3s", runtime=runtime)
    with Session.open(
        SessionSpec(
            limits=limits, image=TEST_IMAGE, output_dir=tmp_path / "out", run_id="run-gate-sbx"
        ),
        engine=engine,
    ) as session:
        gate, log = make_gate(tmp_path, policy, runner=session, run_id=session.run_id)
        first = gate.call(
            name="execute_python",
            arguments=json.dumps({"code": "x = [1, 2]\nx.mean()"}),
            call_id="c1",
        )
        second = gate.call(
            name="execute_python",
            arguments=json.dumps({"code": "print(sum(x) / len(x))"}),
            call_id="c2",
        )
        stuck = gate.call(
            name="execute_python", arguments=json.dumps({"code": "while True: pass"}), call_id="c3"
        )
        gate.close()
    assert first.status == "ok" and "AttributeError" in first.text and "mean" in first.text
    assert second.status == "ok" and "1.5" in second.text
    assert "timed out" in stuck.text and "reset" in stuck.text
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert {r["run_id"] for r in records} == {"run-gate-sbx"}
    requests = [r for r in records if r.get("event") == "request"]
    assert [r["data"]["arguments"]["code"] for r in requests][1] == "print(sum(x) / len(x))"
    assert all(len(r["data"]["code_sha256"]) == 64 for r in requests)
    outcomes = [r for r in records if r.get("event") == "outcome"]
    assert [o["data"]["exit_code"] for o in outcomes] == [1, 0, 124]

"""Teams, and money budgets per key and team, per UTC day and month.

A real `sbx serve` (SQLite and PostgreSQL), the scripted model with fixed token
counts and a price table that makes them cost known amounts: a team with a small
daily budget has its run stopped `budget_exceeded` and its next question and
`/v1/execute` refused with 429 (naming the team, the period and the reset time);
another team is unaffected; each run's cost is stored and shown; `/metrics` has
the spend per team; the audit log's `run_start` names the team.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest

import service_support
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.keys import create_key
from sbx.agent.testing.scripted_model import Reply, assistant, call
from service_support import SBX, ask_run

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

# 1 EUR per million prompt tokens, 2000 per million completion tokens: a reply's usage
# (prompt, completion) of (1000, 100) costs 0.001 + 0.2 = 0.201 EUR; prompts are cheap, so
# the estimate of the next prompt never decides alone.
POLICY = {
    "agent.prices": {"currency": "EUR"},
    "agent.prices.models.scripted": {"input": 1.0, "output": 2000.0},
    "service.teams.small": {"cost_per_day": 0.5},
    "service.teams.small.quotas": {"max_conversations": 3},
    "service.teams.big": {"cost_per_month": 1000.0, "disabled_tools": ["list_data_files"]},
}


def _key(server, name: str, *, team: str | None = None, role: str = "user") -> str:
    db = Database.open(server.database)
    try:
        return create_key(db, name, team=team, role="admin" if role == "admin" else "user")
    finally:
        db.close()


def _next_midnight() -> datetime:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today + timedelta(days=1)


@pytest.mark.docker
def test_a_team_at_its_budget_stops_and_is_refused_while_another_team_runs_on(
        store, serve, llm):
    server = serve(store, policy=POLICY)
    ana = server.client(_key(server, "ana", team="small"))
    bo = server.client(_key(server, "bo", team="big"))
    root = server.client(_key(server, "root", role="admin"))
    conversation = ana.post("/v1/conversations", json={}).json()["id"]

    llm.script([assistant("Nothing to compute.", usage=(1000, 100))])
    first = ask_run(ana, conversation, "hello?")
    assert first["status"] == "completed"
    assert first["team"] == "small"
    assert first["cost"]["total"] == pytest.approx(0.201)  # stored with the run, shown
    assert (first["cost"]["currency"], first["cost"]["estimated"]) == ("EUR", False)

    # 0.201 spent; this reply costs 0.401 more: the team's 0.5 would be passed, so the
    # tool call it asks for never runs and the run stops with its own status.
    llm.script([Reply(tool_calls=(call("execute_python", code="print('ran')"),),
                      usage=(1000, 200))])
    second = ask_run(ana, conversation, "compute")
    assert second["status"] == "budget_exceeded", second
    assert "team 'small' per day (0.5 EUR)" in second["message"]
    assert second["cost"]["total"] == pytest.approx(0.401)
    assert second["result"]["sandbox"]["executions"] == 0

    refused = ana.post(f"/v1/conversations/{conversation}/questions", json={"question": "3?"})
    body = _budget_problem(refused, scope="team", name="small", period="day")
    assert body["budget"]["spent"] == pytest.approx(0.602)
    assert body["resets_at"] == _next_midnight().strftime("%Y-%m-%dT%H:%M:%SZ")
    _budget_problem(ana.post("/v1/execute", json={"code": "print(1)"}),
                    scope="team", name="small", period="day")

    # Another team is unaffected: its question and its program run.
    other = bo.post("/v1/conversations", json={}).json()["id"]
    llm.script([assistant("Fine.", usage=(1000, 100))])
    assert ask_run(bo, other, "hello?")["status"] == "completed"
    offered = [[t["function"]["name"] for t in request.body.get("tools", [])]
               for request in llm.requests]
    assert "list_data_files" in offered[0] and "list_data_files" not in offered[-1]
    assert "execute_python" in offered[-1]  # the big team withholds only what it names
    executed = bo.post("/v1/execute", json={"code": "print(6 * 7)"})
    assert executed.status_code == 200, executed.text
    assert executed.json()["execution"]["stdout"] == "42\n"

    usage = ana.get("/v1/usage").json()
    assert usage["team"] == "small" and usage["spend"]["currency"] == "EUR"
    team_day = next(b for b in usage["spend"]["budgets"]
                    if (b["scope"], b["period"]) == ("team", "day"))
    assert team_day["limit"] == 0.5 and team_day["spent"] == pytest.approx(0.602)
    assert team_day["estimated"] is False and team_day["resets_at"] == body["resets_at"]
    assert usage["quotas"]["max_conversations"] == 3  # the team's quota for its members
    assert bo.get("/v1/usage").json()["quotas"]["max_conversations"] == 4  # the default

    metrics = root.get("/metrics").text
    assert _sample(metrics, 'sbx_spend_total{currency="EUR",team="small"}') == \
        pytest.approx(0.602)
    assert _sample(metrics, 'sbx_spend_total{currency="EUR",team="big"}') == \
        pytest.approx(0.201, abs=0.01)  # and its program's sandbox time (priced at 0 here)

    audit = [json.loads(line) for line in server.audit_log.read_text().splitlines()]
    starts = {r["run_id"]: r["data"] for r in audit if r["event"] == "run_start"}
    assert starts[first["id"]]["team"] == "small"
    assert starts[first["id"]]["principal"] == "key:ana"
    assert {starts[executed.json()["run_id"]]["team"]} == {"big"}


@pytest.mark.docker
def test_a_keys_own_daily_budget_from_the_cli_refuses_it_alone(tmp_path, serve, llm):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}", policy=POLICY)
    made = subprocess.run([*SBX, "keys", "create", "cy", "--cost-per-day", "0.1",
                           "--database", server.database], capture_output=True, text=True,
                          timeout=60)
    assert made.returncode == 0, made.stderr
    listed = subprocess.run([*SBX, "keys", "list", "--database", server.database],
                            capture_output=True, text=True, timeout=60)
    assert "cy\tuser\tactive\tteam=-" in listed.stdout and "cost_per_day=0.1" in listed.stdout
    cy = server.client(made.stdout.strip())
    conversation = cy.post("/v1/conversations", json={}).json()["id"]
    llm.script([assistant("One.", usage=(1000, 100))])
    assert ask_run(cy, conversation, "1?")["status"] == "completed"
    refused = cy.post(f"/v1/conversations/{conversation}/questions", json={"question": "2?"})
    _budget_problem(refused, scope="key", name="key:cy", period="day")
    dee = server.client(_key(server, "dee"))  # no budget of its own, no team: unaffected
    assert dee.post("/v1/execute", json={"code": "print(1)"}).status_code == 200


def _budget_problem(response, *, scope: str, name: str, period: str) -> dict:
    assert response.status_code == 429, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["type"].endswith("/budget-exceeded")
    assert (body["budget"]["scope"], body["budget"]["name"], body["budget"]["period"]) == (
        scope, name, period)
    retry = int(response.headers["retry-after"])
    left = _next_midnight().timestamp() - time.time()
    assert retry == body["retry_after"] and left - 120 <= retry <= left + 120
    assert "resets at" in body["detail"]
    return body


def _sample(text: str, series: str) -> float:
    found = re.search(re.escape(series) + r" ([0-9.e+-]+)", text)
    assert found, f"{series} not in /metrics"
    return float(found.group(1))

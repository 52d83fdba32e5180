"""What a team changes, checked below the service.

The loop asks a `SpendLimit` before every request and tool batch (a real loop, the
scripted model over real HTTP); the policy's team tables are validated at load; the
gate applies the team's data-guard rules and withholds its disabled tools; `sbx doctor`
warns about every default-on detector a policy turns off.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_exec import sbx

import scripted_llm
from sbx.agent.core.config import load_config
from sbx.agent.core.cost import ModelPrice, Prices
from sbx.agent.core.settings import AgentSettings
from sbx.agent.core.spend import Allowance
from sbx.agent.core.teams import withhold
from sbx.agent.model.client import ModelClient
from sbx.agent.testing.scripted_model import Reply, assistant, call
from sbx.tools.context import ToolContext
from sbx.tools.gate import build_gate
from sbx.tools.guard_policy import GuardOverride, GuardPolicy
from sbx.tools.policy import PolicyError
from scripted_llm import SYSTEM, model_for, policy
from tools_support import open_log

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model
PRICES = Prices(currency="EUR", models={"scripted": ModelPrice(input=1.0, output=2000.0)})


class Ledger:
    """A `SpendLimit` over a fixed amount left, counting how often the loop asked."""

    def __init__(self, left: float) -> None:
        self.left = left
        self.asked = 0

    def allowance(self) -> Allowance | None:
        self.asked += 1
        return Allowance(left=self.left, currency="EUR", budget="team 'x' per day (1 EUR)",
                         resets_at=1_800_000_000.0)


def _run(llm, tmp_path: Path, spend: Ledger):
    from sbx.agent.core.loop import run

    settings = AgentSettings(prices=PRICES)
    gate = build_gate(policy("calculate"), context=ToolContext(run_id="run-t", runner=None),
                      audit=open_log(tmp_path / "audit.jsonl"))
    with model_for(llm, settings) as model:
        assert isinstance(model, ModelClient)
        return run("2 ** 10?", model=model, gate=gate, settings=settings,
                   system_prompt=SYSTEM, spend=spend)


def test_a_spent_budget_stops_the_run_before_its_first_request(llm, tmp_path):
    llm.script([])
    result = _run(llm, tmp_path, Ledger(left=0.0))
    assert result.status == "budget_exceeded" and llm.requests == []
    assert "team 'x' per day (1 EUR)" in result.message
    assert "resets at 2027-01-15T08:00:00Z" in result.message


def test_the_tool_calls_that_would_pass_the_budget_never_run(llm, tmp_path):
    llm.script([Reply(tool_calls=(call("calculate", expression="2 ** 10"),), usage=(1000, 200))])
    spend = Ledger(left=0.3)  # this reply costs 0.401
    result = _run(llm, tmp_path, spend)
    assert result.status == "budget_exceeded" and result.tool_calls == 0
    assert result.cost is not None and result.cost["total"] == pytest.approx(0.401)
    assert spend.asked == 2  # before the request, before the tools


def test_a_budget_with_room_lets_the_run_finish(llm, tmp_path):
    llm.script([Reply(tool_calls=(call("calculate", expression="2 ** 10"),), usage=(1000, 100)),
                assistant("1024", usage=(1000, 100))])
    spend = Ledger(left=10.0)
    assert _run(llm, tmp_path, spend).status == "completed"
    assert spend.asked == 3  # two requests, one tool batch


def test_team_guard_rules_apply_first_and_a_principals_own_rule_wins():
    guard = GuardPolicy(teams={"support": GuardOverride(emails=True, phones=True)},
                        principals={"key:sam": GuardOverride(phones=False)})
    assert guard.for_principal("key:kim", "support").emails is True
    assert guard.for_principal("key:kim", None).emails is False
    assert guard.for_principal("key:kim", "other").emails is False
    sam = guard.for_principal("key:sam", "support")
    assert (sam.emails, sam.phones) == (True, False)
    weak = GuardPolicy(teams={"ops": GuardOverride(cards=False, secrets=False)})
    assert weak.weakened() == ["cards for team 'ops'", "secrets for team 'ops'"]


def test_a_teams_withheld_tools_are_not_offered_at_its_gate(tmp_path):
    base = policy("calculate", "list_data_files")
    gate = build_gate(withhold(base, ("calculate",)),
                      context=ToolContext(run_id="run-w", runner=None, team="ops"),
                      audit=open_log(tmp_path / "audit.jsonl"))
    assert gate.enabled_names() == ["list_data_files"]
    assert withhold(base, ()) is base
    outcome = gate.call(name="calculate", arguments='{"expression": "1 + 1"}', call_id="c1")
    assert outcome.status != "ok"  # offered to no one in the team, refused if called anyway
    gate.close()
    records = (tmp_path / "audit.jsonl").read_text()
    assert '"team":"ops"' in records.replace(" ", "")


def _policy_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sbx.toml"
    path.write_text(text)
    return path


def test_team_tables_are_checked_when_the_policy_loads(tmp_path):
    good = load_config(_policy_file(tmp_path, """
[service.teams.data]
cost_per_day = 5.0
cost_per_month = 50.0
disabled_tools = ["http_get"]
quotas = { runs_per_hour = 3 }
"""))
    team = good.service.teams["data"]
    assert (team.cost_per_day, team.disabled_tools) == (5.0, ["http_get"])
    assert good.service.team_quotas("data").runs_per_hour == 3
    assert good.service.team_quotas(None).runs_per_hour == good.service.quotas.runs_per_hour
    for text, wanted in (
        ('[service.teams.data]\ndisabled_tools = ["rm_rf"]\n', "unknown tool 'rm_rf'"),
        ('[service.teams."Bad Name"]\ncost_per_day = 1.0\n', "team 'Bad Name'"),
        ("[service.teams.data]\nquotas = { runs_per_hour = -1 }\n", "teams.data.quotas"),
        ("[service.teams.data]\ncost_per_day = -1.0\n", "cost_per_day"),
        ("[service.teams.data]\nbudget = 1.0\n", "unknown key"),
    ):
        with pytest.raises(PolicyError, match=wanted.replace("(", r"\(")):
            load_config(_policy_file(tmp_path, text))


def test_doctor_warns_once_per_weakened_detector(tmp_path):
    weakened = _policy_file(tmp_path, """
[guard]
cards = false
[guard.principals."key:ops-*"]
secrets = false
[guard.teams.batch]
cards = false
""")
    env = {"DOCKER_HOST": "unix:///nonexistent.sock"}  # the checks fail fast; warnings first
    done = sbx("doctor", "--policy", str(weakened), env=env)
    output = done.stdout.decode()
    assert done.returncode == 1 and "cannot reach the Docker engine" in output  # checks still run
    warnings = [line for line in output.splitlines() if line.startswith("[warn]")]
    assert len(warnings) == 3, output
    assert "cards is turned off" in warnings[0]
    assert "secrets for 'key:ops-*' is turned off" in warnings[1]
    assert "cards for team 'batch' is turned off" in warnings[2]
    default = sbx("doctor", env=env)
    assert "[warn]" not in default.stdout.decode()  # the packaged policy weakens nothing

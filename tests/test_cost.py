"""The cost in money: the price table on measured usage, and `max_cost` in the loop."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from test_cli_ask import _args

import scripted_llm
from sbx.agent.cli.main import cli
from sbx.agent.core.cost import ModelPrice, Prices, SandboxPrice
from sbx.agent.core.settings import AgentSettings, Budget
from sbx.agent.core.state import SandboxUsage
from sbx.agent.model.reply import TokenUsage
from sbx.agent.testing.scripted_model import Reply, assistant, call
from scripted_llm import ask, policy
from tools_support import make_gate

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

PRICES = Prices(
    currency="EUR",
    models={"scripted": ModelPrice(input=1000.0, output=2000.0),
            "gpt-*": ModelPrice(input=1, output=2)},
    sandbox=SandboxPrice(cpu_second=0.5, gb_second=0.25),
)


def test_a_run_costs_its_tokens_at_its_models_price_and_its_sandbox_time():
    sandbox = SandboxUsage()
    sandbox.add(wall=2.0, cpu=1.5, peak=2**30)  # 1 GiB for 2 s
    cost = PRICES.tariff("scripted").cost(
        TokenUsage(prompt_tokens=1000, completion_tokens=500, total_tokens=1500), sandbox
    )
    assert cost.model == pytest.approx(1000 * 1000 / 1e6 + 500 * 2000 / 1e6)  # 1 + 1
    assert cost.sandbox == pytest.approx(1.5 * 0.5 + 2.0 * 0.25)
    assert (cost.currency, cost.priced, cost.estimated) == ("EUR", True, False)
    assert cost.describe() == "3.2500 EUR"


def test_patterns_price_a_family_and_an_unpriced_model_says_so():
    assert PRICES.tariff("gpt-4o-mini").model == ModelPrice(input=1, output=2)
    unpriced = PRICES.tariff("llama").cost(
        TokenUsage(prompt_tokens=10, completion_tokens=1, total_tokens=11, estimated=True),
        SandboxUsage(),
    )
    assert (unpriced.total, unpriced.priced) == (0.0, False)
    assert unpriced.describe() == "0.0000 EUR (estimated, model unpriced)"


def _settings(max_cost: float) -> AgentSettings:
    return AgentSettings(budget=Budget(max_cost=max_cost), prices=PRICES)


def test_max_cost_stops_before_the_request_that_would_pass_it(llm, tmp_path):
    llm.script([Reply(tool_calls=(call("calculate", expression="2 ** 10"),), usage=(400, 100))])
    gate, _ = make_gate(tmp_path, policy("calculate"))

    result = ask(llm, gate, agent_settings=_settings(max_cost=0.7))

    # 400 prompt + 100 completion tokens cost 0.4 + 0.2 = 0.6 EUR; the next prompt would pass 0.7
    assert result.status == "cost_limit"
    assert "would exceed max_cost of 0.7 EUR; 0.6000 EUR spent (--max-cost)" in result.message
    assert len(llm.requests) == 1
    assert result.cost is not None and result.cost["total"] == pytest.approx(0.6)
    assert result.as_dict()["cost"]["currency"] == "EUR"


def test_a_completed_run_carries_its_cost(llm, tmp_path):
    llm.script([assistant("Nothing to compute.", usage=(100, 10))])
    gate, _ = make_gate(tmp_path, policy("calculate"))

    result = ask(llm, gate, agent_settings=_settings(max_cost=10.0))

    assert result.status == "completed"
    assert result.cost == {"total": pytest.approx(0.12), "model": pytest.approx(0.12),
                           "sandbox": 0.0, "currency": "EUR", "estimated": False, "priced": True}


PRICED_POLICY = """
[tools.calculate]
enabled = true
[agent.prices]
currency = "EUR"
[agent.prices.models."scripted"]
input = 1.0
output = 4000.0
"""


def test_sbx_ask_stops_at_max_cost_and_shows_what_the_run_cost(llm, tmp_path):
    llm.script([Reply(tool_calls=(call("calculate", expression="2 ** 10"),), usage=(400, 100))])

    outcome = CliRunner().invoke(cli, ["ask", "Compute", "--max-cost", "0.3",
                                       *_args(llm, tmp_path, policy=PRICED_POLICY)])

    assert outcome.exit_code == 3, outcome.output  # a budget ended the run
    assert "== limit reached (cost):" in outcome.output
    # 400 prompt tokens at 1 and 100 completion tokens at 4000 per million: 0.4004 EUR
    assert "cost: 0.4004 EUR" in outcome.output
    assert "would exceed max_cost of 0.3 EUR; 0.4004 EUR spent" in outcome.output

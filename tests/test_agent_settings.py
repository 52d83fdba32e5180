"""Where the agent's settings come from: flags > environment > policy `[agent]` > defaults."""

from __future__ import annotations

import pytest

from sbx.agent.settings import AgentSettings, SettingsError, resolve_endpoint, resolve_settings
from sbx.tools.policy import PolicyError, load_policy


def test_the_packaged_policy_gives_the_documented_defaults():
    chosen = resolve_settings(load_policy(None).agent, {})
    assert chosen == AgentSettings()
    budget = chosen.budget
    assert (budget.max_turns, budget.max_tool_calls, budget.max_tool_calls_per_turn) == (20, 40, 8)
    assert (budget.max_wall_time, budget.max_total_tokens) == (600.0, 200_000)
    assert (chosen.request_timeout, chosen.max_retries, chosen.context_tokens) == (120.0, 2, 60_000)


def test_flags_override_the_policy_table_and_units_are_parsed(tmp_path):
    table = {"request_timeout": "30s", "budget": {"max_turns": 5, "max_wall_time": "2m"}}
    flags = {"max_turns": 9, "max_wall_time": None, "request_timeout": "1m", "max_retries": None}

    chosen = resolve_settings(table, flags)

    assert (chosen.budget.max_turns, chosen.budget.max_wall_time) == (9, 120.0)
    assert (chosen.request_timeout, chosen.max_retries) == (60.0, 2)


def test_an_unknown_or_invalid_agent_key_is_a_policy_error_naming_it():
    with pytest.raises(PolicyError) as unknown:
        resolve_settings({"max_turn": 3}, {})
    assert str(unknown.value) == "invalid agent settings in the policy: agent.max_turn: unknown key"
    with pytest.raises(PolicyError, match="agent.budget.max_turns: Input should be a valid int"):
        resolve_settings({"budget": {"max_turns": "5"}}, {})


def test_an_invalid_flag_is_a_settings_error_naming_the_flag():
    with pytest.raises(SettingsError) as invalid:
        resolve_settings({}, {"max_turns": 0})
    assert str(invalid.value) == (
        "invalid value for --max-turns: Input should be greater than or equal to 1"
    )
    with pytest.raises(SettingsError, match="--max-time: 'soon' is not a duration"):
        resolve_settings({}, {"max_wall_time": "soon"})
    with pytest.raises(SettingsError, match="--max-time: 2d is longer than the most allowed, 1d"):
        resolve_settings({"budget": {"max_wall_time": "1h"}}, {"max_wall_time": "2d"})


def test_endpoint_flag_beats_environment_beats_policy():
    policy = AgentSettings(model="policy-model", base_url="http://policy:1/v1")
    env = {
        "OPENAI_BASE_URL": "http://env:2/v1", "OPENAI_API_KEY": "env-key", "SBX_MODEL": "env-model"
    }

    from_env = resolve_endpoint(policy, base_url=None, api_key=None, model=None, environ=env)
    from_flags = resolve_endpoint(
        policy, base_url="http://flag:3/v1", api_key="flag-key", model="flag-model", environ=env
    )
    from_policy = resolve_endpoint(policy, base_url=None, api_key="k", model=None, environ={})

    assert (from_env.base_url, from_env.api_key, from_env.model) == (
        "http://env:2/v1", "env-key", "env-model"
    )
    assert (from_flags.base_url, from_flags.api_key, from_flags.model) == (
        "http://flag:3/v1", "flag-key", "flag-model"
    )
    assert (from_policy.base_url, from_policy.model) == ("http://policy:1/v1", "policy-model")


def test_a_missing_model_key_or_bad_url_is_refused_with_the_fix():
    with pytest.raises(SettingsError, match="no model configured: pass --model, set SBX_MODEL"):
        resolve_endpoint(AgentSettings(), base_url=None, api_key="k", model=None, environ={})
    with pytest.raises(SettingsError, match="no API key: set OPENAI_API_KEY or pass --api-key"):
        resolve_endpoint(AgentSettings(), base_url=None, api_key=None, model="m", environ={})
    with pytest.raises(SettingsError, match="must start with http:// or https://"):
        resolve_endpoint(AgentSettings(), base_url="localhost:11434", api_key="k", model="m",
                         environ={})

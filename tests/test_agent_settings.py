"""Where the agent's settings come from: flags > environment > policy `[agent]` > defaults."""

from __future__ import annotations

import pytest

from sbx.agent.core.config import load_config
from sbx.agent.core.settings import AgentSettings, SettingsError, resolve_endpoint
from sbx.tools.policy import PolicyError


def write(tmp_path, text: str):
    path = tmp_path / "sbx.toml"
    path.write_text(text)
    return path


def test_the_packaged_policy_gives_the_documented_defaults():
    chosen = load_config(None).settings
    assert chosen == AgentSettings()
    budget = chosen.budget
    assert (budget.max_turns, budget.max_tool_calls, budget.max_tool_calls_per_turn) == (20, 40, 8)
    assert (budget.max_wall_time, budget.max_total_tokens) == (600.0, 200_000)
    assert (chosen.request_timeout, chosen.max_retries, chosen.context_tokens) == (120.0, 2, 60_000)


def test_flags_override_the_policy_table_and_units_are_parsed(tmp_path):
    path = write(
        tmp_path, '[agent]\nrequest_timeout = "30s"\n[agent.budget]\nmax_turns = 5\n'
        'max_wall_time = "2m"\n'
    )
    flags = {"max_turns": 9, "max_wall_time": None, "request_timeout": "1m", "max_retries": None}

    chosen = load_config(path).with_flags(flags).settings

    assert (chosen.budget.max_turns, chosen.budget.max_wall_time) == (9, 120.0)
    assert (chosen.request_timeout, chosen.max_retries) == (60.0, 2)


def test_an_unknown_or_invalid_agent_key_names_file_line_and_key(tmp_path):
    path = write(tmp_path, "[agent]\nmax_turn = 3\n")
    with pytest.raises(PolicyError) as unknown:
        load_config(path)
    assert str(unknown.value) == f"{path}:2: agent.max_turn: unknown key"
    path = write(tmp_path, "[agent.budget]\nmax_turns = 0\n")
    with pytest.raises(PolicyError) as invalid:
        load_config(path)
    assert str(invalid.value) == (
        f"{path}:2: agent.budget.max_turns: Input should be greater than or equal to 1"
    )


def test_policy_values_are_strict(tmp_path):
    path = write(tmp_path, '[agent.budget]\nmax_turns = "5"\n')
    with pytest.raises(PolicyError, match=r"sbx.toml:2: agent.budget.max_turns: Input should be "
                       "a valid int"):
        load_config(path)


def test_a_bad_flag_is_named_as_the_flag():
    config = load_config(None)
    with pytest.raises(SettingsError) as invalid:
        config.with_flags({"max_turns": 0})
    assert str(invalid.value) == (
        "invalid value for --max-turns: Input should be greater than or equal to 1"
    )
    with pytest.raises(SettingsError, match="^invalid value for --max-time: "):
        config.with_flags({"max_wall_time": "soon"})


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

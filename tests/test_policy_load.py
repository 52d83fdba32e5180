"""Policy files: the packaged default loads; bad files fail naming the file, line and key."""

from __future__ import annotations

import tomllib

import pytest

from sbx.agent.core.config import load_config
from sbx.agent.core.settings import AgentSettings
from sbx.sandbox.limits import Limits
from sbx.tools.policy import BUILTIN_TOOLS, Policy, PolicyError, default_policy_path


def load_policy(path):
    return load_config(path).policy


def write(tmp_path, text: str):
    path = tmp_path / "sbx.toml"
    path.write_text(text)
    return path


def test_packaged_default_is_documented_and_closed() -> None:
    config = load_config(None)
    policy = config.policy
    assert policy.tools.http_get.enabled is False
    assert policy.tools.execute_python.enabled is True
    assert config.limits == Limits()  # the file restates the hardened defaults
    assert config.settings == AgentSettings()
    text = default_policy_path().read_text()
    data = tomllib.loads(text)
    lines = text.splitlines()
    for table, keys in [(("tools", n), data["tools"][n]) for n in BUILTIN_TOOLS] + [
        (("sandbox",), data["sandbox"]),
        (("quotas",), {"max_denied": 1}),
    ]:
        for key in keys:
            index = next(i for i, line in enumerate(lines) if line.startswith(f"{key} ="))
            assert lines[index - 1].startswith("#"), (table, key)


def test_empty_policy_denies_everything() -> None:
    policy = Policy()
    rules = [policy.tools.rule(name) for name in BUILTIN_TOOLS]
    assert all(rule is not None and not rule.enabled for rule in rules)


def test_syntax_error_names_file_and_line(tmp_path) -> None:
    path = write(tmp_path, "[tools.calculate]\nenabled = true\nmax_expression_length = = 3\n")
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(info.value) == f"{path}: not valid TOML: Invalid value (at line 3, column 25)"


def test_unknown_key_names_line_and_key(tmp_path) -> None:
    path = write(
        tmp_path,
        "[tools.calculate]\nenabled = true\n\n"
        "[tools.http_get]\nenabled = false\nallowed_domain = []\n",
    )
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(info.value) == f"{path}:6: tools.http_get.allowed_domain: unknown key"


def test_unknown_tool_name_is_an_error(tmp_path) -> None:
    path = write(tmp_path, "[tools.calculate]\nenabled = true\n[tools.shell]\nenabled = true\n")
    with pytest.raises(PolicyError, match=r"sbx.toml:3: tools.shell: unknown key"):
        load_policy(path)


def test_bad_values_name_their_line(tmp_path) -> None:
    path = write(tmp_path, '[sandbox]\ncpus = "1"\nmemory = "lots"\n')
    with pytest.raises(PolicyError, match=r"sbx.toml:3: sandbox.memory: .*not a size"):
        load_policy(path)
    path = write(tmp_path, "[tools.http_get]\nenabled = true\n")
    with pytest.raises(
        PolicyError, match=r"sbx.toml:1: tools.http_get: .*allowed_domains is empty"
    ):
        load_policy(path)
    path = write(tmp_path, '[tools.http_get]\nallowed_domains = ["ok.example", "bad domain"]\n')
    with pytest.raises(
        PolicyError,
        match=r"sbx.toml:2: tools.http_get.allowed_domains: 'bad domain' is not a host name",
    ):
        load_policy(path)
    path = write(tmp_path, "[quotas.per_tool]\nexecute_pyton = 3\n")
    with pytest.raises(PolicyError, match=r"unknown tool 'execute_pyton'"):
        load_policy(path)


def test_missing_file_is_one_line(tmp_path) -> None:
    with pytest.raises(PolicyError, match="cannot read policy"):
        load_policy(tmp_path / "absent.toml")


def test_each_table_goes_to_its_own_layer(tmp_path) -> None:
    path = write(
        tmp_path,
        '[agent]\nmodel = "gpt-x"\n[agent.budget]\nmax_turns = 7\n[sandbox]\nmemory = "1g"\n'
        "[tools.calculate]\nenabled = true\n",
    )
    config = load_config(path)
    assert (config.settings.model, config.settings.budget.max_turns) == ("gpt-x", 7)
    assert config.limits.memory == 1 << 30
    assert config.policy.tools.calculate.enabled is True
    assert "sandbox" not in Policy.model_fields and "agent" not in Policy.model_fields
    path = write(tmp_path, '[agent.budgets]\nmax_turns = 7\n')
    with pytest.raises(PolicyError, match=r"sbx.toml:1: agent.budgets: unknown key"):
        load_config(path)


def test_domains_are_normalised(tmp_path) -> None:
    path = write(
        tmp_path,
        "[tools.http_get]\nenabled = true\n"
        'allowed_domains = ["Data.Example.ORG.", "*.cdn.example"]\n',
    )
    assert load_policy(path).tools.http_get.allowed_domains == ["data.example.org", "*.cdn.example"]


def test_a_file_with_only_the_table_to_change_keeps_the_default_tools(tmp_path) -> None:
    config = load_config(write(tmp_path, '[sandbox]\nmemory = "1g"\n'))
    default = load_config(None)
    assert config.limits.memory == 1 << 30
    assert config.policy == default.policy  # [tools], [quotas], [audit]: the packaged ones
    assert config.policy.tools.execute_python.enabled is True
    assert config.settings == default.settings
    empty = load_config(write(tmp_path, "[tools]\n"))  # a [tools] table given is its own
    assert empty.policy.tools.execute_python.enabled is False


def test_the_pool_table_becomes_the_pools_config_and_defaults_keep_none_warm(tmp_path) -> None:
    default = load_config(None).pool
    assert (default.size, default.max_size, default.keeps_warm) == (0, 0, False)
    path = write(tmp_path, '[pool]\nmax_size = 6\nwindow = "30s"\nmemory_budget = "3g"\n')
    config = load_config(path).pool
    assert (config.size, config.max_size, config.window) == (0, 6, 30.0)
    assert config.memory_budget == 3 << 30
    assert config.refill_delay == 2.0
    assert load_config(write(tmp_path, '[pool]\nrefill_delay = "500ms"\n')).pool.refill_delay == 0.5
    assert load_config(write(tmp_path, '[pool]\nrefill_delay = "0s"\n')).pool.refill_delay == 0.0
    path = write(tmp_path, '[pool]\nrefill_delay = "2m"\n')
    with pytest.raises(PolicyError, match=r"sbx.toml:2: pool.refill_delay: "):
        load_config(path)
    path = write(tmp_path, '[pool]\nmax_size = 2\nmemory_budget = "plenty"\n')
    with pytest.raises(PolicyError, match=r"sbx.toml:3: pool.memory_budget: .*not a size"):
        load_config(path)
    path = write(tmp_path, "[pool]\nmax_size = -1\n")
    with pytest.raises(PolicyError, match=r"sbx.toml:2: pool.max_size: "):
        load_config(path)

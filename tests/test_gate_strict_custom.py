"""Custom tools from the policy's `entry`, in `sbx ask`, through the same gate; and the circuit
breaker as a model meets it (real CLI, real SDK over HTTP to the scripted server)."""

from __future__ import annotations

import json
import uuid

import pytest
from click.testing import CliRunner

import scripted_llm
from sbx.agent.cli.main import cli
from sbx.agent.testing.scripted_model import assistant, tool_call
from sbx.tools.breaker import BREAKER_RULE
from scripted_llm import FAKE_KEY
from tools_support import events

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

MODULE = '''
from sbx.tools.registry import ToolFailure


def lookup(customer: str) -> str:
    """Look a customer's tier up.

    Args:
        customer: The customer's name.
    """
    return {"acme": "gold"}.get(customer, "unknown")


def broken(customer: str) -> str:
    """Always fail the same way.

    Args:
        customer: Ignored.
    """
    raise ToolFailure("the customer database is down")


def untyped(customer):
    """No annotation."""
'''


@pytest.fixture
def module(tmp_path, monkeypatch) -> str:
    """An importable module of tools, under a name no other test uses."""
    name = f"sbx_custom_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _ask(llm, tmp_path, policy: str, question: str = "Which tier is acme?"):
    path = tmp_path / "sbx.toml"
    path.write_text(policy)
    args = ["ask", question, "--base-url", llm.base_url, "--api-key", FAKE_KEY,
            "--model", "scripted", "--policy", str(path),
            "--audit-log", str(tmp_path / "audit.jsonl"),
            "--transcript", str(tmp_path / "run.jsonl"), "--output", str(tmp_path / "out")]
    return CliRunner().invoke(cli, args)


def test_a_custom_tool_loads_from_the_policy_and_runs_through_the_gate(llm, tmp_path, module):
    llm.script([tool_call("lookup", customer="acme"), assistant("acme is gold.")])
    policy = f'[tools.custom.lookup]\nenabled = true\nentry = "{module}:lookup"\ntimeout = "5s"\n'
    outcome = _ask(llm, tmp_path, policy)
    assert outcome.exit_code == 0, outcome.output
    assert "acme is gold." in outcome.stdout
    sent = llm.requests[0].body["tools"]
    assert [t["function"]["name"] for t in sent] == ["lookup"]
    assert llm.requests[1].last_tool_message == "gold"
    audit = tmp_path / "audit.jsonl"
    assert events(audit, "run_start")[0]["enabled_tools"] == ["lookup"]
    assert [(o["tool"], o["status"]) for o in events(audit, "outcome")] == [("lookup", "ok")]
    # strict arguments apply to it like to any tool
    llm.script([tool_call("lookup", customer=""), assistant("I could not look it up.")])
    (tmp_path / "run.jsonl").unlink()
    assert _ask(llm, tmp_path, policy).exit_code == 0
    assert events(audit, "decision")[-1]["decision"] == "invalid"


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("sbx_no_such_module_here:lookup", "cannot import sbx_no_such_module_here"),
        ("{module}:missing", "has no attribute 'missing'"),
        ("{module}:untyped", "needs a type annotation"),
        ("not an entry", "is not 'package.module:function'"),
    ],
)
def test_a_bad_entry_is_one_line_and_exit_125(llm, tmp_path, module, entry, problem):
    entry = entry.format(module=module)
    policy = f'[tools.custom.lookup]\nenabled = true\nentry = "{entry}"\n'
    outcome = _ask(llm, tmp_path, policy)
    assert outcome.exit_code == 125, outcome.output
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sbx: ") and problem in lines[0]
    assert "tools.custom.lookup" in lines[0]
    assert llm.requests == []


def test_the_breaker_tells_the_model_and_the_gentler_notice_stays_quiet(
    llm, tmp_path, module
):
    llm.script([
        tool_call("broken", customer="acme"),
        tool_call("broken", customer="acme"),
        tool_call("broken", customer="acme"),
        tool_call("broken", customer="acme"),
        assistant("The customer database is down; I cannot tell."),
    ])
    policy = (
        f'[tools.custom.broken]\nenabled = true\nentry = "{module}:broken"\n'
        "[quotas]\nmax_identical_failures = 3\n"
    )
    outcome = _ask(llm, tmp_path, policy)
    assert outcome.exit_code == 0, outcome.output
    third = llm.requests[3].last_tool_message
    assert "now disabled for the rest of this run (quotas.max_identical_failures = 3)" in third
    fourth = llm.requests[4].last_tool_message
    assert "denied by policy rule quotas.max_identical_failures" in fourth
    sent = json.dumps(llm.requests[3].body["messages"])
    assert "Repeating it will not help" not in sent  # the breaker's message stands alone
    decisions = events(tmp_path / "audit.jsonl", "decision")
    assert [d["decision"] for d in decisions] == ["allowed"] * 3 + ["denied"]
    assert decisions[-1]["rule"] == BREAKER_RULE

"""`sbx audit show`: one readable row per call, with the run, tool and refusal filters."""

from __future__ import annotations

from click.testing import CliRunner

from sbx.agent.cli.main import cli
from tools_support import make_gate, policy_from


def make_log(tmp_path):
    policy = policy_from(
        {"tools": {"calculate": {"enabled": True}}, "quotas": {"per_tool": {"calculate": 1}}}
    )
    gate, log = make_gate(tmp_path, policy, run_id="run-show-1")
    gate.call(name="calculate", arguments='{"expression": "6*7"}', call_id="call-1")
    gate.call(name="calculate", arguments='{"expression": "1+1"}', call_id="call-2")
    gate.call(name="http_get", arguments='{"url": "http://x.test/"}', call_id="call-3")
    gate.close()
    return log


def show(log, *args):
    """The table as a list of {column: cell} dicts, cut at the header's column offsets."""
    result = CliRunner().invoke(cli, ["audit", "show", str(log), *args])
    assert result.exit_code == 0, result.output
    header, *lines = result.output.splitlines()
    names = header.split()
    starts = [header.index(name) for name in names]
    ends = [*starts[1:], None]
    return [
        {n.lower(): line[a:b].strip() for n, a, b in zip(names, starts, ends, strict=True)}
        for line in lines
    ]


def test_show_table_and_filters(tmp_path) -> None:
    log = make_log(tmp_path)
    rows = show(log)
    assert [(r["call"], r["tool"], r["decision"], r["status"], r["rule"]) for r in rows] == [
        ("-", "-", "run_start", "", ""),
        ("run-show-1-c1", "calculate", "allowed", "ok", ""),
        ("run-show-1-c2", "calculate", "denied", "", "quotas.per_tool.calculate"),
        ("run-show-1-c3", "http_get", "denied", "", "tools.http_get.enabled"),
        ("-", "-", "run_end", "", ""),
    ]
    assert rows[1]["arguments"] == '{"expression":"6*7"}'
    assert rows[1]["run"] == "run-show-1" and rows[1]["time"].endswith("Z")
    assert [r["call"] for r in show(log, "--denied")] == ["run-show-1-c2", "run-show-1-c3"]
    assert [r["call"] for r in show(log, "--tool", "http_get")] == ["run-show-1-c3"]
    assert len(show(log, "--run", "run-show")) == 5
    result = CliRunner().invoke(cli, ["audit", "show", str(log), "--run", "other"])
    assert "(no matching records)" in result.output


def test_show_missing_file_is_one_line(tmp_path) -> None:
    result = CliRunner().invoke(cli, ["audit", "show", str(tmp_path / "none.jsonl")])
    assert result.exit_code == 1
    assert result.output.startswith("Error: cannot read") and result.output.count("\n") == 1


def test_denied_lists_every_refusal_with_its_reason(tmp_path) -> None:
    """Unknown tools and invalid arguments count toward `max_denied` like denials, but
    `--denied` showed an empty table for a model calling `rm_rf_everything` six times."""
    policy = policy_from({"tools": {"calculate": {"enabled": True}}})
    gate, log = make_gate(tmp_path, policy, run_id="run-refused")
    gate.call(name="rm_rf_everything", arguments='{"path": "/"}', call_id="call-1")
    gate.call(name="calculate", arguments='{"expresion": "1"}', call_id="call-2")
    gate.call(name="http_get", arguments='{"url": "http://x.test/"}', call_id="call-3")
    gate.call(name="calculate", arguments='{"expression": "1+1"}', call_id="call-4")
    gate.close()

    rows = show(log, "--denied")

    assert [(r["call"], r["tool"], r["decision"], r["rule"]) for r in rows] == [
        ("run-refused-c1", "rm_rf_everything", "unknown", ""),
        ("run-refused-c2", "calculate", "invalid", ""),
        ("run-refused-c3", "http_get", "denied", "tools.http_get.enabled"),
    ]
    assert rows[0]["reason"].startswith("Unknown tool name: 'rm_rf_everything'.")
    assert rows[1]["reason"].startswith("2 validation errors for tool 'calculate'")
    assert rows[2]["reason"].startswith("Call to 'http_get' denied by policy rule")
    assert all(r["reason"] == "" for r in show(log) if r["decision"] == "allowed")

"""The audit log keys tool calls by ids sbx assigns; the model's ids are data it cannot abuse.

A model that reuses one id for a denied call and an allowed one, or sends no
ids at all, turn after turn, must not make `sbx audit show` merge two calls
into one row: a denied request to the metadata address must show as denied.
"""

from __future__ import annotations

from click.testing import CliRunner

import scripted_llm
from sbx.agent.cli.main import cli
from sbx.agent.testing.scripted_model import assistant, call, raw_completion, tool_calls
from scripted_llm import ask
from tools_support import events, make_gate, open_log, policy_from

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

METADATA = "http://169.254.169.254/latest/meta-data/"
POLICY = policy_from({"tools": {
    "calculate": {"enabled": True},
    "http_get": {"enabled": True, "allowed_domains": ["example.com"]},
}})


def _show(log, *args):
    """`sbx audit show` call rows as (call, tool, decision, status, rule)."""
    result = CliRunner().invoke(cli, ["audit", "show", str(log), *args])
    assert result.exit_code == 0, result.output
    header, *lines = result.stdout.splitlines()
    names = header.split()
    starts = [header.index(name) for name in names]
    rows = []
    for line in lines:
        cells = dict(zip(names, (line[a:b].strip() for a, b in zip(
            starts, [*starts[1:], None], strict=True)), strict=True))
        if cells["CALL"] != "-":
            rows.append((cells["CALL"], cells["TOOL"], cells["DECISION"], cells["STATUS"],
                         cells["RULE"]))
    return rows


def _no_id_call(expression):
    message = {"role": "assistant", "content": None, "tool_calls": [{
        "type": "function",
        "function": {"name": "calculate", "arguments": f'{{"expression": "{expression}"}}'},
    }]}
    return raw_completion(message, finish_reason="tool_calls")


def test_a_reused_id_cannot_make_a_denied_call_show_as_allowed(llm, tmp_path):
    llm.script([
        tool_calls(call("http_get", "dup", url=METADATA), call("calculate", "dup", expression="2")),
        assistant("done"),
    ])
    gate, log = make_gate(tmp_path, POLICY)

    result = ask(llm, gate)

    assert result.status == "completed"
    assert _show(log) == [
        ("run-test-c1", "http_get", "denied", "", "tools.http_get.allowed_domains"),
        ("run-test-c2", "calculate", "allowed", "ok", ""),
    ]
    assert _show(log, "--denied") == [
        ("run-test-c1", "http_get", "denied", "", "tools.http_get.allowed_domains"),
    ]
    requests = events(log, "request")
    assert [(r["call_id"], r["model_call_id"]) for r in requests] == [
        ("run-test-c1", "dup"), ("run-test-c2", "dup")
    ]
    # the model still gets an answer per call, each under an id unique in its reply
    sent = llm.requests[1].messages
    asked = [c["id"] for c in sent[-3]["tool_calls"]]
    answered = [m["tool_call_id"] for m in sent[-2:]]
    assert asked == answered and asked[0] == "dup" and asked[1].startswith("call_sbx_")
    assert [r["tool_call_id"] for r in requests] == asked


def test_missing_ids_get_ids_unique_in_the_run_in_the_audit_and_the_conversation(llm, tmp_path):
    llm.script([_no_id_call("1 + 1"), _no_id_call("2 + 2"), assistant("4")])
    gate, log = make_gate(tmp_path, POLICY)

    result = ask(llm, gate)

    assert (result.status, result.tool_calls) == ("completed", 2)
    requests = events(log, "request")
    assert [r["call_id"] for r in requests] == ["run-test-c1", "run-test-c2"]
    assert [r["model_call_id"] for r in requests] == [None, None]
    outcomes = {o["call_id"]: o["text"] for o in events(log, "outcome")}
    assert outcomes == {"run-test-c1": "2", "run-test-c2": "4"}
    answered = [m["tool_call_id"] for m in llm.requests[2].tool_messages()]
    assert len(set(answered)) == 2 and all(answered)


def test_audit_show_never_merges_two_requests_that_share_an_id(tmp_path):
    """Logs written before sbx assigned ids keyed calls by the model's: one row per request."""
    path = tmp_path / "old.jsonl"
    with open_log(path) as log:
        log.record("run-old", "request", {"call_id": "dup", "tool": "http_get",
                                          "arguments": {"url": METADATA}})
        denied = {"decision": "denied", "rule": "tools.http_get.allowed_domains"}
        log.record("run-old", "decision", {"call_id": "dup", "tool": "http_get", **denied})
        log.record("run-old", "request", {"call_id": "dup", "tool": "calculate",
                                          "arguments": {"expression": "2"}})
        log.record("run-old", "decision", {"call_id": "dup", "tool": "calculate",
                                           "decision": "allowed"})
        log.record("run-old", "outcome", {"call_id": "dup", "tool": "calculate", "status": "ok",
                                          "duration_s": 0.001})

    assert _show(path) == [
        ("dup", "http_get", "denied", "", "tools.http_get.allowed_domains"),
        ("dup", "calculate", "allowed", "ok", ""),
    ]
    assert _show(path, "--denied") == [
        ("dup", "http_get", "denied", "", "tools.http_get.allowed_domains"),
    ]

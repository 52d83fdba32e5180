"""Acceptance 4: a fake API key (environment, context, arguments) never reaches the log."""

from __future__ import annotations

import json
import os
from urllib.parse import quote

from sbx.tools.audit import open_audit_log
from sbx.tools.context import ToolContext
from sbx.tools.gate import build_gate
from sbx.tools.redact import REDACTED, Redactor
from sbx.tools.registry import tool
from tools_support import FAKE_KEY, SubprocessRunner, policy_from


@tool
def echo(note: str, api_key: str = "", password: str = "") -> str:
    """Echo the note back (the observation, too, goes to the log).

    Args:
        note: Any text.
        api_key: A field whose name says it is secret.
        password: Another.
    """
    return f"note was: {note}"


def test_fake_api_key_never_appears_in_the_log(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    other_secret = "hunter2-very-secret-password"
    policy = policy_from(
        {
            "tools": {"execute_python": {"enabled": True}, "custom": {"echo": {"enabled": True}}},
            "audit": {"path": str(tmp_path / "audit.jsonl")},
        }
    )
    audit = open_audit_log(policy.audit, option=None, api_key=FAKE_KEY, environ=os.environ)
    context = ToolContext(run_id="run-secret", runner=SubprocessRunner())
    gate = build_gate(policy, context=context, audit=audit, extra_tools=[echo])
    calls = [
        ("echo", json.dumps({"note": f"the key is {FAKE_KEY}!", "password": other_secret})),
        (
            "echo",
            json.dumps(
                {"note": f"url-encoded {quote(FAKE_KEY, safe='')}", "api_key": "anything-at-all"}
            ),
        ),
        ("echo", '{"note": "' + FAKE_KEY + '" broken json'),
        (
            "execute_python",
            json.dumps({"code": f"import sys\nprint({FAKE_KEY!r})\nsys.stderr.write('x')"}),
        ),
        ("no_such_tool", json.dumps({FAKE_KEY: FAKE_KEY})),
    ]
    outcomes = [
        gate.call(name=name, arguments=args, call_id=str(i)) for i, (name, args) in enumerate(calls)
    ]
    gate.close()
    audit.close()
    # The data guard replaces key shapes before any observation leaves for the model: an
    # argument echoed back, and the program's output.
    assert FAKE_KEY not in outcomes[0].text and "[secret]" in outcomes[0].text
    assert FAKE_KEY not in outcomes[3].text and "[secret]" in outcomes[3].text
    log = (tmp_path / "audit.jsonl").read_bytes()  # ... but the log never holds the key
    assert FAKE_KEY.encode() not in log
    assert quote(FAKE_KEY, safe="").encode() not in log
    assert other_secret.encode() not in log
    assert b"anything-at-all" not in log
    assert log.count(REDACTED.encode()) >= 8
    assert b"code_sha256" in log  # the program is still identifiable by its digest


def test_redactor_rules() -> None:
    redactor = Redactor.build(
        secret_values=["short", "a-long-secret-value"],
        secret_env=["MY_TOKEN"],
        environ={"MY_TOKEN": "env-token-1234567"},
        secret_fields=["Authorization"],
    )
    value = {
        "text": "a-long-secret-value and env-token-1234567 and short",
        "headers": {"authorization": "Bearer xyz"},
        "list": ["sk-proj-abcdefghijklmnopqrstuvwxyz"],
    }
    assert redactor.redact(value) == {
        "text": f"{REDACTED} and {REDACTED} and short",  # values under 8 characters are not secrets
        "headers": {"authorization": REDACTED},
        "list": [REDACTED],  # anything shaped like an OpenAI key
    }

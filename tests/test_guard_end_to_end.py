"""The data guard end to end: synthetic customers through `sbx ask` and `sbx serve`.

The scripted server records every request the model endpoint received: none may
carry an e-mail address, a phone number or a card number, while the code in the
sandbox computes on the real data, the user's transcript keeps the real output,
and the audit log counts each redaction (never the value).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_cli_ask import _args, _transcript

import scripted_llm
import service_support
from sbx.agent.cli.main import cli
from sbx.agent.testing.scripted_model import assistant, tool_call
from service_support import stream, upload
from tools_support import records

llm = scripted_llm.llm
store = service_support.store
serve = service_support.serve
pg_cluster = service_support.pg_cluster

EMAILS = ["ada.lovelace@example.com", "grace.hopper@example.org", "alan.turing@example.net"]
PHONES = ["+44 20 7946 0958", "+1-555-010-0123", "(555) 010-0199"]
CARDS = ["4111111111111111", "5555555555554444", "4012888888881881"]
CUSTOMERS = "name,email,phone,card,spend\n" + "".join(
    f"{name},{email},{phone},{card},{spend}\n"
    for name, email, phone, card, spend in zip(
        ["Ada", "Grace", "Alan"], EMAILS, PHONES, CARDS, [120.5, 80.25, 42.0], strict=True
    )
)
POLICY = """
[tools.execute_python]
enabled = true
[tools.preview_data_file]
enabled = true
[guard]
emails = true
phones = true
"""
CODE = (
    "import pandas as pd\n"
    "df = pd.read_csv('/data/customers.csv', dtype={'card': str})\n"
    "print(df.head())\n"
    "print('visa', int(df.card.str.startswith('4').sum()), 'spend', df.spend.sum())\n"
)
SECRETS = [*EMAILS, *PHONES, *CARDS, "4111 1111", "ada.lovelace"]


def _leaks(bodies: list[str]) -> list[str]:
    return [secret for secret in SECRETS for body in bodies if secret in body]


def _script(llm) -> None:
    llm.script([
        tool_call("preview_data_file", name="customers.csv"),
        tool_call("execute_python", code=CODE),
        assistant("Two customers pay by Visa; they spent 242.75 in all."),
    ])


def _bodies(llm) -> list[str]:
    return [json.dumps(request.body) for request in llm.requests]


@pytest.mark.docker
def test_sbx_ask_sends_the_model_no_personal_data_and_audits_each_redaction(llm, tmp_path):
    data = tmp_path / "customers.csv"
    data.write_text(CUSTOMERS)
    _script(llm)

    outcome = CliRunner().invoke(
        cli, ["ask", "Who pays by Visa?", "--data", str(data), *_args(llm, tmp_path, policy=POLICY)]
    )

    assert outcome.exit_code == 0, outcome.output
    bodies = _bodies(llm)
    assert len(bodies) == 3
    assert _leaks(bodies) == []
    last_tool = llm.requests[2].body["messages"][-1]["content"]
    assert "visa 2 spend 242.75" in last_tool  # the code computed on the real data
    assert "[email]" in last_tool and "[card]" in last_tool and "[phone]" in last_tool
    # The person who asked keeps the real output in the transcript.
    results = [e for e in _transcript(tmp_path) if e["type"] == "tool_result"]
    assert EMAILS[0] in results[1]["execution"]["stdout"]
    # The audit log counts every redaction, and never holds the value it replaced.
    audit = records(tmp_path / "audit.jsonl")
    outcomes = [r["data"] for r in audit if r["event"] == "outcome"]
    assert outcomes[0]["redactions"] == {"card": 3, "email": 3, "phone": 3}
    assert outcomes[1]["redactions"]["card"] == 3
    prompt = [r["data"] for r in audit if r["event"] == "redaction"]
    assert prompt and prompt[0]["where"] == "system_prompt"
    assert prompt[0]["redactions"]["email"] >= 3
    assert _leaks([json.dumps(r["data"]) for r in audit if r["event"] != "request"]) == []


@pytest.mark.docker
def test_the_service_sends_the_model_no_personal_data(store, serve, llm):
    server = serve(store, policy={"tools.preview_data_file": {"enabled": True},
                                  "guard": {"emails": True, "phones": True}})
    alice = server.client(server.key("alice"))
    dataset = upload(alice, "customers.csv", CUSTOMERS.encode())
    assert dataset.status_code == 201, dataset.text
    created = alice.post("/v1/conversations", json={"datasets": [dataset.json()["id"]]})
    assert created.status_code == 201, created.text
    _script(llm)

    asked = alice.post(f"/v1/conversations/{created.json()['id']}/questions",
                       json={"question": "Who pays by Visa?"})
    assert asked.status_code == 202, asked.text
    events = stream(alice, asked.json()["run_id"])

    assert events[-1]["data"]["status"] == "completed"
    assert _leaks(_bodies(llm)) == []
    assert "visa 2 spend 242.75" in llm.requests[2].body["messages"][-1]["content"]
    audit = [json.loads(line) for line in Path(server.audit_log).read_text().splitlines()]
    assert any(r["data"].get("redactions", {}).get("email") == 3 for r in audit
               if r["event"] == "outcome")

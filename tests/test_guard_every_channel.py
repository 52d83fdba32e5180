"""Nothing planted in the data leaves for the model provider, by any channel, on any face.

A card number, a key-shaped secret and a masked column's value are planted in
the data and reach the model through every channel sbx builds: the system
prompt's summary of a semicolon CSV and a JSON Lines file, a preview, error
messages and the repeated-failure notice quoting them, a chart's title, axis
label and file name, full-width digits, and a restore's note quoting replayed
output that differs (a cell printing a sample and a random id). The scripted
endpoint records every request's raw body; each is folded (Unicode digits to
ASCII, compatibility forms, separators inside digit runs removed) before it is
searched, so a full-width or grouped card still counts as a leak. The CLI and
the service go through the model client's boundary; MCP has no model of its
own, so there the check is on what MCP sends its client: every tool result's
text and every progress message (artifact links name files as the code named
them: they are the caller's own files, security.md).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from mcp.types import TextContent

import scripted_llm
import service_support
from conftest import TEST_IMAGE
from mcp_support import mcp_client, session_ids, wait_until_gone
from sbx.agent.cli.main import cli
from sbx.agent.testing.scripted_model import ScriptedRequest, assistant, tool_call
from sbx.sandbox.config import RUN_ID_LABEL
from scripted_llm import FAKE_KEY
from service_support import managed_containers, stream, upload, wait_for

llm = scripted_llm.llm
store = service_support.store
serve = service_support.serve
pg_cluster = service_support.pg_cluster

CARD = "4111111111111111"
KEY = "sk-proj-Q7x9Lm2Vb4Np8Rt6Yw3Zk5Hd"
HOLDER = "Zebulon Quux"
PLANTED = {"card": CARD, "key": KEY.casefold(), "masked value": HOLDER.casefold()}
ARABIC_INDIC = CARD.translate({ord(d): 0x0660 + int(d) for d in "0123456789"})
SEMICOLON_CSV = f"holder;card;token;amount\n{HOLDER};{CARD};{KEY};12,50\nAda Byron;;;3,00\n"
JSON_LINES = (json.dumps({"holder": HOLDER, "card": ARABIC_INDIC, "amount": 12.5},
                         ensure_ascii=False) + "\n"
              + json.dumps({"holder": "Ada Byron", "card": "", "amount": 3.0}) + "\n")
POLICY = {"tools.preview_data_file": {"enabled": True}, "guard": {"mask_columns": ["holder"]}}
POLICY_TOML = """
[tools.execute_python]
enabled = true
[tools.preview_data_file]
enabled = true
[guard]
mask_columns = ["holder"]
"""

READ = "import pandas as pd\nd = pd.read_csv('/data/cards.csv', sep=';', dtype=str)\n"
FAIL = READ + "raise KeyError(d.card[0] + ' ' + d.token[0])\n"
CHART = READ + (
    "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
    "plt.plot([1, 2], [3, 4])\nplt.title('card ' + d.card[0])\nplt.xlabel(d.token[0])\n"
    "plt.savefig('/output/' + d.card[0] + '_statement.png')\nprint('saved')\n"
)
SAMPLE = READ + (
    "import time, uuid\n"
    "print('wide', d.card[0].translate({ord(c): 0xFF10 + int(c) for c in '0123456789'}))\n"
    "print('sample', d.card[0], 'id', uuid.uuid4().hex, flush=True)\n"
)


def _first_question() -> list:
    """Every channel of one question: preview, three same failures, a chart, odd digits."""
    return [
        tool_call("preview_data_file", name="cards.jsonl"),
        tool_call("execute_python", code=FAIL),
        tool_call("execute_python", code=FAIL),
        tool_call("execute_python", code=FAIL),  # the repeated-failure notice follows
        tool_call("execute_python", code=CHART),  # described to a model without vision
        tool_call("execute_python", code=SAMPLE),  # replayed later: differs (the id)
        assistant("One holder is on file."),
    ]


def _folded(text: str) -> str:
    """What a reader of the text sees: Unicode digits as ASCII, digit groups joined."""
    text = "".join(str(unicodedata.decimal(c)) if unicodedata.decimal(c, None) is not None
                   else c for c in text)
    text = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"(?<=\d)[\s._\-]+(?=\d)", "", text)


def leaks(texts: Iterable[tuple[str, str]]) -> list[str]:
    """Where a planted value shows in the (labelled) texts, with some context."""
    found = []
    for label, text in texts:
        folded = _folded(text)
        for name, value in PLANTED.items():
            found += [f"{label}: {name} in …{folded[max(at.start() - 90, 0):at.end()]!r}"
                      for at in re.finditer(re.escape(value), folded)]
    return found


def _bodies(requests: list[ScriptedRequest]) -> list[tuple[str, str]]:
    """Each raw body as text, its JSON escapes decoded (`\\uff14` is a full-width 4)."""
    return [(f"request {r.index}", json.dumps(json.loads(r.raw), ensure_ascii=False))
            for r in requests]


def _channels_reached(requests: list[ScriptedRequest]) -> None:
    """Each channel really carried its text to the model (else the test proves nothing)."""
    sent = "\n".join(text for _, text in _bodies(requests))
    assert "[masked]" in sent and "CSV (;)" in sent and "JSON Lines" in sent  # summary
    assert "[sbx] The last 3 calls to execute_python failed the same way" in sent
    assert "_statement.png: image/png" in sent  # the chart's description
    assert "[sbx] The sandbox was replaced" in sent  # the restore's note quotes the line:
    assert re.search(r"differs: line 2: 'sample \[card\] id [0-9a-f]+' recorded", sent)


def _write_data(tmp_path: Path) -> tuple[Path, Path]:
    csv_path, jsonl_path = tmp_path / "cards.csv", tmp_path / "cards.jsonl"
    csv_path.write_text(SEMICOLON_CSV)
    jsonl_path.write_text(JSON_LINES, encoding="utf-8")
    return csv_path, jsonl_path


@pytest.mark.docker
def test_the_cli_sends_the_provider_nothing_planted_in_any_channel(llm, tmp_path):
    csv_path, jsonl_path = _write_data(tmp_path)
    policy = tmp_path / "sbx.toml"
    policy.write_text(POLICY_TOML)
    transcript = tmp_path / "chat.jsonl"
    flags = ["--base-url", llm.base_url, "--api-key", FAKE_KEY, "--model", "scripted",
             "--image", TEST_IMAGE, "--audit-log", str(tmp_path / "audit.jsonl"),
             "--policy", str(policy), "--output", str(tmp_path / "out")]
    llm.script(_first_question())
    first = CliRunner().invoke(cli, ["chat", "--data", str(csv_path), "--data", str(jsonl_path),
                                     "--transcript", str(transcript), *flags],
                               input="Who is on file?\n/exit\n")
    assert first.exit_code == 0, first.output

    llm.script([assistant("Still one holder.")])  # a new process: the state is replayed
    second = CliRunner().invoke(cli, ["chat", "--resume", str(transcript), *flags],
                                input="And now?\n/exit\n")

    assert second.exit_code == 0, second.output
    _channels_reached(llm.requests)
    assert leaks(_bodies(llm.requests)) == []
    assert CARD in transcript.read_text()  # the person who asked keeps the real output
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    late = [r["data"] for r in audit if r["event"] == "redaction"
            and r["data"]["where"] == "model_request"]
    assert late and all(set(r["redactions"]) <= {"card", "secret"} for r in late)


@pytest.mark.docker
def test_the_service_sends_the_provider_nothing_planted_in_any_channel(store, serve, llm, engine):
    # no snapshot: the replay, whose note quotes the line that differs, is the channel here
    server = serve(store, policy={**POLICY, "service": {"idle_timeout": "1s"},
                                  "restore": {"snapshot_bytes": 0}})
    client = server.client(server.key("mallory"))
    ids = [upload(client, name, content.encode()).json()["id"]
           for name, content in (("cards.csv", SEMICOLON_CSV), ("cards.jsonl", JSON_LINES))]
    conversation = client.post("/v1/conversations", json={"datasets": ids}).json()["id"]
    llm.script(_first_question())
    first = client.post(f"/v1/conversations/{conversation}/questions",
                        json={"question": "Who is on file?"}).json()["run_id"]
    assert stream(client, first)[-1]["data"]["status"] == "completed"
    wait_for(lambda: client.get(f"/v1/conversations/{conversation}").json()["sandbox"]
             == "released", what="the idle release")
    wait_for(lambda: not managed_containers(engine, f"{RUN_ID_LABEL}={first}"),
             what="the idle sandbox to be removed")

    llm.script([assistant("Still one holder.")])
    second = client.post(f"/v1/conversations/{conversation}/questions",
                         json={"question": "And now?"}).json()["run_id"]

    assert stream(client, second)[-1]["data"]["status"] == "completed"
    print('LEAKS', *leaks(_bodies(llm.requests)), sep='\n  ')
    _channels_reached(llm.requests)
    assert leaks(_bodies(llm.requests)) == []


@pytest.mark.docker
def test_mcp_sends_its_client_nothing_planted_in_results_or_progress(tmp_path, engine):
    csv_path, jsonl_path = _write_data(tmp_path)
    policy = tmp_path / "sbx.toml"
    policy.write_text(POLICY_TOML)
    progress: list[str] = []
    texts: list[tuple[str, str]] = []
    slow_sample = SAMPLE + "time.sleep(3)\n"  # progress reports its last line meanwhile

    async def scenario() -> None:
        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append(message or "")

        async with mcp_client(tmp_path, "--idle-timeout", "1s", "--policy", str(policy),
                              "--data", str(csv_path), "--data", str(jsonl_path)) as client:
            calls = [("preview_data_file", {"name": "cards.jsonl"}),
                     *[("execute_python", {"code": FAIL})] * 3,
                     ("execute_python", {"code": CHART}),
                     ("execute_python", {"code": slow_sample})]
            for name, arguments in calls:
                result = await client.call_tool(name, arguments, progress_callback=on_progress)
                texts.extend((name, block.text) for block in result.content
                             if isinstance(block, TextContent))
            wait_until_gone(engine, session_ids(tmp_path)[0])  # the idle release
            after = await client.call_tool("execute_python", {"code": "print('back')"})
            texts.extend(("after the restore", block.text) for block in after.content
                         if isinstance(block, TextContent))

    anyio.run(scenario)

    print('LEAKS', *leaks([*texts, *(('progress', m) for m in progress)]), sep='\n  ')
    sent = "\n".join(text for _, text in texts)
    assert "[masked]" in sent and "KeyError" in sent and "saved" in sent
    assert re.search(r"differs: line 2: 'sample \[card\] id [0-9a-f]+' recorded", sent)  # restored
    assert any("last output: sample [card]" in message for message in progress), progress
    assert leaks([*texts, *(("progress", message) for message in progress)]) == []


def test_the_check_itself_sees_every_spelling():
    spelled = [CARD, ARABIC_INDIC, "４１１１ １１１１ １１１１ １１１１", "4111.1111.1111.1111",
               f"acct_{CARD}", KEY, HOLDER.upper()]
    assert len(leaks(("t", text) for text in spelled)) == len(spelled)

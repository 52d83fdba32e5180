"""Notes that outlive the conversation: saved by `remember`, seen by the next one on the data.

Real conversations through the core (the real SDK against the scripted model,
real Docker); the notes in a JSON file as the CLI keeps them. What the model
is sent is read from the scripted server's requests: the system prompt is
the first message of each conversation's first request.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.cli.main import cli
from sbx.agent.core.app import App
from sbx.agent.core.config import default_policy_path, load_config
from sbx.agent.core.conversation import ConversationSpec
from sbx.agent.core.notes import MAX_PROMPT_NOTES, DatasetNotes, FileNoteStore, NoteError
from sbx.agent.core.settings import Endpoint
from sbx.agent.provenance.data import data_digests
from sbx.agent.testing.scripted_model import assistant, tool_call
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

FACT = "amounts are in cents"
CARD = "4111 1111 1111 1111"


def _policy(tmp_path: Path, *, remember: bool = True, share: bool = False) -> Path:
    text = default_policy_path().read_text()
    table = re.search(r"\[tools\.remember\].*?(?=\n\[|\n# Custom tools)", text, re.DOTALL)
    assert table is not None
    changed = (table.group(0).replace("enabled = false", f"enabled = {str(remember).lower()}")
               .replace("share_with_team = false", f"share_with_team = {str(share).lower()}"))
    path = tmp_path / f"policy-{remember}-{share}.toml"
    path.write_text(text.replace(table.group(0), changed))
    return path


def _data(tmp_path: Path, content: str = "region,amount\nNorth,150\nSouth,250\n") -> Path:
    path = tmp_path / "data" / "sales.csv"
    path.parent.mkdir(exist_ok=True)
    path.write_text(content)
    return path


def _converse(llm, tmp_path, policy: Path, principal: str, team: str | None, data: Path,
              question: str = "What is the total?") -> str:
    """One conversation of one question; returns the system prompt it was sent."""
    before = len(llm.requests)
    spec = ConversationSpec(principal=principal, team=team, data=(data,),
                            output_root=tmp_path / "out", notes=FileNoteStore(tmp_path / "n.json"))
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    with App.open(load_config(policy), environ={}, audit_log=tmp_path / "audit.jsonl",
                  image=TEST_IMAGE) as app:
        with app.conversation(spec, endpoint=endpoint) as conversation:
            result = conversation.ask(question)
    assert result.status == "completed", result.message
    return str(llm.requests[before].body["messages"][0]["content"])


@pytest.mark.docker
def test_a_note_saved_after_the_user_states_a_fact_reaches_the_next_conversation_of_its_readers(
    llm, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    sharing, private = _policy(tmp_path, share=True), _policy(tmp_path, share=False)
    data = _data(tmp_path)
    llm.script([
        tool_call("remember", dataset="sales.csv", note=FACT),
        tool_call("execute_python", code="print(sum([150, 250]) / 100)"),
        assistant("The total is 4.0.\n\nMeasured:\n- 4.0\n\nAssumptions:\n- amounts in cents"),
    ])
    first = _converse(llm, tmp_path, sharing, "key:alice", "red", data,
                      f"{FACT.capitalize()}. What is the total?")
    assert FACT not in first and "remember" in str(llm.requests[0].body["tools"])
    assert "save it with `remember` in their words" in first
    assert llm.requests[1].last_tool_message.startswith("Saved note note-")

    seen = {}
    for principal, team, policy in (("key:alice", "red", private), ("key:bob", "red", sharing),
                                    ("key:bob", "red", private), ("key:carol", "blue", sharing)):
        llm.script([assistant("Noted.")])
        seen[(principal, policy.name)] = _converse(llm, tmp_path, policy, principal, team, data)
    alice = seen[("key:alice", private.name)]
    assert re.search(r"- \[note note-\w+ on sales\.csv, by key:alice via the model, "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d UTC\] amounts are in cents", alice)
    assert "context, not measurements" in alice
    assert FACT in seen[("key:bob", sharing.name)]  # alice's team, where the policy shares
    assert FACT not in seen[("key:bob", private.name)]  # the same team, a policy that does not
    assert FACT not in seen[("key:carol", sharing.name)]  # another team

    _data(tmp_path, "region,amount\nNorth,150\nSouth,999\n")  # the file changes
    llm.script([assistant("Noted.")])
    stale = _converse(llm, tmp_path, private, "key:alice", "red", data)
    assert f"[possibly stale: the file changed since] {FACT}" in stale


@pytest.mark.docker
def test_people_edit_and_delete_notes_with_sbx_notes_and_a_card_number_never_reaches_the_model(
    llm, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SBX_NOTES", str(tmp_path / "notes.json"))
    data = _data(tmp_path)
    added = CliRunner().invoke(cli, ["notes", "add", str(data), f"test card {CARD} is not a sale"])
    assert added.exit_code == 0, added.output
    note_id = added.stdout.strip()
    ask = ["ask", "What is the total?", "--data", str(data), "--base-url", llm.base_url,
           "--api-key", FAKE_KEY, "--model", "scripted", "--image", TEST_IMAGE,
           "--audit-log", str(tmp_path / "audit.jsonl"), "--output", str(tmp_path / "out")]

    llm.script([assistant("Noted.")])
    assert CliRunner().invoke(cli, ask).exit_code == 0
    prompt = str(llm.requests[-1].body["messages"][0]["content"])
    assert "test card [card] is not a sale" in prompt and CARD not in prompt
    assert CARD.replace(" ", "") not in json.dumps(llm.requests[-1].body)

    edited = CliRunner().invoke(cli, ["notes", "edit", note_id, "region 9 is a test region"])
    assert edited.exit_code == 0, edited.output
    listed = CliRunner().invoke(cli, ["notes", "list", "--json"])
    assert [n["text"] for n in json.loads(listed.stdout)] == ["region 9 is a test region"]
    llm.script([assistant("Noted.")])
    assert CliRunner().invoke(cli, ask).exit_code == 0
    assert "region 9 is a test region" in str(llm.requests[-1].body["messages"][0]["content"])

    deleted = CliRunner().invoke(cli, ["notes", "delete", note_id])
    assert deleted.exit_code == 0, deleted.output
    llm.script([assistant("Noted.")])
    assert CliRunner().invoke(cli, ask).exit_code == 0
    assert "region 9" not in str(llm.requests[-1].body["messages"][0]["content"])
    assert CliRunner().invoke(cli, ["notes", "delete", note_id]).exit_code == 2  # gone


def test_notes_are_bounded_in_size_and_number_for_people_and_the_model(tmp_path):
    rule = load_config(None).policy.tools.remember.model_copy(
        update={"max_chars": 20, "max_notes": 2})
    data = _data(tmp_path)
    book = DatasetNotes(FileNoteStore(tmp_path / "n.json"), principal="os:ana", team=None,
                    rule=rule, data=data_digests([data]))
    with pytest.raises(NoteError, match="at most 20 characters"):
        book.remember("sales.csv", "x" * 21)
    with pytest.raises(NoteError, match="no dataset 'other.csv'"):
        book.remember("other.csv", "fine")
    book.remember("/data/sales.csv", "one")
    book.add("sales.csv", "d", "two")
    with pytest.raises(NoteError, match="max_notes = 2"):
        book.remember("sales.csv", "three")
    other = DatasetNotes(book.store, principal="os:ben", team=None, rule=rule)
    assert other.visible() == []
    with pytest.raises(NoteError, match="no note"):
        other.delete(book.visible()[0].id)


@pytest.mark.docker
def test_a_number_only_a_note_gives_is_never_verified(llm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = _data(tmp_path)
    DatasetNotes(FileNoteStore(tmp_path / "n.json"), principal="key:alice", team=None,
             rule=load_config(None).policy.tools.remember, data=data_digests([data])
             ).add("sales.csv", data_digests([data])["sales.csv"], "the yearly target is 4321.5")
    answer = ("The total is 400.\n\nMeasured:\n- total 400\n\n"
              "Assumptions:\n- the yearly target is 4321.5 (a note)")
    llm.script([
        tool_call("execute_python", code="print('total', 150 + 250)"),
        assistant(answer),
        lambda request: assistant(answer),  # the validation turn names 4321.5; it insists
    ])
    prompt = _converse(llm, tmp_path, _policy(tmp_path, remember=False), "key:alice", None,
                       data)
    assert "the yearly target is 4321.5" in prompt
    assert "4321.5" in llm.requests[-1].messages[-1]["content"]
    end = [json.loads(line) for line in next((tmp_path / "sbx-runs").glob("*.jsonl"))
           .read_text().splitlines()][-1]
    assert (end["verified"], end["unsupported"]) == (False, ["4321.5"])
    assert [source["number"] for source in end["sources"]] == ["400"]


def test_a_damaged_notes_file_is_one_line_naming_it_not_a_traceback(tmp_path, monkeypatch):
    broken = tmp_path / "notes.json"
    broken.write_text("{not json")
    monkeypatch.setenv("SBX_NOTES", str(broken))
    listed = CliRunner().invoke(cli, ["notes", "list"])
    assert listed.exit_code == 2
    assert listed.stderr == f"sbx: {broken}: not a notes file (JSONDecodeError); move it away " \
                            "or name another with SBX_NOTES\n"


def test_a_prompt_shows_at_most_the_newest_notes_and_says_how_many_it_left_out(tmp_path):
    rule = load_config(None).policy.tools.remember.model_copy(update={"max_notes": 100})
    book = DatasetNotes(FileNoteStore(tmp_path / "n.json"), principal="os:ana", team=None,
                        rule=rule, data={"sales.csv": "d"})
    for number in range(MAX_PROMPT_NOTES + 3):
        book.add("sales.csv", "d", f"fact {number}")
    section = book.prompt_section()
    assert section.count("\n- [note ") == MAX_PROMPT_NOTES
    assert "] fact 2\n" not in section and f"] fact {MAX_PROMPT_NOTES + 2}\n" in section
    assert section.endswith("- (3 older notes not shown)\n")

"""Answers in two parts: what was measured, apart from interpretation and assumptions.

The parser is pure and tested on the ways a model writes headings. The loop
runs the real CLI, the real SDK against the scripted model and the real
sandbox: an interpretation written as a measurement is sent back by the
validation turn, and the parts reach `--json`, the transcript and every
export format.
"""

from __future__ import annotations

import json

import nbformat
import pytest
from click.testing import CliRunner

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.cli.main import cli
from sbx.agent.provenance.parts import check_parts, split_answer
from sbx.agent.provenance.trace import Provenance
from sbx.agent.testing.scripted_model import assistant, tool_call
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

PROGRAM = "print('South growth %', 12.4)\nprint('North growth %', 3.1)"
MIXED = (
    "South grew fastest.\n\n"
    "Measured:\n- South grew 12.4% and North 3.1%.\n"
    "- South grew because of the new store.\n\n"
    "Interpretation:\n- none\n"
)
SEPARATED = (
    "South grew fastest.\n\n"
    "## Measured\n- South grew 12.4% and North 3.1%.\n\n"
    "## Interpretation\n- The new store probably drove South's growth.\n\n"
    "## Assumptions\n- Revenue is in one currency.\n"
)
RELABEL = "[sbx] These sentences of your measured part are interpretation"


def test_headings_are_read_in_the_forms_models_write_them():
    for measured, interpretation, assumptions in (
        ("Measured:", "Interpretation:", "Assumptions:"),
        ("## Measured", "### Interpretation", "# Assumptions"),
        ("**Measured**", "**Interpretation:**", "__Assumptions__:"),
    ):
        parts = split_answer(f"Lead.\n{measured}\n- 4 rows\n{interpretation}\n- big\n"
                             f"{assumptions}\n- euros\n")
        assert (parts.measured, parts.interpretation, parts.assumptions) == (
            "Lead.\n- 4 rows", "- big", "- euros"), measured
        assert parts.marked
    together = split_answer("Measured: 4 rows\nInterpretation and assumptions:\n- big\n"
                            "- Assumption: euros\n")
    assert (together.measured, together.interpretation, together.assumptions) == (
        "4 rows", "- big", "- Assumption: euros")


def test_an_answer_without_headings_is_unmarked_and_prose_is_not_a_heading():
    plain = split_answer("Measured values show 4 rows.\nThe mean is 2.")
    assert not plain.marked and plain.unmarked == "Measured values show 4 rows.\nThe mean is 2."
    assert check_parts(plain.unmarked, Provenance()).mislabelled == ()
    assert not check_parts(plain.unmarked, Provenance()).needs_turn(require_parts=False)
    assert check_parts(plain.unmarked, Provenance()).needs_turn(require_parts=True)
    guessed = check_parts("The mean is 2, probably in euros.", Provenance())
    assert guessed.mislabelled == ("The mean is 2, probably in euros.",)
    assert guessed.needs_turn(require_parts=False)


def test_a_measured_sentence_that_explains_or_states_an_untraced_number_is_mislabelled():
    answer = ("Lead 12.4%.\nMeasured:\n- South grew 12.4%.\n- It reached 99.9 in June.\n"
              "- It grew because of the store.\nInterpretation:\n- likely the store, near 50.5\n")
    checked = check_parts(answer, Provenance(unsupported=("99.9", "50.5")))
    assert checked.mislabelled == ("It reached 99.9 in June.", "It grew because of the store.")
    assert checked.needs_turn(require_parts=False)


def _ask(llm, tmp_path, *extra):
    return CliRunner().invoke(cli, [
        "ask", "Which region grew fastest?", "--json", "--base-url", llm.base_url,
        "--api-key", FAKE_KEY, "--model", "scripted", "--image", TEST_IMAGE,
        "--audit-log", str(tmp_path / "audit.jsonl"), "--transcript", str(tmp_path / "run.jsonl"),
        "--output", str(tmp_path / "out"), *extra,
    ])


def _relabel_request(request) -> str:
    last = request.messages[-1]
    assert last["role"] == "user" and last["content"].startswith(RELABEL), last
    return str(last["content"])


@pytest.mark.docker
def test_an_interpretation_written_as_measured_is_sent_back_and_the_fix_reaches_every_face(
    llm, tmp_path
):
    def fixed(request):
        asked = _relabel_request(request)
        assert "South grew because of the new store." in asked and "12.4%" not in asked
        return assistant(SEPARATED)

    llm.script([tool_call("execute_python", code=PROGRAM), assistant(MIXED), fixed])

    outcome = _ask(llm, tmp_path)

    assert outcome.exit_code == 0, outcome.output
    document = json.loads(outcome.stdout)
    assert (document["status"], document["answer"], document["verified"]) == (
        "completed", SEPARATED, True)
    assert document["parts"] == {
        "measured": "South grew fastest.\n\n- South grew 12.4% and North 3.1%.",
        "interpretation": "- The new store probably drove South's growth.",
        "assumptions": "- Revenue is in one currency.", "unmarked": ""}
    assert document["mislabelled"] == []
    end = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()][-1]
    assert (end["type"], end["parts"], end["mislabelled"]) == (
        "run_end", document["parts"], [])

    exported = {}
    for fmt in ("md", "py", "ipynb"):
        target = tmp_path / f"export.{fmt}"
        done = CliRunner().invoke(cli, ["export", str(tmp_path / "run.jsonl"), "--format", fmt,
                                        "--output", str(target)])
        assert done.exit_code == 0, done.output
        exported[fmt] = target.read_text()
    assert "#### Measured\n\nSouth grew fastest." in exported["md"]
    assert "#### Interpretation\n\n- The new store probably drove" in exported["md"]
    assert "# Measured:\n# South grew fastest." in exported["py"]
    assert "# Assumptions:\n# - Revenue is in one currency." in exported["py"]
    cells = nbformat.reads(exported["ipynb"], as_version=4).cells
    assert "#### Interpretation" in cells[-1].source and "#### Assumptions" in cells[-1].source


@pytest.mark.docker
def test_a_model_that_insists_ends_with_the_mislabelled_sentence_named(llm, tmp_path):
    llm.script([
        tool_call("execute_python", code=PROGRAM), assistant(MIXED),
        lambda request: _relabel_request(request) and assistant(MIXED),
    ])

    outcome = CliRunner().invoke(cli, [
        "ask", "Which region grew fastest?", "--base-url", llm.base_url, "--api-key", FAKE_KEY,
        "--model", "scripted", "--image", TEST_IMAGE, "--audit-log", str(tmp_path / "a.jsonl"),
        "--transcript", str(tmp_path / "run.jsonl"), "--output", str(tmp_path / "out"),
    ])

    assert outcome.exit_code == 0, outcome.output
    assert outcome.stdout.startswith("Measured:\nSouth grew fastest.")
    assert ('INTERPRETATION PRESENTED AS MEASURED: "South grew because of the new store."'
            in outcome.stdout)
    end = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()][-1]
    assert end["mislabelled"] == ["South grew because of the new store."]
    assert "1 sentence(s) presented as measured are interpretation" in end["message"]

"""An exported conversation runs top to bottom after every kind of sandbox loss.

One conversation meets a timeout, a cancel by the user, an idle release (each
followed by a restore) and a reset the user asked for. Its notebook and its
script, run top to bottom in a fresh sandbox next to the data, print what the
conversation printed: a restore leaves no trace in them, the reset is one
visible cell that keeps DATA_DIR and OUTPUT_DIR, and the execution that timed
out is shown, not run again. The real core, the real SDK over HTTP to the
scripted server, the real sandbox.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner
from conversation_support import ask_code, cancel_while_running, open_conversation

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.cli.main import cli
from sbx.agent.replay.compare import Observed, compare
from sbx.agent.testing.scripted_model import tool_call
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

LOAD = "import pandas as pd\nsales = pd.read_csv('/data/sales.csv')\nprint('rows', len(sales))"
TOTAL = "total = sales.revenue.sum()\nprint('total', total)"
KILLER = "print('spinning', flush=True)\nwhile True:\n    pass"
SLEEPER = "print('sleeping', flush=True)\nimport time\ntime.sleep(120)"
AFTER_TIMEOUT = "print('double', total * 2)"
AFTER_CANCEL = "print('both', total + len(sales))"
AFTER_IDLE = "print('regions', sales.region.nunique())"
AFTER_RESET = ("import pandas as pd\nprint('again', len(pd.read_csv('/data/sales.csv')))\n"
               "print('sales' in globals())")


def _record(llm, tmp_path: Path) -> Path:
    data = tmp_path / "sales.csv"
    data.write_text("region,revenue\nWest,100\nEast,250\nWest,125.5\n")
    with open_conversation(llm, tmp_path, timeout=8.0, data=(data,)) as conv:
        ask_code(conv, llm, LOAD)
        ask_code(conv, llm, TOTAL, KILLER)  # a timeout: the next question restores
        ask_code(conv, llm, AFTER_TIMEOUT)
        cancel_while_running(conv, llm, SLEEPER, "sleeping")  # the next question restores
        ask_code(conv, llm, AFTER_CANCEL)
        assert conv.workspace.discard_if_idle(0.0)  # an idle release, as housekeeping does
        ask_code(conv, llm, AFTER_IDLE)
        conv.reset()  # asked for: nothing before it comes back
        ask_code(conv, llm, AFTER_RESET)
    return data


def _export(tmp_path: Path, fmt: str) -> str:
    target = tmp_path / f"export.{fmt}"
    outcome = CliRunner().invoke(cli, ["export", str(tmp_path / "conv.jsonl"), "-o",
                                       str(target)])
    assert outcome.exit_code == 0, outcome.output
    return target.read_text()


def _fresh_sandbox(data: Path, tmp_path: Path) -> Session:
    spec = SessionSpec(limits=Limits(timeout="60s"), image=TEST_IMAGE, data=(data,),
                       output_dir=tmp_path / "rerun-out")
    return Session.open(spec)


PRINTED = ["rows 3\n", "total 475.5\n", "double 951.0\n", "both 478.5\n", "regions 2\n",
           "again 3\nFalse\n"]


@pytest.mark.docker
def test_an_exported_conversation_reproduces_its_outputs_past_every_loss(llm, tmp_path, engine):
    data = _record(llm, tmp_path)

    notebook = nbformat.reads(_export(tmp_path, "ipynb"), as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    markdown = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    resets = [cell for cell in code if cell.source.startswith("for _name in")]
    assert len(resets) == 1  # the reset the user asked for; the three restores leave no trace
    assert "a reset the user asked for" in markdown
    assert "**Not run here**: execution 2 timed out" in markdown and "while True" in markdown
    assert "time.sleep(120)" not in "\n".join(cell.source for cell in code)  # cancelled: no cell
    with _fresh_sandbox(data, tmp_path) as sandbox:
        sandbox.run("import shutil; shutil.copy('/data/sales.csv', '.')")  # next to the data
        results = [(cell, sandbox.run(cell.source)) for cell in code]
    printed = []
    for cell, result in results:
        assert result.ok, (cell.source, result.stderr)
        recorded = "".join(o.text for o in cell.get("outputs", []) if o.get("name") == "stdout")
        verdict = compare(Observed(stdout=recorded), Observed(stdout=result.stdout))
        assert verdict.matches, (cell.source, verdict.detail)
        printed += [recorded] if recorded else []
    assert printed == PRINTED

    script = _export(tmp_path, "py")
    with _fresh_sandbox(data, tmp_path) as sandbox:
        sandbox.run("import shutil; shutil.copy('/data/sales.csv', '.')")
        result = sandbox.run(script)
    assert result.ok, result.stderr
    assert result.stdout == "".join(PRINTED)

    again = CliRunner().invoke(cli, ["replay", "--rerun", str(tmp_path / "conv.jsonl"),
                                     "--image", TEST_IMAGE, "--audit-log",
                                     str(tmp_path / "audit.jsonl")])
    assert again.exit_code == 0, again.output  # a re-run agrees: restored, not reset
    assert "DIFFERS" not in again.stdout and again.stdout.count(": skipped: ") == 1


ASK_ONLY = "[tools.ask_user]\nenabled = true\n[tools.calculate]\nenabled = true\n"
QUESTION = "Should the total count refunds?"


def test_the_notebook_of_a_run_that_needs_input_keeps_its_question(llm, tmp_path):
    (tmp_path / "sbx.toml").write_text(ASK_ONLY)
    llm.script([tool_call("ask_user", question=QUESTION)])
    asked = CliRunner().invoke(cli, [
        "ask", "What is the total?", "--policy", str(tmp_path / "sbx.toml"), "--base-url",
        llm.base_url, "--api-key", FAKE_KEY, "--model", "scripted", "--image", TEST_IMAGE,
        "--audit-log", str(tmp_path / "audit.jsonl"), "--transcript",
        str(tmp_path / "conv.jsonl")])
    assert asked.exit_code == 6, asked.output  # needs input

    notebook = nbformat.reads(_export(tmp_path, "ipynb"), as_version=4)
    script = _export(tmp_path, "py")

    last = notebook.cells[-1]
    assert last.cell_type == "markdown" and last.source.startswith("### The model asked")
    assert QUESTION in last.source
    assert f"# The model asked: {QUESTION}" in script

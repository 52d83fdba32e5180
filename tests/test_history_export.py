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

import threading
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.cli.main import cli
from sbx.agent.core.app import App
from sbx.agent.core.cancellation import Cancellation
from sbx.agent.core.config import load_config
from sbx.agent.core.conversation import Conversation, ConversationSpec
from sbx.agent.core.events import Event, OutputChunk
from sbx.agent.core.settings import Endpoint
from sbx.agent.replay.compare import Observed, compare
from sbx.agent.testing.scripted_model import assistant, tool_call
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


def _ask(conversation: Conversation, llm, *codes: str) -> None:
    llm.script([*(tool_call("execute_python", code=code) for code in codes), assistant("done")])
    result = conversation.ask("next step")
    assert result.status == "completed", result


def _cancelled_run(conversation: Conversation, llm) -> None:
    """A question whose code the user cancels while it runs (seen by its live output)."""
    llm.script([tool_call("execute_python", code=SLEEPER)])
    token = Cancellation()
    running = threading.Event()

    def watch(event: Event) -> None:
        if isinstance(event, OutputChunk) and "sleeping" in event.text:
            running.set()

    unsubscribe = conversation.subscribe(watch)
    waiter = threading.Thread(target=lambda: running.wait(60) and token.cancel())
    waiter.start()
    result = conversation.ask("a slow step", cancel=token)
    waiter.join()
    unsubscribe()
    assert result.status == "cancelled", result


def _record(llm, tmp_path: Path) -> Path:
    data = tmp_path / "sales.csv"
    data.write_text("region,revenue\nWest,100\nEast,250\nWest,125.5\n")
    config = load_config(None)
    config = replace(config, limits=config.limits.model_copy(update={"timeout": 3.0}))
    spec = ConversationSpec(principal="os:analyst", data=(data,), output_root=tmp_path / "out")
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    with App.open(config, environ={}, audit_log=tmp_path / "audit.jsonl",
                  image=TEST_IMAGE) as app, app.conversation(
                      spec, endpoint=endpoint, transcript=tmp_path / "conv.jsonl") as conv:
        _ask(conv, llm, LOAD)
        _ask(conv, llm, TOTAL, KILLER)  # a timeout: the next question restores
        _ask(conv, llm, AFTER_TIMEOUT)
        _cancelled_run(conv, llm)  # a cancel: the next question restores
        _ask(conv, llm, AFTER_CANCEL)
        assert conv.workspace.discard_if_idle(0.0)  # an idle release, as housekeeping does
        _ask(conv, llm, AFTER_IDLE)
        conv.reset()  # asked for: nothing before it comes back
        _ask(conv, llm, AFTER_RESET)
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

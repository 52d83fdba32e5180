"""Every face names what happened with the core's words: a timeout, a cancel, an idle release.

The core puts one vocabulary on its events (`tool_result.outcome`, `run_end.outcome`,
`state_restored.cause` and `reason`); the CLI's progress, the web page (fed the very
events the service streams) and the notes the model reads must say the same. The real
CLI and core, the real SDK over HTTP to the scripted server, the real sandbox and browser.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from click.testing import CliRunner
from conversation_support import ask_code, cancel_while_running, open_conversation
from playwright.sync_api import expect

import scripted_llm
import service_support
import web_support
from conftest import TEST_IMAGE
from sbx.agent.cli.display import Progress
from sbx.agent.cli.main import cli
from sbx.agent.core.outcomes import CALL_OUTCOMES, LOSS_CAUSES
from sbx.agent.testing.scripted_model import assistant, tool_call
from scripted_llm import FAKE_KEY

llm = service_support.llm
no_real_model = scripted_llm.no_real_model
serve = service_support.serve
browser = web_support.browser
render_page = web_support.render_page

TICK = "print('tick 0', flush=True)\nwhile True:\n    pass"
SLEEP = "print('sleeping', flush=True)\nimport time\ntime.sleep(120)"


@pytest.mark.docker
def test_a_run_killed_at_its_timeout_shows_timed_out_in_the_progress_line(llm, tmp_path, engine):
    llm.script([tool_call("execute_python", code=TICK), assistant("It ran too long.")])
    outcome = CliRunner().invoke(cli, [
        "ask", "Count.", "--timeout", "2s", "--base-url", llm.base_url, "--api-key", FAKE_KEY,
        "--model", "scripted", "--image", TEST_IMAGE, "--audit-log",
        str(tmp_path / "audit.jsonl"), "--transcript", str(tmp_path / "run.jsonl")])

    assert outcome.exit_code == 0, outcome.output
    lines = outcome.stderr.splitlines()
    assert any(line.startswith("<- timed out (") and "tick 0" in line for line in lines), lines
    assert not any(line.startswith("<- failed") for line in lines)
    events = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    [result] = [e for e in events if e["type"] == "tool_result"]
    assert result["outcome"] == "timed out"  # what the event stream carries
    assert "timed out" in llm.requests[1].last_tool_message  # what the model read


def _losses(llm, tmp_path) -> list[list[dict[str, Any]]]:
    """A conversation that meets a timeout, a cancel and an idle release: its runs' events."""
    seen: list[dict[str, Any]] = []
    with open_conversation(llm, tmp_path, timeout=2.0) as conv:
        conv.subscribe(lambda event: seen.append(event.model_dump(mode="json")))
        ask_code(conv, llm, "kept = 1\nprint(kept)")
        ask_code(conv, llm, TICK)
        ask_code(conv, llm, "print(kept + 1)")
        cancel_while_running(conv, llm, SLEEP, "sleeping")
        ask_code(conv, llm, "print(kept + 2)")
        assert conv.workspace.discard_if_idle(0.0)
        ask_code(conv, llm, "print(kept + 3)")
    return runs_of(seen)


def runs_of(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Events grouped per run (each run begins with its `run_start`)."""
    runs: list[list[dict[str, Any]]] = []
    for event in events:
        if event["type"] == "run_start":
            runs.append([])
        if runs:
            runs[-1].append(event)
    return runs


def show_runs(page: Any, runs: list[list[dict[str, Any]]]) -> None:
    """One `RunView` of the page per run (`data-run-id` `run-0`, ...), fed its events."""
    page.evaluate("""async (runs) => {
        const { RunView } = await import('/static/run.js');
        runs.forEach((events, index) => {
            const view = new RunView(`run-${index}`, 'q?');
            document.body.append(view.root);
            events.forEach((event) => view.handle(event));
        });
    }""", runs)


CAUSES = ["a timeout", "a cancel by the user", "an idle release"]


@pytest.mark.docker
def test_a_timeout_a_cancel_and_an_idle_release_read_the_same_everywhere(
    llm, tmp_path, render_page
):
    runs = _losses(llm, tmp_path)

    restored = [e for run in runs for e in run if e["type"] == "state_restored"]
    assert [e["cause"] for e in restored] == ["timeout", "cancel", "idle_release"]
    assert [e["reason"].split(":")[0] for e in restored] == CAUSES
    told = [r.messages[-1]["content"] for r in llm.requests
            if "The sandbox was replaced" in str(r.messages[-1]["content"])]
    assert [next(c for c in CAUSES if f"({c}" in text) for text in told] == CAUSES  # the model

    out = io.StringIO()
    progress = Progress(out)
    for run in runs:
        for event in run:
            progress(event)
    shown = out.getvalue()
    assert "<- timed out (" in shown and "== cancelled:" in shown  # the CLI
    restores = [line for line in shown.splitlines() if line.startswith("~  restored ")]
    assert [next(c for c in CAUSES if f"({c}" in line) for line in restores] == CAUSES

    page = render_page  # the page, fed the events the service streams
    show_runs(page, runs)
    expect(page.locator(".step.failed .step-state")).to_have_text(["timed out", "cancelled"])
    notes = page.locator("li.note.restored")
    expect(notes).to_have_count(3)
    for index, cause in enumerate(CAUSES):
        expect(notes.nth(index)).to_contain_text(f"({cause}")
    expect(page.get_by_text("cancelled in", exact=False)).to_have_count(1)


OOM = "print('filling', flush=True)\nx = bytearray(1 << 30)"


@pytest.mark.docker
def test_a_kill_at_the_memory_limit_is_named_as_such_everywhere(llm, tmp_path, render_page):
    llm.script([tool_call("execute_python", code="kept = 1\nprint(kept)"), assistant("Set."),
                tool_call("execute_python", code=OOM), assistant("It ran out of memory."),
                tool_call("execute_python", code="print(kept + 1)"), assistant("2.")])
    transcript = tmp_path / "chat.jsonl"
    outcome = CliRunner().invoke(cli, [
        "chat", "--memory", "64m", "--base-url", llm.base_url, "--api-key", FAKE_KEY,
        "--model", "scripted", "--image", TEST_IMAGE, "--audit-log",
        str(tmp_path / "audit.jsonl"), "--transcript", str(transcript)],
        input="Set kept.\nFill memory.\nkept + 1?\n/exit\n")

    assert outcome.exit_code == 0, outcome.output
    word, cause = "memory limit", LOSS_CAUSES["memory_limit"]  # the core's words for it
    assert word in CALL_OUTCOMES and "memory" in cause
    lines = outcome.stderr.splitlines()  # the CLI
    assert any(line.startswith(f"<- {word} (") and "filling" in line for line in lines), lines
    assert not any(line.startswith(("<- timed out", "<- cancelled")) for line in lines)
    assert any(line.startswith("~  restored ") and f"({cause}" in line for line in lines), lines
    events = [json.loads(line) for line in transcript.read_text().splitlines()]
    killed = [e for e in events if e["type"] == "tool_result" and e["outcome"] != "ok"]
    assert [e["outcome"] for e in killed] == [word]  # the event stream
    [restored] = [e for e in events if e["type"] == "state_restored"]
    assert restored["cause"] == "memory_limit" and restored["reason"].startswith(cause)
    assert f"({cause}" in llm.requests[-2].messages[-1]["content"]  # the model
    assert llm.requests[-1].last_tool_message.startswith("[stdout]\n2\n")

    page = render_page  # the page, fed the events the service streams
    show_runs(page, runs_of(events))
    expect(page.locator(".step.failed .step-state")).to_have_text([word])
    expect(page.locator("li.note.restored")).to_contain_text([f"({cause}"])

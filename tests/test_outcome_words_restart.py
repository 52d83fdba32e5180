"""A server restart is named as what it is in every face: not a loss, not a cancel.

`kill -9` of a real `sbx serve` while a question runs, then the same replica started
again on the same store: the run resource and its event stream end the run with the
core's word for it, the page shows that word, and the next question restores the
state and says a restart caused it (the event stream, the CLI's progress, the page).
The real server, the real SDK over HTTP to the scripted model, the real sandbox and
browser.
"""

from __future__ import annotations

import io
import signal
from typing import Any

import pytest
from playwright.sync_api import expect
from test_outcome_words import show_runs

import scripted_llm
import service_support
import web_support
from sbx.agent.cli.display import Progress
from sbx.agent.core.outcomes import LOSS_CAUSES, run_outcome
from sbx.agent.testing.scripted_model import assistant, tool_call
from service_support import sse_events, stream, wait_for

llm = service_support.llm
no_real_model = scripted_llm.no_real_model
serve = service_support.serve
store = service_support.store
pg_cluster = service_support.pg_cluster
browser = web_support.browser
render_page = web_support.render_page

SLEEP = "print('sleeping', flush=True)\nimport time\ntime.sleep(600)"


def _ask(client: Any, conversation: str) -> str:
    asked = client.post(f"/v1/conversations/{conversation}/questions",
                        json={"question": "Next step."})
    assert asked.status_code == 202, asked.text
    return str(asked.json()["run_id"])


def _until_running(client: Any, run: str) -> None:
    """Wait for the running code's live output on the run's event stream."""
    with client.stream("GET", f"/v1/runs/{run}/events") as response:
        for event in sse_events(response):
            if event["event"] == "output_chunk" and "sleeping" in event["data"]["text"]:
                return
    pytest.fail("the run ended before its code ran")


def _show_lost(page: Any, resource: dict[str, Any]) -> None:
    """A run view told only the run resource, as the page is when a stream ends unfinished."""
    page.evaluate("""async (resource) => {
        const { RunView } = await import('/static/run.js');
        const view = new RunView('run-lost', 'q?');
        document.body.append(view.root);
        view.lost(resource);
    }""", resource)


@pytest.mark.docker
def test_a_restart_reads_as_a_restart_in_the_run_the_stream_the_cli_and_the_page(
    store, serve, llm, render_page
):
    word, cause = run_outcome("interrupted"), LOSS_CAUSES["restart"]  # the core's words
    assert "restart" in word and "restart" in cause
    args = ("--replica-id", "restarting")
    server = serve(store, args=args)
    key = server.key("rita")
    client = server.client(key)
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    llm.script([tool_call("execute_python", code="kept = 41\nprint(kept)"), assistant("Set."),
                tool_call("execute_python", code=SLEEP)])
    first = _ask(client, conversation)
    assert stream(client, first)[-1]["data"]["status"] == "completed"
    cut = _ask(client, conversation)
    _until_running(client, cut)

    assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    again = serve(store, args=args)
    client = again.client(key)
    resource = client.get(f"/v1/runs/{cut}").json()  # the run resource
    assert (resource["status"], resource["outcome"]) == ("interrupted", word)
    assert "restarted" in resource["message"]
    ended = stream(client, cut)  # the event stream
    assert (ended[-1]["event"], ended[-1]["data"]["outcome"]) == ("run_end", word)

    llm.script([tool_call("execute_python", code="print(kept + 1)"), assistant("42.")])
    after = stream(client, _ask(client, conversation))
    [restored] = [e["data"] for e in after if e["event"] == "state_restored"]
    assert (restored["status"], restored["cause"]) == ("restored", "restart")
    assert restored["reason"].startswith(cause)
    assert after[-1]["data"]["status"] == "completed"
    assert llm.requests[-1].last_tool_message.startswith("[stdout]\n42\n")  # kept came back
    assert f"({cause}" in llm.requests[-2].messages[-1]["content"]  # the model

    runs = [[e["data"] for e in events] for events in (ended, after)]
    out = io.StringIO()
    progress = Progress(out)
    for event in (e for run in runs for e in run):
        progress(event)
    shown = out.getvalue().splitlines()  # the CLI
    assert any(line.startswith(f"== {word}") for line in shown), shown
    assert any(line.startswith("~  restored ") and f"({cause}" in line for line in shown), shown

    page = render_page  # the page
    show_runs(page, runs)
    _show_lost(page, resource)
    expect(page.locator("[data-run-id='run-0'] .run-status")).to_contain_text(word)
    expect(page.locator("li.note.restored")).to_contain_text([f"({cause}"])
    expect(page.locator("[data-run-id='run-lost']")).to_contain_text(word)
    wait_for(lambda: client.get(f"/v1/conversations/{conversation}").json()["sandbox"]
             == "held", what="the restored sandbox")

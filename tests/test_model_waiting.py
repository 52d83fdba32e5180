"""While the model thinks, nothing goes silent: `model_waiting` events and the CLI's waiting line.

`sbx ask` printed nothing between the question and the model's reply (12 s with a slow
test model, 40 s a turn with a local one): a user could not tell a slow model from a hang.
The core now sends `model_waiting` (which model, seconds so far, retries) while a request is
out; the CLI redraws one waiting line on a terminal, and the service's event stream relays
the events. The scripted model holds its reply until the test has seen the wait, so every
wait here is on an event, never on the clock.
"""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import threading
import time

import pytest

import service_support
from sbx.agent.cli.display import Progress
from sbx.agent.core.app import App
from sbx.agent.core.config import load_config
from sbx.agent.core.conversation import ConversationSpec
from sbx.agent.core.events import Event, ModelReplied, ModelWaiting
from sbx.agent.core.settings import Endpoint
from sbx.agent.testing.scripted_model import HttpFailure, assistant
from scripted_llm import FAKE_KEY, held_back
from service_support import SBX, sse_events

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

CALC_ONLY = "[tools.calculate]\nenabled = true\n"
WAIT_S = 60.0


def read_until(fd: int, wanted: bytes, shown: bytearray) -> None:
    """Read the terminal's output into `shown` until `wanted` is in it (or fail)."""
    deadline = time.monotonic() + WAIT_S
    while wanted not in shown:
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        assert ready, f"{wanted!r} never shown; so far {bytes(shown)!r}"
        shown += os.read(fd, 65536)


def read_to_end(fd: int, shown: bytearray) -> None:
    """Read what is left once the writer has exited (EIO: the other side is closed)."""
    while select.select([fd], [], [], 5)[0]:
        try:
            data = os.read(fd, 65536)
        except OSError:
            return
        if not data:
            return
        shown += data


def test_ask_on_a_terminal_shows_a_waiting_line_while_the_model_is_slow(llm, tmp_path):
    release = threading.Event()
    llm.script([held_back(release, assistant("Hello."))])
    policy = tmp_path / "sbx.toml"
    policy.write_text(CALC_ONLY)
    args = [*SBX, "ask", "Say hello.", "--base-url", llm.base_url,
            "--api-key", FAKE_KEY, "--model", "slow-model", "--policy", str(policy),
            "--audit-log", str(tmp_path / "audit.jsonl"),
            "--transcript", str(tmp_path / "run.jsonl"), "--output", str(tmp_path / "out")]
    leader, follower = pty.openpty()
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=follower, env=os.environ)
    os.close(follower)
    shown = bytearray()
    try:
        read_until(leader, b"waiting for the model slow-model: 2 s", shown)
        release.set()
        answer, _ = proc.communicate(timeout=WAIT_S)
        read_to_end(leader, shown)
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    assert proc.returncode == 0, bytes(shown)
    assert answer.decode().startswith("Hello.")
    text = shown.decode()
    assert "\r\x1b[2K" in text and "waiting for the model slow-model: 1 s" in text
    # Redrawn in place, then cleared before the reply's line: no waiting text after it.
    cleared_before = text.index("-- turn 1")
    assert text.rindex("waiting for the model") < text.rindex("\r\x1b[2K", 0, cleared_before)
    assert "waiting" not in (tmp_path / "run.jsonl").read_text()  # for watching only


def test_a_retried_request_says_so_at_once(llm, tmp_path):
    """A retry is a waiting event of its own, with the count and why, not a tick later."""
    release = threading.Event()
    llm.script([HttpFailure(status=503), held_back(release, assistant("Done."))])
    seen: list[Event] = []

    def watch(event: Event) -> None:
        seen.append(event)
        if isinstance(event, ModelWaiting) and event.retries:
            release.set()

    app = App.open(load_config(None), environ={}, audit_log=tmp_path / "audit.jsonl")
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    spec = ConversationSpec(principal="os:tester", output_root=tmp_path / "out")
    with app, app.conversation(spec, endpoint=endpoint, transcript=tmp_path / "c.jsonl") as conv:
        conv.subscribe(watch)
        result = conv.ask("Anything?")
    assert result.status == "completed"
    waits = [e for e in seen if isinstance(e, ModelWaiting)]
    assert waits[0].retries == 1 and waits[0].retry_reason == "HTTP 503"
    assert waits[0].model == "scripted" and waits[0].turn == 1
    reply = next(e for e in seen if isinstance(e, ModelReplied))
    assert seen.index(waits[-1]) < seen.index(reply)  # none after the reply


def test_off_a_terminal_the_wait_is_one_line_every_few_seconds_and_per_retry():
    out = io.StringIO()
    progress = Progress(out)
    for elapsed in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0):
        progress(ModelWaiting(run_id="r", turn=1, model="m", elapsed_s=elapsed))
    progress(ModelWaiting(run_id="r", turn=1, model="m", elapsed_s=11.2, retries=1,
                          retry_reason="HTTP 429"))
    assert out.getvalue().splitlines() == [
        "   .. waiting for the model m: 5 s",
        "   .. waiting for the model m: 10 s",
        "   .. waiting for the model m: 11 s (retry 1 after HTTP 429)",
    ]


@pytest.mark.docker
def test_the_event_stream_relays_the_wait(store, serve, llm):
    server = serve(store)
    alice = server.client(server.key("alice"))
    created = alice.post("/v1/conversations", json={})
    assert created.status_code == 201, created.text
    release = threading.Event()
    llm.script([held_back(release, assistant("Nothing to compute."))])
    asked = alice.post(f"/v1/conversations/{created.json()['id']}/questions",
                       json={"question": "Anything?"})
    assert asked.status_code == 202, asked.text
    events = []
    with alice.stream("GET", f"/v1/runs/{asked.json()['run_id']}/events") as response:
        for event in sse_events(response):
            events.append(event)
            if event["event"] == "model_waiting":
                release.set()  # seen while the model still thinks: now it may answer
    release.set()
    kinds = [event["event"] for event in events]
    assert "model_waiting" in kinds and kinds[-1] == "run_end", kinds
    assert kinds.index("model_waiting") < kinds.index("model_reply")
    waiting = events[kinds.index("model_waiting")]["data"]
    assert waiting["model"] == "scripted" and waiting["elapsed_s"] >= 1.0
    assert waiting["turn"] == 1 and waiting["retries"] == 0

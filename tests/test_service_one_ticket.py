"""One ticket per run: a question or a program over HTTP is admitted, started and finished on one.

The service admits a question when it is posted (a place, the quotas, the
run's row) and the core runs it later; both work on the one `RunTicket` the
core builds (`Conversation.admit`), so the token a client's cancel fires is
the one the run checks. The server process counts every `RunTicket` it
builds: a `sitecustomize` module on its `PYTHONPATH` wraps the class's
constructor (the server is a real process, so nothing in this one could count).
Real server, real store, real HTTP, scripted model, no sandbox.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import service_support
from sbx.agent.testing.scripted_model import assistant
from service_support import stream

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

COUNTER = '''
import os
from sbx.agent.core import run_recorder

_built = run_recorder.RunTicket.__init__


def _counted(self, *args, **kwargs):
    _built(self, *args, **kwargs)
    with open(os.environ["SBX_TEST_TICKETS"], "a") as out:
        out.write(self.run_id + "\\n")


run_recorder.RunTicket.__init__ = _counted
'''


def _counting(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The server's environment that counts its tickets, and the file they are counted in."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(COUNTER)
    tickets = tmp_path / "tickets.txt"
    tickets.touch()
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "SBX_TEST_TICKETS": str(tickets)}, tickets


def test_a_question_over_http_has_one_ticket(store, serve, llm, tmp_path: Path) -> None:
    env, tickets = _counting(tmp_path)
    llm.script([assistant("One."), assistant("Two.")])
    server = serve(store, policy={"tools.execute_python": {"enabled": False}}, env=env)
    client = server.client(server.key("tess"))
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    runs = []
    for question in ("first", "second"):
        posted = client.post(f"/v1/conversations/{conversation}/questions",
                             json={"question": question})
        assert posted.status_code == 202, posted.text
        runs.append(posted.json()["run_id"])
        assert stream(client, runs[-1])[-1]["event"] == "run_end"
    assert tickets.read_text().splitlines() == runs  # one ticket each, none other
    llm.assert_complete()


@pytest.mark.docker
def test_a_program_over_http_has_one_ticket(store, serve, tmp_path: Path) -> None:
    env, tickets = _counting(tmp_path)
    server = serve(store, env=env)
    client = server.client(server.key("tess"))
    done = client.post("/v1/execute", json={"code": "print(6 * 7)"})
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "ok"
    assert tickets.read_text().splitlines() == [done.json()["run_id"]]

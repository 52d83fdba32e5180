"""`sbx serve --workers 2`: two worker processes, one address, one conversation, no event lost.

Real `sbx serve` processes over a throwaway PostgreSQL, real Docker, the real
SDK against the scripted model. A test reaches one worker in particular
through its private Unix socket (the parent prints their directory), so a
question posted to one worker and a stream read from the other is forced,
not left to the kernel's choice.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import select

import service_support
from conftest import wait_until
from mcp_support import text_of
from sbx.agent import load_config
from sbx.agent.core.hosting.store.models import Conversation, EventRow, Replica, Run
from sbx.agent.core.hosting.workers import WorkerSlot
from sbx.agent.testing.scripted_model import assistant, tool_call
from sbx.sandbox.config import OWNER_LABEL
from sbx.sandbox.gc import owner_tag
from service_support import Server, managed_containers, sse_events, stream

serve = service_support.serve
llm = service_support.llm
postgres = service_support.postgres
pg_cluster = service_support.pg_cluster

COUNT = "n = globals().get('n', 0) + 1\nprint('n =', n)"
"""A cell whose output tells how many cells of the conversation ran before it, in order."""


def worker_sockets(server: Server) -> list[Path]:
    """The workers' private sockets, from the parent's listening line."""
    found = re.search(r"\((\d+) workers, .* worker sockets (\S+)\)", server.log)
    assert found, server.log
    return [Path(found[2]) / f"w{i}.sock" for i in range(int(found[1]))]


def worker_client(server: Server, index: int, key: str) -> httpx.Client:
    """A client of worker `index` alone."""
    client = httpx.Client(transport=httpx.HTTPTransport(uds=str(worker_sockets(server)[index])),
                          base_url="http://127.0.0.1", timeout=120,
                          headers={"Authorization": f"Bearer {key}"})
    server.clients.append(client)
    return client


def worker_pids(server: Server) -> dict[str, int]:
    with server.stored() as session:
        return {row.id: row.pid for row in session.scalars(select(Replica)).all()
                if row.state == "serving"}


@pytest.mark.docker
def test_two_workers_serve_one_conversations_questions_in_order_with_no_event_lost(
        postgres, serve, llm):
    server = serve(postgres, args=("--workers", "2"))
    key = server.key("wanda")
    workers = [worker_client(server, 0, key), worker_client(server, 1, key)]
    created = workers[0].post("/v1/conversations", json={})
    assert created.status_code == 201, created.text
    conversation = created.json()["id"]
    questions = 4
    script = []
    for number in range(1, questions + 1):
        script += [tool_call("execute_python", code=COUNT), assistant(f"Cell {number} ran.")]
    llm.script(script)
    runs = []
    for number in range(1, questions + 1):
        poster, reader = workers[number % 2], workers[(number + 1) % 2]  # w1 first: forwarded
        posted = poster.post(f"/v1/conversations/{conversation}/questions",
                             json={"question": f"question {number}"})
        assert posted.status_code == 202, posted.text
        run = posted.json()["run_id"]
        events = stream(reader, run)
        assert [e["id"] for e in events] == [str(n) for n in range(1, len(events) + 1)]
        assert events[-1]["event"] == "run_end", events[-1]
        assert events[-1]["data"]["answer"] == f"Cell {number} ran."
        results = [e["data"] for e in events if e["event"] == "tool_result"]
        assert f"n = {number}" in results[0]["content"]  # the same interpreter, in order
        runs.append((run, len(events)))
    with server.stored() as session:
        owners = {session.get(Run, run).replica_id for run, _ in runs}
        holder = session.get(Conversation, conversation).replica_id
        stored = {run: session.scalar(select(EventRow.seq).where(EventRow.run_id == run)
                                      .order_by(EventRow.seq.desc()).limit(1)) for run, _ in runs}
    assert owners == {holder} and holder.endswith("/w0")  # its worker ran every question
    assert stored == dict(runs)  # every stored event was streamed, from either worker
    listed = workers[1].get(f"/v1/conversations/{conversation}").json()
    assert listed["runs"] == [run for run, _ in runs]


@pytest.mark.docker
def test_a_client_asking_again_the_moment_it_sees_run_end_never_gets_409(postgres, serve, llm):
    # Every conversation's first run takes a sandbox: the host's caps must hold them all.
    server = serve(postgres, args=("--workers", "2"),
                   env={"SBX_MAX_CPUS": "64", "SBX_MAX_SANDBOXES": "64"})
    key = server.key("xavier", max_conversations=32, runs_per_hour=1000)
    conversations = 16
    llm.script([assistant("ok")] * (conversations * 2))
    statuses: list[int] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        clients = [worker_client(server, 0, key), worker_client(server, 1, key)]
        home = clients[index % 2]
        conversation = home.post("/v1/conversations", json={}).json()["id"]
        run = home.post(f"/v1/conversations/{conversation}/questions",
                        json={"question": "first"}).json()["run_id"]
        other = clients[(index + 1) % 2]
        seen = []
        with other.stream("GET", f"/v1/runs/{run}/events") as response:
            assert response.status_code == 200, response.read()
            for event in sse_events(response):
                seen.append(event)
                if event["event"] == "run_end":  # ask again at once, through the other worker
                    again = other.post(f"/v1/conversations/{conversation}/questions",
                                       json={"question": "second"})
                    with lock:
                        statuses.append(again.status_code)
                    assert again.status_code == 202, again.text
                    stream(other, again.json()["run_id"])
                    return
        pytest.fail(f"the stream of {run} ended without run_end: {seen}")

    with ThreadPoolExecutor(max_workers=conversations) as pool:
        list(pool.map(one, range(conversations)))
    assert statuses == [202] * conversations


@pytest.mark.docker
def test_sigterm_drains_every_worker_and_a_killed_worker_leaves_no_container(
        postgres, serve, llm, engine):
    server = serve(postgres, args=("--workers", "2"))
    key = server.key("yusuf")
    llm.script([tool_call("execute_python", code=COUNT), assistant("Cell 1 ran."),
                tool_call("execute_python", code=COUNT), assistant("Cell 1 ran.")])
    workers = [worker_client(server, 0, key), worker_client(server, 1, key)]
    held = []
    for client in workers:  # each worker holds a sandbox
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        run = client.post(f"/v1/conversations/{conversation}/questions",
                          json={"question": "count"}).json()["run_id"]
        assert stream(client, run)[-1]["data"]["answer"] == "Cell 1 ran."
        held.append(conversation)
    pids = worker_pids(server)
    assert len(pids) == 2, pids
    victim = next(pid for replica, pid in pids.items() if replica.endswith("/w1"))
    owner = f"{OWNER_LABEL}={owner_tag(victim)}"
    assert managed_containers(engine, owner)  # its conversation's sandbox
    os.kill(victim, signal.SIGKILL)
    assert wait_until(lambda: not managed_containers(engine, owner), 120), \
        "the killed worker's containers were left behind"

    def restarted() -> bool:
        now = worker_pids(server)
        return len(now) == 2 and victim not in now.values()

    assert wait_until(restarted, 120), "the killed worker was not started again"
    survivors = list(worker_pids(server).values())
    assert server.stop(signal.SIGTERM) == 0, server.log[-3000:]
    for pid in survivors:
        with contextlib.suppress(ChildProcessError):
            assert not _alive(pid), f"worker {pid} outlived the server"
    for pid in survivors:
        assert not managed_containers(engine, f"{OWNER_LABEL}={owner_tag(pid)}")
    assert "2 workers drained" in server.log


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"


@pytest.mark.docker
def test_mcp_calls_through_either_worker_share_one_sandbox(postgres, serve):
    server = serve(postgres, args=("--workers", "2"))
    key = server.key("zoe")
    sockets = worker_sockets(server)

    async def call(index: int, code: str) -> Any:
        transport = httpx.AsyncHTTPTransport(uds=str(sockets[index]))
        async with httpx.AsyncClient(transport=transport, timeout=120,
                                     headers={"Authorization": f"Bearer {key}"}) as http:
            async with Client(streamable_http_client(server.url + "/mcp", http_client=http)
                              ) as client:
                return await client.call_tool("execute_python", {"code": code})

    first = anyio.run(call, 1, "total = 40 + 2")  # worker 1 relays /mcp to worker 0
    second = anyio.run(call, 0, "print(total)")
    assert not first.is_error, text_of(first)
    assert text_of(second).startswith("[stdout]\n42"), text_of(second)


def test_the_warm_pool_is_split_among_the_workers_not_multiplied(tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text(service_support.policy_text({
        "pool": {"size": 1, "max_size": 3, "memory_budget": "3g"}}))
    config = load_config(policy)
    slots = [WorkerSlot(index=i, count=2, base_id="h:1", run_dir=tmp_path) for i in range(2)]
    parts = [slot.scaled(config) for slot in slots]
    assert [(p.pool.size, p.pool.max_size) for p in parts] == [(1, 2), (0, 1)]
    assert sum(p.pool.memory_budget for p in parts) <= config.pool.memory_budget
    assert [s.replica_id for s in slots] == ["h:1/w0", "h:1/w1"]
    assert slots[0].primary is None and slots[1].primary == tmp_path / "w0.sock"
    assert [p.service for p in parts] == [config.service] * 2  # a replica's queue each
    refused = subprocess.run([*service_support.SBX, "serve", "--policy", str(policy),
                              "--workers", "33", "--data-dir", str(tmp_path / "data")],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--workers" in refused.stderr, refused.stderr

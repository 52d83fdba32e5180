"""One key's flood of executions: the request threads stay free (health, other keys answer at
once), and the key gets no more executions in flight than its `max_in_flight` slots."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func, select

import service_support
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.models import Run
from service_support import wait_for

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

FLOOD = 40
SLOTS = 4  # the default [service.quotas] max_in_flight
SLOW = "import time\ntime.sleep(6)\nprint('done')"


def running_executions(database: str) -> int:
    db = Database.open(database)
    try:
        with db.read() as session:
            return int(session.scalar(select(func.count()).select_from(Run).where(
                Run.kind == "execute", Run.status == "running")) or 0)
    finally:
        db.close()


@pytest.mark.docker
def test_a_flood_of_executions_from_one_key_neither_starves_the_server_nor_passes_its_slots(
        store, serve):
    server = serve(store, env={"SBX_MAX_SANDBOXES": "2", "SBX_HOST_WAIT": "120"})
    flooder = server.client(server.key("flood"))
    other = server.client(server.key("other"))
    anonymous = server.client()
    order: list[tuple[str, int]] = []
    lock = threading.Lock()

    def execute(_: int) -> None:
        answer = flooder.post("/v1/execute", json={"code": SLOW})
        with lock:
            order.append(("execute", answer.status_code))
        if answer.status_code == 429:
            assert int(answer.headers["Retry-After"]) >= 1
            assert answer.json()["quota"] == "max_in_flight"

    with ThreadPoolExecutor(max_workers=FLOOD) as pool:
        futures = [pool.submit(execute, i) for i in range(FLOOD)]
        # every request was either admitted (its run row) or answered: the flood is in place
        wait_for(lambda: running_executions(server.database) + len(order) >= FLOOD,
                 timeout=120, what="the flood to be admitted or refused")
        for name, client, path in [("healthz", anonymous, "/healthz"),
                                   ("readyz", anonymous, "/readyz"),
                                   ("other key", other, "/v1/datasets")]:
            answer = client.get(path)
            with lock:
                order.append((name, answer.status_code))
        for future in futures:
            future.result()
    statuses = [status for kind, status in order if kind == "execute"]
    assert sorted(statuses) == [200] * SLOTS + [429] * (FLOOD - SLOTS), order
    first_done = next(i for i, (kind, status) in enumerate(order)
                      if kind == "execute" and status == 200)
    answered = {kind: (i, status) for i, (kind, status) in enumerate(order) if kind != "execute"}
    for name in ("healthz", "readyz", "other key"):  # answered while every execution still ran
        index, status = answered[name]
        assert status == 200 and index < first_done, order

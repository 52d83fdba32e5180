"""The burst's baseline in `sbx bench serve`: N hardened `docker run`s of the question at once.

What a service without warm sandboxes would do for a burst of new
conversations: one hardened container per question, created, run and removed
(`sbx.sandbox.bench.floor.docker_run`, the same hardening as the sandboxes), all
started together. The burst target compares the p99 of the service's first
answers at the highest level with the p99 of these.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sbx.agent.bench.serve_options import ServeBenchError
from sbx.agent.bench.serve_phases import CODE
from sbx.sandbox.bench.first_question import CSV_ROWS
from sbx.sandbox.bench.floor import docker_run
from sbx.sandbox.engine import Engine
from sbx.sandbox.files import data_mounts
from sbx.sandbox.limits import Limits

EXPECT = f"question 1 rows {CSV_ROWS}"
"""What the first question prints (`CODE`)."""


def docker_burst(count: int, limits: Limits, image: str, csv: Path) -> list[float]:
    """Seconds each of `count` simultaneous `docker run`s of the first question took.

    From start to removal, each with `csv` bind-mounted read-only at `/data`, as a
    sandbox sees it.
    """
    engine = Engine.connect()
    data = data_mounts([csv])

    def one(_: int) -> float:
        started = time.perf_counter()
        text, container_id = docker_run(engine, CODE, image=image, limits=limits, data=data)
        elapsed = time.perf_counter() - started
        engine.remove(container_id)  # the engine removed it already (--rm): untimed
        if EXPECT not in text:
            raise ServeBenchError(f"a docker run of the question printed {text[:200]!r}")
        return elapsed

    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="bench-docker") as workers:
        return list(workers.map(one, range(count)))

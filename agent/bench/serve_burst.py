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

from sbx.agent.bench.serve_options import ServeBenchError
from sbx.agent.bench.serve_phases import CODE
from sbx.sandbox.bench.floor import docker_run
from sbx.sandbox.engine import Engine
from sbx.sandbox.limits import Limits

EXPECT = "question 1"


def docker_burst(count: int, limits: Limits, image: str) -> list[float]:
    """Seconds each of `count` simultaneous `docker run`s of the question took, start to removal."""
    engine = Engine.connect()

    def one(_: int) -> float:
        started = time.perf_counter()
        text, container_id = docker_run(engine, CODE, image=image, limits=limits)
        elapsed = time.perf_counter() - started
        engine.remove(container_id)  # the engine removed it already (--rm): untimed
        if EXPECT not in text:
            raise ServeBenchError(f"a docker run of the question printed {text[:200]!r}")
        return elapsed

    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="bench-docker") as workers:
        return list(workers.map(one, range(count)))

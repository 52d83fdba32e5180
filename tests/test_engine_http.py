"""Many threads talking to the engine at once about many containers: one pool, no urllib3 crash.

docker-py's own adapter keeps a pool per request URL in an LRU of 25 and closes
evicted pools under requests still reading from them; 32 conversations starting
at once crashed `sbx bench serve` that way. Real engine, no container created:
each thread inspects ids that do not exist (the engine answers 404 for each).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import docker.errors
import pytest

from sbx.sandbox.engine_http import SharedPoolAdapter

pytestmark = pytest.mark.docker

THREADS = 48
"""More threads than docker-py's default pool (10), and more URLs than its LRU (25)."""


def test_requests_about_many_containers_share_one_pool_and_all_get_answers(engine) -> None:
    adapter = engine.api.get_adapter("http+docker://localhost/")
    assert isinstance(adapter, SharedPoolAdapter)

    def ask(index: int) -> str:
        answers = []
        for round_ in range(5):
            try:
                engine.api.inspect_container(f"sbx-no-such-{index}-{round_}")
            except docker.errors.NotFound:
                answers.append("404")
        return ",".join(answers)

    with ThreadPoolExecutor(max_workers=THREADS) as threads:
        answered = list(threads.map(ask, range(THREADS)))
    assert answered == [",".join(["404"] * 5)] * THREADS
    assert len(adapter.pools) == 1  # 240 distinct URLs, one pool

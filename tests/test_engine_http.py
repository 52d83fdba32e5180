"""Many threads talking to the engine at once about many containers: one pool, no urllib3 crash.

docker-py's own adapter keeps a pool per request URL in an LRU of 25 and closes
evicted pools under requests still reading from them; 32 conversations starting
at once crashed `sbx bench serve` that way. Real engine, no container created:
each thread inspects ids that do not exist (the engine answers 404 for each).
"""

from __future__ import annotations

import gc
from concurrent.futures import ThreadPoolExecutor

import docker
import docker.errors
import pytest

from sbx.sandbox.config import container_config
from sbx.sandbox.engine import Engine
from sbx.sandbox.engine_http import SharedPoolAdapter
from sbx.sandbox.errors import SandboxBroken
from sbx.sandbox.limits import Limits

THREADS = 48
"""More threads than docker-py's default pool (10), and more URLs than its LRU (25)."""


@pytest.mark.docker
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


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_engine_gone_mid_call_is_a_sandbox_error_not_a_traceback(tmp_path) -> None:
    """`requests` raises lost connections as OSError, outside the SDK's DockerException.

    (docker-py leaves the socket of a failed connect to the collector: collected here.)
    """
    client = docker.DockerClient(base_url=f"unix://{tmp_path / 'gone.sock'}", version="1.41")
    engine = Engine(client)
    for call, action in ((lambda: engine.create(container_config(
                              Limits(), run_id="gone", mode="session", image="sbx-python:latest",
                              owner="test")), "create the sandbox"),
                         (lambda: engine.start("0" * 64), "start the sandbox"),
                         (lambda: engine.attach("0" * 64), "attach to the sandbox")):
        with pytest.raises(SandboxBroken, match=f"^lost the engine while trying to {action}: "):
            call()
    client.close()
    gc.collect()

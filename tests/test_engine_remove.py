"""`Engine.remove` returns once the container is gone, even when the engine was removing it.

Every sandbox is created with auto-remove: when its process ends, the engine
starts removing it on its own, and a removal asked meanwhile is refused as
"already in progress" at once. `remove` then waits for that removal, so the
container is not listed after it returns and its lease is not given back early
(found by a test that listed a container the reaper had just "removed").
"""

from __future__ import annotations

import docker.errors
import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.config import MANAGED_LABEL, OWNER_LABEL
from sbx.sandbox.gc import owner_tag

pytestmark = pytest.mark.docker


def test_a_container_the_engine_is_already_removing_is_gone_when_remove_returns(engine) -> None:
    still_listed = 0
    for _ in range(5):
        host = engine.api.create_host_config(auto_remove=True, network_mode="none")
        container_id = engine.api.create_container(
            TEST_IMAGE, command=["sleep", "600"], host_config=host,
            labels={MANAGED_LABEL: "true", OWNER_LABEL: owner_tag()},
        )["Id"]
        engine.api.start(container_id)
        engine.api.kill(container_id)  # its process ends: the engine's auto-removal begins
        engine.remove(container_id)
        try:
            engine.api.inspect_container(container_id)
            still_listed += 1
        except docker.errors.NotFound:
            pass
    assert still_listed == 0

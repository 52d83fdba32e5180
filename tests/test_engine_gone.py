"""What the engine tells of a container it removed itself (every sandbox has auto-remove).

`Engine.remove` returns once the container is gone, even when the engine was removing it.

Every sandbox is created with auto-remove: when its process ends, the engine
starts removing it on its own, and a removal asked meanwhile is refused as
"already in progress" at once. `remove` then waits for that removal, so the
container is not listed after it returns and its lease is not given back early
(found by a test that listed a container the reaper had just "removed").

`Engine.saw_oom` answers for a container already removed, whose `State.OOMKilled`
went with it: a gVisor sandbox killed by its memory limit is often gone before
the session asks, on a loaded host (found when two test workers ran at once).
It answers after the engine's replay has forgotten the kill too (dockerd keeps
about its last 256 events; found when a CI run's other worker made more than
that between the kill and the question): the engine's `oom` events are read
as they happen.
"""

from __future__ import annotations

import time

import docker.errors
import pytest

from conftest import TEST_IMAGE, wait_until_removed
from sbx.sandbox.config import MANAGED_LABEL, OWNER_LABEL
from sbx.sandbox.gc import owner_tag

pytestmark = pytest.mark.docker
MEMORY_BOMB = "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))"
"""A program its container's memory limit kills."""


def started(engine, command: list[str], **host: object) -> str:
    """A labelled container with auto-remove, started."""
    config = engine.api.create_host_config(auto_remove=True, network_mode="none", **host)
    container_id: str = engine.api.create_container(
        TEST_IMAGE, command=command, host_config=config,
        labels={MANAGED_LABEL: "true", OWNER_LABEL: owner_tag()},
    )["Id"]
    engine.api.start(container_id)
    return container_id


def test_a_container_the_engine_is_already_removing_is_gone_when_remove_returns(engine) -> None:
    still_listed = 0
    for _ in range(5):
        container_id = started(engine, ["sleep", "600"])
        engine.api.kill(container_id)  # its process ends: the engine's auto-removal begins
        engine.remove(container_id)
        try:
            engine.api.inspect_container(container_id)
            still_listed += 1
        except docker.errors.NotFound:
            pass
    assert still_listed == 0


def test_an_oom_of_a_container_already_removed_is_still_known(engine) -> None:
    engine.watch_ooms()  # as the engine's first container does
    killed, since = killed_with_a_reported_oom(engine)  # auto-remove: its State is gone
    quiet = started(engine, ["true"], mem_limit="64m", memswap_limit="64m")
    wait_until_removed(engine, quiet, seconds=60)
    assert engine.saw_oom(killed, since=since)
    assert not engine.saw_oom(quiet, since=since)


def killed_with_a_reported_oom(engine, attempts: int = 3) -> tuple[str, float]:
    """A container its memory limit killed, removed, whose `oom` the engine reported.

    What is to be remembered is a kill the engine reported, so its own log is checked
    first, and another container killed if the kill is missing there: on a loaded host
    the engine can miss one (containerd reads it from the cgroup after the fact; CI runs
    failed these tests that way). Sessions do not depend on it: `test_oom_notice.py`.
    """
    for _ in range(attempts):
        since = time.time()
        killed = started(engine, ["python3", "-c", MEMORY_BOMB], mem_limit="64m",
                         memswap_limit="64m")
        wait_until_removed(engine, killed, seconds=60)
        if engine.logged_oom(killed, since=since):
            return killed, since
    raise AssertionError(f"the engine reported none of {attempts} memory kills")


def test_an_oom_is_still_known_after_more_events_than_the_engine_replays(engine) -> None:
    engine.watch_ooms()  # as the engine's first container does
    killed, since = killed_with_a_reported_oom(engine)
    config = engine.api.create_host_config(network_mode="none")
    for _ in range(200):  # 400 events (create, destroy): the engine's replay has lost the kill
        engine.api.remove_container(engine.api.create_container(
            TEST_IMAGE, command=["true"], host_config=config,
            labels={MANAGED_LABEL: "true", OWNER_LABEL: owner_tag()})["Id"])
    assert not engine.logged_oom(killed, since=since)  # the replay forgot it
    assert engine.saw_oom(killed, since=since)

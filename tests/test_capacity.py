"""The host-wide cap: leases fit or wait in one FIFO queue, time out (HostBusy), never overfill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sbx.sandbox.capacity import HostCapacity, Lease, LedgerDamaged
from sbx.sandbox.errors import HostBusy, SandboxError
from sbx.sandbox.host_caps import HostCaps, Need

GIB = 1 << 30
SMALL = Need(memory=GIB // 2, cpus=1.0)


def make(
    tmp_path: Path,
    *,
    sandboxes: int = 4,
    memory: int = 4 * GIB,
    cpus: float = 8.0,
    wait_s: float = 5.0,
) -> HostCapacity:
    caps = HostCaps(sandboxes=sandboxes, memory=memory, cpus=cpus)
    return HostCapacity(directory=tmp_path / "ledger", caps=caps, wait_s=wait_s)


def test_leases_fit_until_the_count_cap_then_time_out_naming_the_knob(tmp_path) -> None:
    capacity = make(tmp_path, sandboxes=2)
    first, second = capacity.acquire(SMALL), capacity.acquire(SMALL)
    # the waited-out message (not "can never fit"), naming the wait and the cap that binds
    busy = (
        r"^host busy: no sandbox slot freed within 0\.3 s \(SBX_HOST_WAIT\): "
        r"2 of 2 sandboxes running \(SBX_MAX_SANDBOXES\)$"
    )
    with pytest.raises(HostBusy, match=busy):
        capacity.acquire(SMALL, timeout=0.3)
    assert capacity.usage().sandboxes == 2 and capacity.usage().waiting == 0  # left the queue
    first.release()
    first.release()  # idempotent
    third = capacity.acquire(SMALL, timeout=0.3)
    assert capacity.usage().sandboxes == 2
    for lease in (second, third):
        lease.release()
    assert capacity.usage().sandboxes == 0


def test_memory_and_cpu_sums_are_capped_too(tmp_path) -> None:
    capacity = make(tmp_path, memory=GIB, cpus=1.5)
    held = capacity.acquire(Need(memory=GIB // 2, cpus=0.5))
    with pytest.raises(HostBusy, match="SBX_MAX_MEMORY"):
        capacity.acquire(Need(memory=GIB, cpus=0.5), timeout=0.1)
    with pytest.raises(HostBusy, match="SBX_MAX_CPUS"):
        capacity.acquire(Need(memory=GIB // 4, cpus=1.5), timeout=0.1)
    usage = capacity.usage()
    assert usage.memory == GIB // 2 and usage.cpus == 0.5
    held.release()


def test_a_need_above_the_cap_itself_is_refused_at_once(tmp_path) -> None:
    capacity = make(tmp_path, memory=GIB)
    with pytest.raises(HostBusy, match="can never fit.*SBX_MAX_MEMORY"):  # not "still busy"
        capacity.acquire(Need(memory=2 * GIB, cpus=1.0), timeout=30)
    assert capacity.usage().waiting == 0  # it never joined the queue


def test_waiters_are_served_first_in_first_out(tmp_path) -> None:
    capacity = make(tmp_path, sandboxes=1)
    held = capacity.acquire(SMALL)
    order: list[str] = []

    def wait(name: str) -> None:
        lease = capacity.acquire(SMALL, timeout=10)
        order.append(name)
        time.sleep(0.05)
        lease.release()

    threads = []
    for name in ("a", "b", "c"):
        thread = threading.Thread(target=wait, args=(name,))
        thread.start()
        threads.append(thread)
        _wait_for_queue(capacity, len(threads))
    held.release()
    for thread in threads:
        thread.join(10)
    assert order == ["a", "b", "c"]
    assert capacity.usage().sandboxes == 0 and capacity.usage().waiting == 0


def test_a_big_request_at_the_head_is_not_overtaken_by_small_ones(tmp_path) -> None:
    capacity = make(tmp_path, memory=2 * GIB)
    held = capacity.acquire(Need(memory=GIB, cpus=1.0))
    big: list[object] = []
    waiter = threading.Thread(
        target=lambda: big.append(capacity.acquire(Need(memory=2 * GIB, cpus=1.0), timeout=10))
    )
    waiter.start()
    _wait_for(lambda: capacity.usage().waiting == 1)
    with pytest.raises(HostBusy, match="queued ahead"):
        capacity.acquire(Need(memory=GIB // 2, cpus=1.0), timeout=0.2)  # would fit, must queue
    assert capacity.try_acquire(Need(memory=GIB // 2, cpus=1.0)) is None
    held.release()
    waiter.join(10)
    assert len(big) == 1 and capacity.usage().memory == 2 * GIB


def test_try_acquire_takes_only_what_fits_now(tmp_path) -> None:
    capacity = make(tmp_path, sandboxes=1)
    lease = capacity.try_acquire(SMALL)
    assert lease is not None
    assert capacity.try_acquire(SMALL) is None
    lease.release()
    assert capacity.usage().sandboxes == 0


HOLDER = """
import sys, time
from pathlib import Path
from sbx.sandbox.capacity import HostCapacity
from sbx.sandbox.host_caps import HostCaps, Need
caps = HostCaps(sandboxes=1, memory=1 << 30, cpus=1.0)
capacity = HostCapacity(directory=Path(sys.argv[1]), caps=caps)
capacity.acquire(Need(memory=1 << 20, cpus=1.0))
print("held", flush=True)
time.sleep(300)
"""


def test_the_ledger_is_shared_between_processes_and_a_dead_holder_is_dropped(tmp_path) -> None:
    capacity = make(tmp_path, sandboxes=1, memory=GIB, cpus=1.0)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "ledger")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(HostBusy, match="1 of 1 sandboxes"):
            capacity.acquire(Need(memory=1 << 20, cpus=1.0), timeout=0.2)
        leases: list[Lease] = []
        tiny = Need(memory=1 << 20, cpus=1.0)
        waiter = threading.Thread(  # 60 s only stops a hung test
            target=lambda: leases.append(capacity.acquire(tiny, timeout=60))
        )
        waiter.start()
        _wait_for_queue(capacity, 1)  # queued behind the live holder
        os.kill(holder.pid, signal.SIGKILL)
        waiter.join(60)
        (lease,) = leases
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    assert capacity.usage().sandboxes == 1
    lease.release()


def test_a_damaged_ledger_stops_rather_than_guesses(tmp_path) -> None:
    capacity = make(tmp_path)
    capacity.usage()
    capacity.path.write_text("{not json")
    with pytest.raises(LedgerDamaged, match="remove it while no sbx process runs"):
        capacity.acquire(SMALL)


def test_caps_come_from_the_environment_with_host_sized_defaults() -> None:
    caps = HostCaps.from_env(
        {"SBX_MAX_SANDBOXES": "3", "SBX_MAX_MEMORY": "2g", "SBX_MAX_CPUS": "1.5"}
    )
    assert (caps.sandboxes, caps.memory, caps.cpus) == (3, 2 * GIB, 1.5)
    defaults = HostCaps.from_env({})
    assert defaults.sandboxes == 32 and defaults.cpus == 4 * (os.cpu_count() or 1)
    assert 0 < defaults.memory < os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    with pytest.raises(SandboxError, match="bad host cap"):
        HostCaps.from_env({"SBX_MAX_MEMORY": "lots"})
    capacity = HostCapacity.from_env({"SBX_CAPACITY_DIR": "/tmp/x", "SBX_HOST_WAIT": "2m"})
    assert capacity.wait_s == 120 and capacity.directory == Path("/tmp/x")


def _wait_for_queue(capacity: HostCapacity, count: int) -> None:
    _wait_for(lambda: capacity.usage().waiting == count)


def _wait_for(condition, seconds: float = 60.0) -> None:
    """Poll the shared ledger (a file: no event to wait on); the deadline only stops a hung test."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_waiting_follows_the_queue_of_another_ledger_user_without_parsing_each_time(
    tmp_path, monkeypatch
) -> None:
    """`waiting` (asked on every pool pass) sees a caller another process queued, and its
    leaving, though it parses the ledger only when the file changed."""
    here, there = make(tmp_path, sandboxes=1), make(tmp_path, sandboxes=1)
    held = there.acquire(SMALL)
    assert here.waiting() == 0
    loads: list[int] = []
    parse = HostCapacity._load
    monkeypatch.setattr(HostCapacity, "_load", lambda self: loads.append(1) or parse(self))
    assert [here.waiting() for _ in range(50)] == [0] * 50
    assert len(loads) <= 1  # at most the one-second recheck, never once per call
    queued: list[object] = []
    waiter = threading.Thread(target=lambda: queued.append(there.acquire(SMALL, timeout=10)))
    waiter.start()
    _wait_for(lambda: here.waiting() == 1)
    held.release()
    waiter.join(10)
    assert len(queued) == 1 and here.waiting() == 0
    queued[0].release()  # type: ignore[attr-defined]

"""Demand sizing against real Docker: a burst after a rise is served warm, the pool shrinks back.

Hits and misses are the pool's own counters (never timings); "no leak" is the
engine's list of this process's containers once the pool has shrunk.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_pool import GIB, KEY, capacity, ours, wait_until

from conftest import TEST_IMAGE
from sbx.sandbox.pool import Pool, PoolConfig, PoolKey
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker


def burst(pool: Pool, count: int, tmp_path: Path) -> list[Session]:
    """`count` sessions taken at once (each on its own thread), still open."""
    spec = SessionSpec(limits=KEY.limits, image=TEST_IMAGE, output_dir=tmp_path)
    with ThreadPoolExecutor(max_workers=count) as workers:
        return list(workers.map(lambda _: pool.session(spec), range(count)))


def test_arrivals_raise_the_target_and_the_next_burst_is_served_warm(engine, tmp_path) -> None:
    config = PoolConfig(size=0, max_size=2, window_s=600.0, memory_budget=8 * GIB)
    with Pool.start(engine=engine, capacity=capacity(tmp_path), config=config,
                    warm=[KEY]) as pool:
        assert pool.settle(KEY) and pool.snapshot().target == 0  # no demand yet: nothing warm
        assert pool.snapshot().built == 0
        for session in burst(pool, 2, tmp_path):  # the rise: two arrivals, nothing warm
            session.close()
        rise = pool.snapshot()  # the second may have waited for the build the first started
        assert rise.misses >= 1 and rise.hits + rise.misses == 2
        assert pool.wait_warm(KEY, count=2, timeout=120)  # the rate now asks for two
        assert pool.snapshot().target == 2
        for session in burst(pool, 2, tmp_path):
            session.close()
        stats = pool.snapshot()
        assert (stats.hits - rise.hits, stats.misses - rise.misses) == (2, 0)


def test_announced_demand_warms_ahead_and_the_pool_shrinks_when_it_falls(
    engine, tmp_path
) -> None:
    config = PoolConfig(size=0, max_size=3, window_s=2.0, memory_budget=8 * GIB)
    with Pool.start(engine=engine, capacity=capacity(tmp_path), config=config,
                    warm=[KEY]) as pool:
        pool.expect(KEY, 3)  # three conversations open without a sandbox
        assert pool.wait_warm(KEY, count=3, timeout=120)
        taken = burst(pool, 3, tmp_path)
        stats = pool.snapshot()
        assert (stats.hits, stats.misses) == (3, 0)
        pool.expect(KEY, 0)
        for session in taken:
            session.close()
        # the arrivals decay (2 s window): the target falls to 0 and idle containers go
        assert pool.wait_shrunk(KEY, 0, timeout=120)
        stats = pool.snapshot()
        assert stats.target == 0 and stats.trimmed + 3 == stats.built - stats.expired
        # shrunk while still open: nothing left behind (the trimmed ones' removal is queued
        # just after they leave the slot, so wait for the engine's list, not the reaper's)
        assert wait_until(lambda: ours(engine) == [], 60)
        assert pool.reaper.wait_idle(timeout=60)


def test_the_memory_budget_bounds_the_warm_containers(engine, tmp_path) -> None:
    half = KEY.limits.memory * 3 // 2  # room for one container of KEY, not two
    config = PoolConfig(size=0, max_size=4, window_s=600.0, memory_budget=half)
    with Pool.start(engine=engine, capacity=capacity(tmp_path), config=config,
                    warm=[KEY]) as pool:
        pool.expect(KEY, 4)
        assert pool.wait_warm(KEY, count=1, timeout=120) and pool.settle(KEY)
        stats = pool.snapshot()
        assert (stats.target, stats.idle, stats.built) == (1, 1, 1)


def test_a_caller_never_waits_for_a_build_an_earlier_caller_claimed(engine, tmp_path) -> None:
    """One build in flight, two callers: the first waits for it, the second gets none at once."""
    pool = Pool(engine=engine, capacity=capacity(tmp_path), config=PoolConfig(size=0))
    key = PoolKey(image=TEST_IMAGE, limits=KEY.limits)
    with pool._wake:
        pool._slot(key).building = 1  # a build that never finishes: only waits can show
    first: list[object] = []
    waiter = threading.Thread(target=lambda: first.append(pool._take(key)))
    waiter.start()
    assert wait_until(lambda: pool._slots[key].claims == 1, 10)
    assert pool._take(key) is None  # it did not wait (the first caller's wait still runs)
    assert waiter.is_alive() and pool._slots[key].claims == 1
    with pool._wake:
        pool._slots[key].building = 0  # the build failed: the waiter stops waiting
        pool._wake.notify_all()
    waiter.join(30)
    assert first == [None] and pool._slots[key].claims == 0
    pool.close()

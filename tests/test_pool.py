"""The warm pool: single use, refilled, capped, drained, and no orphans or leaks left behind."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import TEST_IMAGE, wait_until
from sbx.sandbox.capacity import HostCapacity
from sbx.sandbox.config import container_config
from sbx.sandbox.errors import HostBusy
from sbx.sandbox.gc import owner_tag
from sbx.sandbox.host_caps import HostCaps
from sbx.sandbox.limits import Limits
from sbx.sandbox.pool import Pool, PoolConfig, PoolKey
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker

KEY = PoolKey(image=TEST_IMAGE, limits=Limits(timeout="10s"))
GIB = 1 << 30


def capacity(tmp_path: Path, sandboxes: int = 8, wait_s: float = 30.0) -> HostCapacity:
    """A private ledger: other sbx processes on this host must not disturb these tests."""
    caps = HostCaps(sandboxes=sandboxes, memory=16 * GIB, cpus=32.0)
    return HostCapacity(directory=tmp_path / "ledger", caps=caps, wait_s=wait_s)


def ours(engine) -> list[dict]:
    """Managed containers created by this test process."""
    return [c for c in engine.managed_containers() if c["Labels"].get("sbx.owner") == owner_tag()]


def test_a_taken_container_is_ready_serves_one_run_and_is_never_reused(engine, tmp_path) -> None:
    with Pool.start(
        engine=engine, capacity=capacity(tmp_path), config=PoolConfig(size=2), warm=[KEY]
    ) as pool:
        assert pool.wait_warm(KEY)
        first = pool.session(SessionSpec(limits=KEY.limits, image=TEST_IMAGE, output_dir=tmp_path))
        assert pool.snapshot().hits == 1 and pool.snapshot().misses == 0
        first_id = first.container_id
        with first:
            assert first.run("x = 1\nopen('/tmp/left', 'w').write('secret')").ok
            assert first.run("print(x)").stdout == "1\n"  # a session keeps state
        assert first.container_id is None
        seen = {first_id}
        for _ in range(3):
            result = pool.run_fresh(
                "import os; print('x' in globals(), os.path.exists('/tmp/left'))",
                SessionSpec(limits=KEY.limits, image=TEST_IMAGE, output_dir=tmp_path),
            )
            assert result.ok and result.stdout == "False False\n"
            assert not result.state_reset
        assert pool.reaper.wait_idle(timeout=60)  # the removal queued at close has finished
        assert first_id not in {c["Id"] for c in ours(engine)}
        stats = pool.snapshot()
        assert stats.hits + stats.misses == 4 and stats.built >= 2
        for _ in range(2):
            with pool.session(
                SessionSpec(limits=KEY.limits, image=TEST_IMAGE, output_dir=tmp_path)
            ) as again:
                assert again.container_id not in seen
                seen.add(again.container_id)


def test_the_pool_refills_after_takes(engine, tmp_path) -> None:
    with Pool.start(
        engine=engine, capacity=capacity(tmp_path), config=PoolConfig(size=2), warm=[KEY]
    ) as pool:
        assert pool.wait_warm(KEY)
        taken = [
            pool.session(SessionSpec(limits=KEY.limits, image=TEST_IMAGE, output_dir=tmp_path))
            for _ in range(2)
        ]
        assert pool.snapshot().hits == 2
        assert pool.wait_warm(KEY), "the pool did not refill"
        assert pool.snapshot().built >= 4
        for session in taken:
            session.close()


def test_a_refill_waits_while_a_warm_container_is_still_idle(engine, tmp_path) -> None:
    """A lone take leaves one idle, so its refill waits (off the taker's first questions);
    the take that empties the pool, two arrivals in the delay's span so a third is likely,
    starts the refill at once, long before the delay ends."""
    config = PoolConfig(size=2, refill_delay_s=60.0)
    spec = SessionSpec(limits=KEY.limits, image=TEST_IMAGE, output_dir=tmp_path)
    with Pool.start(engine=engine, capacity=capacity(tmp_path), config=config, warm=[KEY]) as pool:
        assert pool.wait_warm(KEY)
        built = pool.snapshot().built
        with pool.session(spec):
            assert not pool.wait_warm(KEY, count=2, timeout=2.0)  # held: nothing built
            assert pool.snapshot().built == built and pool.snapshot().building == 0
            with pool.session(spec):
                assert pool.wait_warm(KEY, count=2, timeout=40.0), "no refill at once"
        assert pool.snapshot().hits == 2


def test_the_pool_never_exceeds_the_host_cap_and_callers_time_out(engine, tmp_path) -> None:
    ledger = capacity(tmp_path, sandboxes=2, wait_s=0.5)
    with Pool.start(engine=engine, capacity=ledger, config=PoolConfig(size=4), warm=[KEY]) as pool:
        assert pool.wait_warm(KEY, count=2)
        assert pool.settle(KEY)  # builds done: the pool is as full as the cap lets it be
        assert pool.idle(KEY) == 2 and ledger.usage().sandboxes == 2
        one = pool.session(SessionSpec(limits=KEY.limits, image=TEST_IMAGE, output_dir=tmp_path))
        two = pool.session(SessionSpec(limits=KEY.limits, image=TEST_IMAGE, output_dir=tmp_path))
        assert ledger.usage().sandboxes <= 2
        with pytest.raises(HostBusy, match="SBX_MAX_SANDBOXES"):
            pool.session(SessionSpec(limits=KEY.limits, image=TEST_IMAGE, output_dir=tmp_path))
        one.close()
        ledger.wait_s = 30  # the freed slot may go to a refill first; then it is shed for us
        with pool.session(
            SessionSpec(limits=KEY.limits, image=TEST_IMAGE, output_dir=tmp_path)
        ) as three:
            assert three.run("print(3)").stdout == "3\n"
        two.close()
    assert ledger.usage().sandboxes == 0


def test_idle_warm_containers_make_way_for_a_queued_caller(engine, tmp_path) -> None:
    ledger = capacity(tmp_path, sandboxes=2, wait_s=30)
    with Pool.start(engine=engine, capacity=ledger, config=PoolConfig(size=2), warm=[KEY]) as pool:
        assert pool.wait_warm(KEY)
        other = Limits(timeout="10s", memory="256m")  # another key: no warm container fits it
        result = pool.run_fresh(
            "print('served')", SessionSpec(limits=other, image=TEST_IMAGE, output_dir=tmp_path)
        )
        assert result.stdout == "served\n"
        assert pool.snapshot().shed >= 1
    assert ledger.usage().sandboxes == 0


def test_orphans_of_a_crashed_process_are_removed_at_pool_start(engine, tmp_path) -> None:
    orphan = engine.create(
        container_config(
            Limits(),
            run_id="orphan-pool",
            mode="pool",
            image=TEST_IMAGE,
            owner=owner_tag(4194305),  # a pid above pid_max: dead
        )
    )
    with Pool.start(engine=engine, capacity=capacity(tmp_path), config=PoolConfig(size=0)):
        assert orphan not in {c["Id"] for c in engine.managed_containers()}


def test_a_dead_warm_container_is_never_handed_over(engine, tmp_path) -> None:
    with Pool.start(
        engine=engine, capacity=capacity(tmp_path), config=PoolConfig(size=1), warm=[KEY]
    ) as pool:
        assert pool.wait_warm(KEY)
        victim = next(c["Id"] for c in ours(engine) if c["Labels"]["sbx.mode"] == "pool")
        engine.remove(victim)
        with pool.session(
            SessionSpec(limits=KEY.limits, image=TEST_IMAGE, output_dir=tmp_path)
        ) as session:
            assert session.container_id != victim
            assert session.run("print('fine')").ok


def test_idle_containers_past_their_age_are_replaced(engine, tmp_path) -> None:
    config = PoolConfig(size=1, max_age_s=0.5)
    with Pool.start(engine=engine, capacity=capacity(tmp_path), config=config, warm=[KEY]) as pool:
        assert pool.wait_warm(KEY)
        assert wait_until(lambda: pool.snapshot().expired >= 1)
        assert pool.wait_warm(KEY)  # and its replacement is ready
        assert pool.snapshot().built >= 2


def test_runs_with_data_are_served_by_a_warm_container(engine, tmp_path) -> None:
    """A run with data no longer creates its own container (test_pool_data.py)."""
    data = tmp_path / "sales.csv"
    data.write_text("region,amount\nnorth,3\n")
    config = PoolConfig(size=1, data_root=tmp_path / "data-root")
    with Pool.start(engine=engine, capacity=capacity(tmp_path), config=config, warm=[KEY]) as pool:
        assert pool.wait_warm(KEY)
        result = pool.run_fresh(
            "print(open('/data/sales.csv').read().split()[1])",
            SessionSpec(limits=KEY.limits, image=TEST_IMAGE, data=(data,), output_dir=tmp_path),
        )
        assert result.stdout == "north,3\n"
        stats = pool.snapshot()
        assert (stats.misses, stats.hits, stats.data_delivered) == (0, 1, 1)


def test_close_drains_idle_containers_and_waits_for_removals(engine, tmp_path) -> None:
    ledger = capacity(tmp_path)
    pool = Pool.start(engine=engine, capacity=ledger, config=PoolConfig(size=3), warm=[KEY])
    assert pool.wait_warm(KEY)
    held = pool.session(SessionSpec(limits=KEY.limits, image=TEST_IMAGE, output_dir=tmp_path))
    pool.close()
    assert pool.reaper.pending() == 0
    assert [c["Id"] for c in ours(engine)] == [held.container_id]
    held.close()  # after the drain, removal happens on the caller's thread
    assert ours(engine) == [] and ledger.usage().sandboxes == 0


BURST_KEY = PoolKey(image=TEST_IMAGE, limits=Limits(timeout="10s", memory="256m"))
"""Under the runner's preimport floor (384 MiB): the burst is about leaks, and importing the
data stack in each of its 200 containers would double the test's CPU (0.7 s a container)."""


def test_no_leaks_after_a_burst_of_200_fresh_executions(engine, tmp_path) -> None:
    ledger = capacity(tmp_path, sandboxes=12)
    config = PoolConfig(size=6, refill_workers=4, reap_workers=3)
    with Pool.start(engine=engine, capacity=ledger, config=config, warm=[BURST_KEY]) as pool:
        assert pool.wait_warm(BURST_KEY)
        with ThreadPoolExecutor(4) as workers:
            results = list(
                workers.map(
                    lambda i: pool.run_fresh(
                        f"print({i})",
                        SessionSpec(
                            limits=BURST_KEY.limits, image=TEST_IMAGE, output_dir=tmp_path
                        ),
                    ),
                    range(200),
                )
            )
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(200)]
        assert ledger.usage().sandboxes <= 12
    assert ours(engine) == []
    assert ledger.usage().sandboxes == 0 and pool.reaper.pending() == 0

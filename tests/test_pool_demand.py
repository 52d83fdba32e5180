"""The demand sizing rule (pure) and the decayed arrival rate it reads: no Docker needed."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import replace
from typing import cast

from sbx.sandbox.pool_config import KeySlot, PoolConfig, WarmEntry
from sbx.sandbox.pool_demand import ArrivalRate, Demand, SizingCaps, pool_target
from sbx.sandbox.pool_session import LeasedSession
from sbx.sandbox.pool_slots import pause, refill_held, take_idle

GIB = 1 << 30
MIB = 1 << 20
ROOMY = SizingCaps(max_size=16, window_s=60.0, memory_budget=64 * GIB, need_memory=512 * MIB,
                   host_sandboxes=32, host_memory=64 * GIB)


def target(arrivals: float = 0.0, expected: int = 0, **caps: int | float) -> int:
    fields = {**vars(ROOMY), **caps}
    return pool_target(Demand(arrivals_per_min=arrivals, expected=expected), SizingCaps(**fields))


def test_no_demand_keeps_the_floor_only() -> None:
    assert target() == 0
    assert target(min_size=2) == 2


def test_arrivals_over_the_window_set_the_target() -> None:
    assert target(arrivals=6.0) == 6  # six a minute, a minute ahead
    assert target(arrivals=6.0, window_s=30.0) == 3
    assert target(arrivals=0.4) == 0  # a trickle rounds down: no container held for it
    assert target(arrivals=0.6) == 1


def test_announced_conversations_add_to_the_arrivals() -> None:
    assert target(arrivals=2.0, expected=5) == 7
    assert target(expected=-3) == 0  # a bad figure never lowers below nothing


def test_max_size_budget_and_host_caps_each_bound_the_target() -> None:
    assert target(arrivals=100.0) == 16  # max_size
    assert target(arrivals=100.0, max_size=0, min_size=4) == 0  # max_size 0: nothing
    assert target(arrivals=100.0, memory_budget=2 * GIB) == 4  # 2 GiB / 512 MiB
    assert target(arrivals=100.0, memory_budget=2 * GIB, memory_held=GIB + 1) == 1
    assert target(arrivals=100.0, memory_budget=GIB, memory_held=2 * GIB) == 0
    assert target(arrivals=100.0, host_sandboxes=3) == 3
    assert target(arrivals=100.0, host_memory=GIB) == 2
    assert target(min_size=8, memory_budget=GIB) == 2  # the floor is bounded too


def test_the_rate_rises_at_once_and_decays_with_its_window() -> None:
    rate = ArrivalRate(window_s=10.0)
    for _ in range(10):
        rate.add(100.0)
    assert rate.count(100.0) == 10.0
    assert rate.per_minute(100.0) == 60.0  # ten in a 10 s window
    assert math.isclose(rate.count(110.0), 10.0 / math.e)
    assert rate.count(150.0) < 0.1
    rate.add(150.0)
    assert 1.0 < rate.count(150.0) < 1.1
    assert rate.count(90.0) == rate.count(150.0)  # time never runs backwards


def test_a_burst_then_silence_lifts_then_releases_the_target() -> None:
    rate = ArrivalRate(window_s=60.0)
    caps = SizingCaps(max_size=8, window_s=60.0, memory_budget=4 * GIB, need_memory=512 * MIB,
                      host_sandboxes=32, host_memory=64 * GIB)

    def now_target(at: float) -> int:
        return pool_target(Demand(arrivals_per_min=rate.per_minute(at)), caps)

    assert now_target(0.0) == 0
    for _ in range(5):
        rate.add(1.0)
    assert now_target(1.0) == 5
    assert now_target(61.0) == 2  # 5/e
    assert now_target(301.0) == 0  # demand gone: the pool shrinks to its floor


def test_a_caller_waiting_for_a_build_does_not_answer_every_wake_up_with_a_notify() -> None:
    """A maintainer that notifies on each pass (a refill starved by a full host) must not be
    woken back each time: that ping-pong once ran the pool's maintenance 877 times a second."""
    wake = threading.Condition()
    slot = KeySlot(rate=ArrivalRate(60.0), building=1)  # a build in flight, never finishing
    done = threading.Event()
    taker = threading.Thread(target=lambda: take_idle(slot, wake, done.is_set))
    taker.start()
    deadline = time.monotonic() + 10
    while slot.claims == 0 and time.monotonic() < deadline:
        with wake:
            wake.wait(0.01)
    assert slot.claims == 1  # it waits for that build
    woken_back = 0
    for _ in range(40):
        with wake:
            wake.notify_all()  # what a starved refill did on every pass
            woken_back += wake.wait(0.02)  # True only when someone notified us
    with wake:
        done.set()
        slot.building = 0
        wake.notify_all()
    taker.join(10)
    assert not taker.is_alive() and slot.claims == 0
    assert woken_back == 0


def test_a_refill_waits_after_a_take_only_while_the_next_arrival_is_covered_or_unlikely() -> None:
    slot = KeySlot(rate=ArrivalRate(60.0), target=2)
    slot.idle.extend([object()] * 2)  # type: ignore[list-item]  # only counted here
    assert refill_held(slot, 0.0, 2.0)  # full: nothing to refill
    slot.idle.pop()
    assert not refill_held(slot, 0.0, 2.0)  # below target with no take: demand rose, at once
    slot.rate.add(10.0)
    slot.gap_since = 10.0  # a take opened the gap; one container is still idle
    assert refill_held(slot, 11.0, 2.0)
    assert not refill_held(slot, 12.0, 2.0)  # the delay is over
    assert not refill_held(slot, 11.0, 0.0)  # no delay configured
    slot.expected = 3  # more sessions announced than idle: they need the refill now
    assert not refill_held(slot, 11.0, 2.0)
    slot.expected = 0
    slot.idle.pop()
    assert refill_held(slot, 11.0, 2.0)  # none idle, but one arrival a minute: unlikely soon
    slot.rate.add(10.0, count=30.0)  # a burst drained it: the next arrival is likely
    assert not refill_held(slot, 11.0, 2.0)
    slot.building = 2
    assert refill_held(slot, 11.0, 2.0) and slot.gap_since is None  # back at target


def test_each_take_serves_one_announced_session() -> None:
    wake = threading.Condition()
    slot = KeySlot(rate=ArrivalRate(60.0), expected=2)
    for left in (1, 0, 0):
        assert take_idle(slot, wake, lambda: False) == (None, [])  # none idle: a miss
        assert slot.expected == left


def test_the_maintenance_loop_waits_longer_only_while_nothing_moves() -> None:
    config = PoolConfig(tick_s=0.05, quiet_tick_s=0.5, max_age_s=600.0)
    now = 1000.0
    full = KeySlot(rate=ArrivalRate(60.0), target=1,
                   idle=deque([WarmEntry(session=cast(LeasedSession, None), born=now - 10)]))
    assert pause([full], config, now) == 0.5  # all still: a slow pass
    assert pause([], config, now) == 0.5
    expiring = replace(full, idle=deque([WarmEntry(session=full.idle[0].session,
                                                   born=now - 599.8)]))
    assert math.isclose(pause([expiring], config, now), 0.2)  # its expiry comes on time
    held = replace(full, target=2, gap_since=now - 1.7)  # a take 1.7 s ago, its refill held
    assert math.isclose(pause([full, held], replace(config, refill_delay_s=2.0), now), 0.3)
    assert math.isclose(pause([replace(full, retry_at=now + 0.1)], config, now), 0.1)
    building = replace(full, target=2, building=1)  # its end wakes the loop itself
    assert pause([building], config, now) == 0.5
    for slot in (replace(full, starved=True), replace(full, target=2)):  # waiting for room,
        assert pause([full, slot], config, now) == 0.05  # a gap no take opened: fast passes

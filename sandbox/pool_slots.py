"""What the pool does with one key's slot under its lock: size it from demand, take from it.

Kept apart from `sandbox.pool` so the pool's machinery stays readable; the
sizing rule itself is `sandbox.pool_demand.pool_target`, a pure function.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

from sbx.sandbox.host_caps import HostCaps
from sbx.sandbox.pool_config import KeySlot, PoolConfig, PoolKey, PoolStats
from sbx.sandbox.pool_demand import Demand, SizingCaps, pool_target
from sbx.sandbox.pool_session import LeasedSession

BUILD_WAIT_S = 10.0
"""Seconds a caller waits for a build already in flight for its key before creating its own."""


def retarget(
    slots: Mapping[PoolKey, KeySlot],
    config: PoolConfig,
    caps: HostCaps,
    stats: PoolStats,
    now: float,
) -> list[LeasedSession]:
    """Set each slot's target; take out the idle containers above it (call under the pool's lock).

    A key given a count with `Pool.keep` aims at that count (within the host's sandbox
    cap); otherwise, with `max_size` 0 the target is the fixed `size`, as before demand sizing.
    The memory budget is shared: a key's room is what the other keys' idle and
    building containers leave of it. The caller closes what is returned (off
    the lock); each counts in `stats.trimmed`.
    """
    trim: list[LeasedSession] = []
    held = {key: (len(slot.idle) + slot.building) * key.limits.memory
            for key, slot in slots.items()}
    for key, slot in slots.items():
        if slot.kept is not None:
            slot.target = min(slot.kept, caps.sandboxes)
        elif config.max_size <= 0:
            slot.target = config.size
        else:
            slot.target = pool_target(
                Demand(arrivals_per_min=slot.rate.per_minute(now), expected=slot.expected),
                SizingCaps(
                    min_size=config.size, max_size=config.max_size, window_s=config.window_s,
                    memory_budget=config.memory_budget,
                    memory_held=sum(held.values()) - held[key], need_memory=key.limits.memory,
                    host_sandboxes=caps.sandboxes, host_memory=caps.memory,
                ),
            )
        while slot.idle and len(slot.idle) + slot.building > slot.target:
            trim.append(slot.idle.popleft().session)
            held[key] -= key.limits.memory
            stats.trimmed += 1
    return trim


def refill_held(slot: KeySlot, now: float, delay_s: float) -> bool:
    """Whether the slot's refill starts later, or has nothing to do (call under the pool's lock).

    On 2 cores a build (the engine's create and a zygote importing the stack,
    about a second of CPU) started the moment a lone analyst takes a container
    competes with that analyst's first questions: measured, it doubled their
    median. So after a take the refill waits up to `delay_s`, as long as no
    session announced ahead is left without an idle container and the next
    arrival within the delay is served warm anyway (one is idle) or unlikely
    (the recent rate predicts under half an arrival). A burst that drains the
    pool is refilled at once, and so is a gap no take opened (demand rose).
    """
    if len(slot.idle) + slot.building >= slot.target:
        slot.gap_since = None
        return True
    if slot.gap_since is None or now - slot.gap_since >= delay_s:
        return False
    if slot.expected > len(slot.idle):
        return False
    arriving = slot.rate.per_minute(now) * delay_s / 60.0
    return len(slot.idle) >= 1 or arriving < 0.5


def pause(slots: Iterable[KeySlot], config: PoolConfig, now: float) -> float:
    """Seconds until the next maintenance pass, nobody queued on the host (under the lock).

    `tick_s` while a slot waits for room under the host's cap (`starved`: another
    process may free it at any moment) or is short with no take to explain it. A
    refill held after a take (`refill_held`) is due when its delay ends, a backoff
    when it ends; a build in flight wakes the loop itself when it finishes. Else up
    to `quiet_tick_s`, and no later than the next idle container's expiry.
    Whatever else changes this in this process (a take, `expect`, `keep`) wakes
    the loop at once; a pass 20 times a second cost an idle pool about 4 ms of
    CPU per second here, and about as much during each refill.
    """
    fast = config.tick_s
    wait = max(fast, config.quiet_tick_s)
    for slot in slots:
        if slot.starved:
            return fast
        if now < slot.retry_at:
            wait = min(wait, slot.retry_at - now)
        elif len(slot.idle) + slot.building < slot.target:
            if slot.gap_since is None:
                return fast
            wait = min(wait, slot.gap_since + config.refill_delay_s - now)
        if slot.idle:
            wait = min(wait, slot.idle[0].born + config.max_age_s - now)
    return max(fast, wait)


def take_idle(
    slot: KeySlot, wake: threading.Condition, closing: Callable[[], bool]
) -> tuple[LeasedSession | None, list[LeasedSession]]:
    """The oldest usable idle container of the slot, and the dead ones met on the way.

    With none idle, the caller waits for a build in flight only if no earlier
    waiter has claimed that build (it is further along than a new create), so
    nobody waits behind a refill it will not get: a miss creates its own
    container at once. Every take counts as an arrival (`KeySlot.rate`).
    """
    dead: list[LeasedSession] = []
    found: LeasedSession | None = None
    claimed = False
    with wake:
        slot.starved = False  # settle() now waits for the next refill attempt
        slot.rate.add(time.monotonic())
        slot.expected = max(0, slot.expected - 1)  # one announced session served
        deadline = time.monotonic() + BUILD_WAIT_S
        while found is None:
            if slot.idle:
                candidate = slot.idle.popleft().session
                if candidate.usable():
                    found = candidate
                    if slot.gap_since is None:
                        slot.gap_since = time.monotonic()
                else:
                    dead.append(candidate)
                continue
            remaining = deadline - time.monotonic()
            spare = slot.building - slot.claims + (1 if claimed else 0)
            if spare <= 0 or closing() or remaining <= 0:
                break
            if not claimed:
                slot.claims += 1
                claimed = True
                wake.notify()  # once: a notify per wake-up would ping-pong with the maintainer
            wake.wait(remaining)
        if claimed:
            slot.claims -= 1
        wake.notify()  # refill now, not at the next tick
    return found, dead

"""The pool's per-tick sizing step: each warmed key's target from its demand, and the excess.

Kept apart from `sandbox.pool` so the pool's machinery stays readable; the rule
itself is `sandbox.pool_demand.pool_target`, a pure function.
"""

from __future__ import annotations

from collections.abc import Mapping

from sbx.sandbox.host_caps import HostCaps
from sbx.sandbox.pool_config import KeySlot, PoolConfig, PoolKey, PoolStats
from sbx.sandbox.pool_demand import Demand, SizingCaps, pool_target
from sbx.sandbox.pool_session import LeasedSession


def retarget(
    slots: Mapping[PoolKey, KeySlot],
    config: PoolConfig,
    caps: HostCaps,
    stats: PoolStats,
    now: float,
) -> list[LeasedSession]:
    """Set each slot's target; take out the idle containers above it (call under the pool's lock).

    With `max_size` 0 the target is the fixed `size`, as before demand sizing.
    The memory budget is shared: a key's room is what the other keys' idle and
    building containers leave of it. The caller closes what is returned (off
    the lock); each counts in `stats.trimmed`.
    """
    trim: list[LeasedSession] = []
    held = {key: (len(slot.idle) + slot.building) * key.limits.memory
            for key, slot in slots.items()}
    for key, slot in slots.items():
        if config.max_size <= 0:
            slot.target = config.size
            continue
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

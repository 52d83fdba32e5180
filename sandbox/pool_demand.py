"""How many warm containers a key should have: a pure sizing rule fed by observed demand.

A fixed-size pool is wrong both ways: at 9 a.m. thirty analysts arrive and all
but the first two create their container on their own path; at night the same
two containers sit idle. The pool instead keeps, per warmed key, about as many
containers as it expects to be asked for before a refill could finish:

    expected   the leases taken lately (`ArrivalRate`: an exponentially decayed
               count, time constant `window_s`; i.e. arrivals per minute scaled
               to the window) plus the sessions announced ahead (`expected`: in
               the service, open conversations that hold no sandbox yet)
    target     round(expected), at least `min_size`, then capped by `max_size`,
               by the operator's memory budget (`memory_budget` // the key's
               memory limit, counting what other keys already hold) and by the
               host's caps (`HostCaps`: sandboxes, memory)

`pool_target` is the rule itself, a pure function so it is tested without
Docker; `Pool` calls it each maintenance tick, refills up to it and removes idle
containers above it, so the pool shrinks back when demand falls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["ArrivalRate", "Demand", "SizingCaps", "pool_target"]


@dataclass(frozen=True, kw_only=True)
class Demand:
    """What one key is being asked for, as the pool observes it."""

    arrivals_per_min: float = 0.0
    """Leases taken per minute lately (decayed rate; hits and misses both count)."""
    expected: int = 0
    """Sessions announced ahead (open conversations without a sandbox), already bounded."""


@dataclass(frozen=True, kw_only=True)
class SizingCaps:
    """The bounds a target must respect (the operator's `[pool]` knobs and the host's caps)."""

    min_size: int = 0
    """Warm containers kept even with no demand."""
    max_size: int = 0
    """Most warm containers (idle and building) of one key; 0 turns the pool off."""
    window_s: float = 60.0
    """How far ahead arrivals are expected: the rate's time constant, in seconds."""
    memory_budget: int = 0
    """Bytes of memory limits the warm containers of every key may reserve together."""
    memory_held: int = 0
    """Bytes of that budget already reserved by other keys' warm containers."""
    need_memory: int = 1
    """The memory limit of one container of this key, in bytes."""
    host_sandboxes: int = 0
    """The host's sandbox cap (`SBX_MAX_SANDBOXES`)."""
    host_memory: int = 0
    """The host's memory cap (`SBX_MAX_MEMORY`), in bytes."""


def pool_target(demand: Demand, caps: SizingCaps) -> int:
    """Warm containers (idle plus building) to keep for one key now; never negative.

    Rounded to the nearest whole container, so a decayed rate falls back to 0
    once demand has stopped for a window or two instead of holding one forever.
    """
    expected = demand.arrivals_per_min * caps.window_s / 60.0 + max(0, demand.expected)
    want = max(caps.min_size, math.floor(expected + 0.5))
    need = max(1, caps.need_memory)
    budget_room = max(0, caps.memory_budget - caps.memory_held) // need
    host_room = min(caps.host_sandboxes, caps.host_memory // need)
    return max(0, min(want, caps.max_size, budget_room, host_room))


class ArrivalRate:
    """An exponentially decayed count of arrivals; not thread-safe (the pool's lock guards it).

    Each arrival adds 1 and the sum decays with time constant `window_s`, so
    the count is about the arrivals of the last `window_s` seconds and reacts to
    a rise at once (a burst of ten lifts it by ten), without a list of times.
    """

    def __init__(self, window_s: float) -> None:
        self.window_s = max(window_s, 1e-3)
        self._count = 0.0
        self._at = 0.0

    def add(self, now: float, count: float = 1.0) -> None:
        """Record `count` arrivals at monotonic time `now`."""
        self._count = self.count(now) + count
        self._at = now

    def count(self, now: float) -> float:
        """The decayed count at `now` (arrivals in about the last window)."""
        elapsed = max(0.0, now - self._at)
        return self._count * math.exp(-elapsed / self.window_s)

    def per_minute(self, now: float) -> float:
        """Arrivals per minute at `now`: the decayed count over the window."""
        return self.count(now) * 60.0 / self.window_s

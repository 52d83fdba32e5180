"""The pool's value types: what keys it, how it is configured, what it counts, what it holds.

Kept apart from `sandbox.pool` so the pool's machinery stays readable; import
the public ones (`PoolKey`, `PoolConfig`, `PoolStats`) from either module.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from sbx.sandbox.config import DEFAULT_IMAGE
from sbx.sandbox.limits import Limits
from sbx.sandbox.pool_demand import ArrivalRate
from sbx.sandbox.pool_session import LeasedSession


@dataclass(frozen=True, kw_only=True)
class PoolKey:
    """Everything that shapes a container: two requests share warm containers only if equal."""

    image: str = DEFAULT_IMAGE
    """Image reference, as given to the engine."""
    limits: Limits = field(default_factory=Limits)
    """Every limit, the runtime and the network mode included."""
    also_import: tuple[str, ...] = ()
    """Modules its containers import past the data stack (`SessionSpec.also_import`)."""


@dataclass(frozen=True, kw_only=True)
class PoolConfig:
    """How many warm containers to keep and how the pool maintains them."""

    size: int = 2
    """Warm containers kept per warmed key: the fixed size when `max_size` is 0, else the
    least kept with no demand (0: none, only capped creates)."""
    max_size: int = 0
    """Most warm containers per warmed key when the size follows demand (`sandbox.pool_demand`:
    recent leases and announced sessions); 0: a fixed pool of `size`."""
    window_s: float = 60.0
    """Seconds of demand the pool keeps warm containers for (the arrival rate's time
    constant): a burst lifts the target at once, and it decays over about this long."""
    memory_budget: int = 2 << 30
    """Bytes of memory limits all warm containers may reserve together (demand sizing only;
    the host's caps bound it as well)."""
    max_age_s: float = 600.0
    """Seconds an idle container may wait before it is replaced by a new one."""
    refill_delay_s: float = 2.0
    """Seconds a refill may wait after the take that opened the gap, while the next arrival
    is still served warm or unlikely that soon (`pool_slots.refill_held`); 0: at once."""
    refill_workers: int = 2
    """Containers built in parallel (each create+start costs the engine a few hundred ms)."""
    reap_workers: int = 2
    """Containers removed in parallel, off the callers' critical path."""
    tick_s: float = 0.05
    """Seconds between maintenance passes while containers are built, refills wait or callers
    queue (a take or a release wakes it early)."""
    quiet_tick_s: float = 0.5
    """Seconds between passes while nothing moves (every key full, nobody queued): a caller
    queued on the host by another process is noticed within this long."""
    retry_s: float = 1.0
    """First pause after a failed build; it doubles up to 30 s while builds keep failing."""
    data_root: Path | None = None
    """Where each warm container's `/data` directory lives (None: `SBX_DATA_ROOT`, else
    `/var/lib/sbx/data` for root): on the data's filesystem, files are linked, not copied."""
    max_copy_bytes: int = 64 << 20
    """Bytes one run may copy into a warm container (directory contents, or files on another
    filesystem); a run with more gets a container created with bind mounts instead."""


@dataclass(kw_only=True)
class PoolStats:
    """Counters for reports and tests."""

    idle: int = 0
    """Warm containers ready now (all keys)."""
    building: int = 0
    """Containers being created for the pool."""
    target: int = 0
    """Warm containers (idle plus building) the pool aims at now, all keys."""
    hits: int = 0
    """Requests served by a warm container."""
    misses: int = 0
    """Requests that created a container on their own path (no warm one of their key)."""
    data_delivered: int = 0
    """Hits whose `/data` files were put into the warm container (counted in `hits`)."""
    data_cold: int = 0
    """Requests with data a warm container could not take within the bounds (counted in
    `misses`: they got a created container with bind mounts)."""
    built: int = 0
    """Containers the pool created."""
    shed: int = 0
    """Idle containers removed early to make room for queued callers."""
    expired: int = 0
    """Idle containers replaced for reaching `max_age_s`."""
    trimmed: int = 0
    """Idle containers removed because demand fell below what the pool held."""
    failures: int = 0
    """Builds that failed."""
    last_error: str = ""
    """The most recent build failure, for `sbx doctor`-style reports."""


@dataclass
class WarmEntry:
    """One idle warm container (internal to `Pool`)."""

    session: LeasedSession
    born: float


@dataclass
class KeySlot:
    """The warm containers of one key and the builds in flight for it (internal to `Pool`)."""

    rate: ArrivalRate
    """Leases taken for this key lately (hits and misses)."""
    idle: deque[WarmEntry] = field(default_factory=deque)
    building: int = 0
    claims: int = 0
    """Callers waiting for one of the builds in flight (each waits only for a build of its own)."""
    expected: int = 0
    """Sessions announced ahead (`Pool.expect`)."""
    target: int = 0
    """What the last maintenance pass aimed at (idle plus building)."""
    gap_since: float | None = None
    """When a take last left the slot below its target (None: no gap opened by a take)."""
    retry_at: float = 0.0
    backoff: float = 0.0
    starved: bool = False
    """The last refill found no room under the host cap (or a queue ahead of it)."""
    kept: int | None = None
    """A count set with `Pool.keep`: the target, whatever the demand (None: sized as above)."""

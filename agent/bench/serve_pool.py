"""The two pools of `sbx bench serve`, read the same way: takes, builds in flight, settling.

    PoolFigures    hits, misses, idle, building, removing and target of one pool
    server_pool    the server's, from its `/metrics` (an admin key: `sbx_pool_takes_total`,
                   `sbx_pool_containers`, `sbx_pool_target`)
    core_pool      the in-process core's, from `App.sandbox_figures` (the counters the
                   server's metric is built from)
    settle         wait, bounded, until both pools build and remove nothing

Both sides run the policy's `[pool]` (`policy_text` in `sbx.agent.bench.serve`),
so their hits and misses compare; settling both between phases keeps one
phase's refills out of the next phase's CPU and latency.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx2
from prometheus_client.parser import text_string_to_metric_families

from sbx.agent.bench.serve_options import ServeBenchError
from sbx.agent.core.app import App

SETTLE_TIMEOUT_S = 120.0
"""Longest wait for a pool to settle; past it the next phase starts anyway (not a failure)."""
POLL_S = 0.2


@dataclass(frozen=True, kw_only=True)
class PoolFigures:
    """One reading of a pool."""

    hits: int = 0
    """Sandboxes served by a warm container, since the pool started."""
    misses: int = 0
    """Sandboxes created on the taker's path, since the pool started."""
    idle: int = 0
    """Warm containers ready now."""
    building: int = 0
    """Containers being built for the pool now."""
    removing: int = 0
    """Containers being removed in the background now."""
    target: int = 0
    """Warm containers (idle and building) the pool aims at now."""

    @property
    def settled(self) -> bool:
        """Nothing being built or removed.

        Not `idle >= target`: a pool the host's caps starve (the other side's
        pool holds the rest) stays below its target without building.
        """
        return self.building == 0 and self.removing == 0


def core_pool(app: App) -> PoolFigures:
    """The in-process core's pool (zeros when the policy runs no code)."""
    figures = app.sandbox_figures()
    return PoolFigures(**{name: int(figures.get(name, 0)) for name in (
        "hits", "misses", "idle", "building", "removing", "target")})


def server_pool(client: httpx2.Client) -> PoolFigures:
    """The server's pool, from `/metrics` (`client` carries an admin key)."""
    answer = client.get("/metrics")
    if answer.status_code != 200:
        raise ServeBenchError(f"GET /metrics: {answer.status_code} (expected 200)")
    values: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            label = sample.labels.get("result") or sample.labels.get("state") or ""
            values[(sample.name, label)] = sample.value
    containers = "sbx_pool_containers"
    return PoolFigures(
        hits=int(values.get(("sbx_pool_takes_total", "hit"), 0)),
        misses=int(values.get(("sbx_pool_takes_total", "miss"), 0)),
        idle=int(values.get((containers, "idle"), 0)),
        building=int(values.get((containers, "building"), 0)),
        removing=int(values.get((containers, "removing"), 0)),
        target=int(values.get(("sbx_pool_target", ""), 0)),
    )


def warmed(read: Callable[[], PoolFigures], count: int,
           timeout: float = SETTLE_TIMEOUT_S) -> bool:
    """Wait until a pool holds `count` warm containers and builds nothing, twice in a row.

    False after `timeout` (the host's caps, shared with the other side, may not hold
    them): the phase then starts anyway, and its misses show it.
    """
    def ready() -> bool:
        figures = read()
        return figures.settled and figures.idle >= count

    return _calm_twice(ready, timeout)


def settle(*reads: Callable[[], PoolFigures], timeout: float = SETTLE_TIMEOUT_S) -> bool:
    """Wait until every pool read settled twice in a row, `POLL_S` apart.

    Twice: right after a phase the pool's next maintenance tick (every 50 ms)
    may not yet have started the builds that refill it.
    """
    return _calm_twice(lambda: all(read().settled for read in reads), timeout)


def _calm_twice(calm_now: Callable[[], bool], timeout: float) -> bool:
    """True once `calm_now()` held on two polls in a row, `POLL_S` apart; False at `timeout`."""
    deadline = time.monotonic() + timeout
    calm = 0
    while time.monotonic() < deadline:
        calm = calm + 1 if calm_now() else 0
        if calm >= 2:
            return True
        time.sleep(POLL_S)
    return False

"""`Pool`: single-use warm sandboxes, handed over ready and destroyed off the caller's path.

A pooled container is created, attached and started ahead of time, and its
runner has said `ready`; taking one is a hand-over of that live `Session`, so
a fresh execution costs one round trip instead of a `docker run`. Each
container serves exactly one session or one fresh execution and is then
removed in the background (`Reaper`): nothing a program leaves behind (files,
processes, variables) can reach the next run, because there is no next run.

The pool is keyed by everything that shapes a container (`PoolKey`: image and `Limits`,
the runtime included, and the modules imported past the data stack). Only keys named with
`warm()` are kept filled: to `config.size`, or, with `config.max_size`, to a target that
follows demand (`sandbox.pool_demand`: leases taken lately and sessions announced with
`expect()`, within the memory budget and the host's caps), removing idle containers above
it when demand falls; a key named with `keep()` holds the count its caller sets. A request for a
warmed key with no idle container waits for a build already in flight only if no earlier
waiter has claimed it (it is further along than a new create); otherwise, and for any
other key, it gets a container created on the spot. Builds run on the pool's own
threads, never on a caller's. Runs with `/data` inputs are served warm too: each pooled
container mounts an empty directory of its own read-only at `/data`, and the run's files
are linked (or copied) into it on the host before the first execution
(`sandbox.datadir`), never sent through the runner protocol. Data past the delivery
bounds gets a created container with bind mounts, as every run with data used to.

Every container, pooled or not, holds a lease on the host-wide cap
(`sandbox.capacity`) from before its create until after its removal. The
refill takes leases only when they fit now and nobody is queued, and when
callers are queued it sheds idle containers, so a warm pool never starves a
real request. Idle containers older than `max_age_s` are replaced.
`Pool.start()` removes orphans of crashed processes (by label) and their data directories first;
`close()` drains: no new builds, idle containers removed, removals awaited.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from sbx.sandbox.capacity import HostCapacity, Lease
from sbx.sandbox.closing import Closing
from sbx.sandbox.datadir import default_data_root
from sbx.sandbox.engine import Engine
from sbx.sandbox.files import check_output_dir, data_mounts
from sbx.sandbox.gc import collect_orphans
from sbx.sandbox.host_caps import Need
from sbx.sandbox.live_output import OutputCallback
from sbx.sandbox.pool_config import KeySlot, PoolConfig, PoolKey, PoolStats, WarmEntry
from sbx.sandbox.pool_demand import ArrivalRate
from sbx.sandbox.pool_session import LeasedSession, Reaper
from sbx.sandbox.pool_slots import pause, refill_held, retarget, take_idle
from sbx.sandbox.result import ExecutionResult
from sbx.sandbox.session import Session, code_text
from sbx.sandbox.spec import DEFAULT_OUTPUT_ROOT, SessionSpec

__all__ = ["POOL_MODE", "Pool", "PoolConfig", "PoolKey", "PoolStats"]

logger = logging.getLogger(__name__)

POOL_MODE = "pool"
"""`sbx.mode` label of a container created for the pool (it keeps it after the hand-over)."""


class Pool(Closing):
    """Warm, single-use sandboxes for one process; `Pool.start()` or a `with` block."""

    def __init__(self, *, engine: Engine, capacity: HostCapacity, config: PoolConfig) -> None:
        self.engine = engine
        self.capacity = capacity
        self.config = config
        self.reaper = Reaper(engine, workers=config.reap_workers)
        self.stats = PoolStats()
        self.data_root = config.data_root or default_data_root()
        """Where the warm containers' `/data` directories live (`sbx gc` cleans the default)."""
        self._slots: dict[PoolKey, KeySlot] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closing = False
        self._builder = ThreadPoolExecutor(
            max_workers=max(1, config.refill_workers), thread_name_prefix="sbx-pool-build"
        )
        self._thread = threading.Thread(target=self._maintain, name="sbx-pool", daemon=True)

    @classmethod
    def start(
        cls,
        *,
        engine: Engine | None = None,
        capacity: HostCapacity | None = None,
        config: PoolConfig | None = None,
        warm: Iterable[PoolKey] = (),
    ) -> Pool:
        """Remove orphans of crashed processes, start maintenance, begin warming `warm`."""
        pool = cls(
            engine=engine or Engine.connect(),
            capacity=capacity or HostCapacity.from_env(),
            config=config or PoolConfig(),
        )
        removed = collect_orphans(pool.engine, data_root=pool.data_root)
        if removed:
            logger.info("removed %d orphaned sandbox container(s)", len(removed))
        pool._thread.start()
        for key in warm:
            pool.warm(key)
        return pool

    def warm(self, key: PoolKey) -> None:
        """Keep containers of this key ready from now on (`config.size`, or as demand says)."""
        self.engine.require_image(key.image)
        self.engine.require_runtime(key.limits.runtime)
        with self._wake:
            self._slot(key)
            self._wake.notify()

    def keep(self, key: PoolKey, count: int) -> None:
        """Keep exactly `count` containers of `key` ready from now on, whatever the demand.

        For a kind of container only some callers want, as many as they may come
        back for (the restore-ready containers); 0 removes the idle ones. The image is
        checked when the key is first kept, not at every change of the count.
        """
        with self._wake:
            known = key in self._slots
        if not known:
            self.engine.require_image(key.image)
            self.engine.require_runtime(key.limits.runtime)
        with self._wake:
            slot = self._slot(key)
            if slot.kept != max(0, count):
                slot.kept = max(0, count)
                self._wake.notify()

    def expect(self, key: PoolKey, sessions: int) -> None:
        """Announce `sessions` coming for a warmed key (replaces the last figure; demand sizing).

        `sbx serve` passes its open conversations without a sandbox, so the pool
        warms for them before they ask. Ignored for a key not warmed.
        """
        with self._wake:
            slot = self._slots.get(key)
            if slot is not None and slot.expected != max(0, sessions):
                slot.expected = max(0, sessions)
                self._wake.notify()

    def session(self, spec: SessionSpec | None = None) -> Session:
        """A started session for one run: a warm container if one fits, else a new one.

        `data` is checked first (`InvalidInput`, before any container is taken),
        then delivered into the warm container. Close the session (or use
        `with`) when the run ends; the container is then removed in the
        background and never serves another run. Raises `HostBusy` when the
        host-wide cap stays full past `SBX_HOST_WAIT`.
        """
        spec = (spec or SessionSpec()).resolved()
        key = PoolKey(image=spec.image, limits=spec.limits, also_import=spec.also_import)
        output_dir = spec.output_dir or DEFAULT_OUTPUT_ROOT / str(spec.run_id)
        check_output_dir(output_dir)  # a warm session must not adopt an unusable directory
        mounts = data_mounts(list(spec.data))
        taken = self._take(key)
        if taken is not None and taken.take_data(mounts):
            taken.adopt(run_id=str(spec.run_id), output_dir=output_dir, mode=spec.mode)
            with self._lock:
                self.stats.hits += 1
                self.stats.data_delivered += bool(mounts)
            return taken
        with self._lock:
            self.stats.misses += 1
            self.stats.data_cold += taken is not None  # past a delivery bound: discarded
        created = self._new_session(spec)
        created.start()
        return created

    def run_fresh(
        self,
        code: str | bytes,
        spec: SessionSpec | None = None,
        *,
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """Run one program in a container of its own (warm if possible), then discard it.

        `on_output(stream, text)` receives its output while it runs (`Session.run`).
        """
        spec = replace(spec or SessionSpec(), mode="fresh")
        text = code_text(code, spec.limits)  # refuse bad input before taking a container
        with self.session(spec) as session:
            return session.run(text, on_output=on_output)

    def idle(self, key: PoolKey | None = None) -> int:
        """Warm containers ready now, for one key or all."""
        with self._lock:
            slots = [self._slots.get(key)] if key is not None else list(self._slots.values())
            return sum(len(slot.idle) for slot in slots if slot is not None)

    def idle_container_ids(self, key: PoolKey) -> list[str]:
        """Ids of the warm containers of `key` (for measurements such as `sbx bench`)."""
        with self._lock:
            slot = self._slots.get(key)
            ids = [w.session.container_id for w in slot.idle] if slot is not None else []
        return [container_id for container_id in ids if container_id is not None]

    def wait_warm(self, key: PoolKey, count: int | None = None, timeout: float = 60.0) -> bool:
        """Block until `count` (default: the pool size) containers of `key` are ready."""
        want = self.config.size if count is None else count
        return self._wait_for(key, lambda slot: len(slot.idle) >= want, timeout)

    def wait_shrunk(self, key: PoolKey, count: int, timeout: float = 60.0) -> bool:
        """Block until `key`'s target and idle or building containers are at most `count`.

        The target counts: a burst that took every idle container leaves none, yet a refill.
        """
        return self._wait_for(
            key, lambda slot: max(slot.target, len(slot.idle) + slot.building) <= count, timeout)

    def settle(self, key: PoolKey, timeout: float = 60.0) -> bool:
        """Block until no build of `key` is in flight and the pool is full or out of room."""

        def settled(slot: KeySlot) -> bool:
            stuck = slot.starved or time.monotonic() < slot.retry_at
            return slot.building == 0 and (len(slot.idle) >= slot.target or stuck)

        return self._wait_for(key, settled, timeout)

    def _wait_for(self, key: PoolKey, done: Callable[[KeySlot], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._wake:
            while True:
                slot = self._slots.get(key)
                if slot is not None and done(slot):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closing:
                    return False
                self._wake.wait(min(remaining, 0.05))

    def close(self) -> None:
        """Drain: stop refilling, remove every idle container, wait for all removals."""
        with self._wake:
            if self._closing:
                return
            self._closing = True
            self._wake.notify_all()
        if self._thread.is_alive():
            self._thread.join()
        self._builder.shutdown(wait=True)  # builds in flight hand their container to the reaper
        with self._lock:
            leftovers = [warm.session for slot in self._slots.values() for warm in slot.idle]
            for slot in self._slots.values():
                slot.idle.clear()
        for session in leftovers:
            session.close()
        self.reaper.close()

    def snapshot(self) -> PoolStats:
        """A copy of the counters with the current idle and building figures."""
        with self._lock:
            stats = PoolStats(**vars(self.stats))
            stats.idle = sum(len(slot.idle) for slot in self._slots.values())
            stats.building = sum(slot.building for slot in self._slots.values())
            stats.target = sum(slot.target for slot in self._slots.values())
        return stats

    # ------------------------------------------------------------ internals

    def _new_session(
        self, spec: SessionSpec, *, lease: Lease | None = None, data_root: Path | None = None
    ) -> LeasedSession:
        return LeasedSession(engine=self.engine, spec=spec, capacity=self.capacity,
                             reaper=self.reaper, lease=lease, data_root=data_root,
                             max_copy_bytes=self.config.max_copy_bytes)

    def _take(self, key: PoolKey) -> LeasedSession | None:
        """The oldest usable warm container of `key` (`take_idle`); dead ones go to the reaper."""
        with self._lock:
            slot = self._slots.get(key)
        if slot is None:
            return None
        found, dead = take_idle(slot, self._wake, lambda: self._closing)
        for session in dead:
            session.close()
        return found

    def _maintain(self) -> None:
        """Maintenance loop: expire, shed for queued callers, refill; until close()."""
        while True:
            with self._wake:
                if self._closing:
                    return
            wait_s = self.config.tick_s
            try:
                wait_s = self._tick()
            except Exception as exc:  # e.g. the ledger directory became unwritable; keep going
                with self._lock:
                    self.stats.failures += 1
                    self.stats.last_error = str(exc)
                logger.warning("pool maintenance failed: %s", exc)
            with self._wake:
                if not self._closing:
                    self._wake.wait(wait_s)

    def _tick(self) -> float:
        """One maintenance pass; how long until the next one, unless a change wakes it."""
        now = time.monotonic()
        discard: list[LeasedSession] = []
        with self._lock:
            for slot in self._slots.values():
                while slot.idle and now - slot.idle[0].born > self.config.max_age_s:
                    discard.append(slot.idle.popleft().session)
                    self.stats.expired += 1
            discard.extend(retarget(self._slots, self.config, self.capacity.caps,
                                    self.stats, now))
            keys = list(self._slots)
        queued = self.capacity.waiting() > 0
        if queued:
            discard.extend(self._shed_one())
            with self._wake:
                newly = [slot for slot in self._slots.values() if not slot.starved]
                for slot in newly:
                    slot.starved = True
                if newly:  # for settle(): a notify every tick would wake takers in a loop
                    self._wake.notify_all()
        for session in discard:
            session.close()
        if not queued:
            for key in keys:
                self._refill(key, now)
        if queued:
            return self.config.tick_s
        with self._lock:
            return pause(self._slots.values(), self.config, time.monotonic())

    def _slot(self, key: PoolKey) -> KeySlot:
        """The slot of `key`, made on first use (under the lock)."""
        slot = self._slots.get(key)
        if slot is None:
            rate = ArrivalRate(self.config.window_s)
            slot = self._slots[key] = KeySlot(rate=rate, target=self.config.size)
        return slot

    def _shed_one(self) -> list[LeasedSession]:
        """The oldest idle container of any key, to free its lease for a queued caller."""
        with self._lock:
            oldest: KeySlot | None = None
            for slot in self._slots.values():
                if slot.idle and (oldest is None or slot.idle[0].born < oldest.idle[0].born):
                    oldest = slot
            if oldest is None:
                return []
            self.stats.shed += 1
            return [oldest.idle.popleft().session]

    def _refill(self, key: PoolKey, now: float) -> None:
        """Start builds until idle + building reaches the size, while leases fit now."""
        need = Need.of(key.limits)
        while True:
            with self._lock:
                slot = self._slots[key]
                if self._closing or now < slot.retry_at:
                    return
                if refill_held(slot, now, self.config.refill_delay_s):
                    return
            lease = self.capacity.try_acquire(need)
            with self._wake:
                was_starved, slot.starved = slot.starved, lease is None
                if lease is None:
                    if not was_starved:  # only a change: takers re-check on every notify
                        self._wake.notify_all()
                    return
                slot.building += 1
            try:
                self._builder.submit(self._build, key, lease)
            except RuntimeError:  # the interpreter is shutting down: give the slot back
                lease.release()
                with self._lock:
                    slot.building -= 1
                return

    def _build(self, key: PoolKey, lease: Lease) -> None:
        """Create, attach and start one container for the pool (on a builder thread)."""
        pool_id = "pool-" + uuid.uuid4().hex[:12]
        spec = SessionSpec(
            limits=key.limits,
            image=key.image,
            run_id=pool_id,
            mode=POOL_MODE,
            output_dir=DEFAULT_OUTPUT_ROOT / pool_id,
            preimport=True,  # off the caller's path: the first cell finds the stack loaded
            also_import=key.also_import,
        )
        session = self._new_session(spec, lease=lease, data_root=self.data_root)
        try:
            session.start()
        except Exception as exc:  # a builder thread must not die; the error is reported
            session.close()
            self._build_failed(key, exc)
            return
        with self._wake:
            slot = self._slots[key]
            slot.building -= 1
            slot.backoff = 0.0
            self.stats.built += 1
            keep = not self._closing
            if keep:
                slot.idle.append(WarmEntry(session=session, born=time.monotonic()))
            self._wake.notify_all()
        if not keep:
            session.close()

    def _build_failed(self, key: PoolKey, exc: BaseException) -> None:
        """Count the failure and back off, so a missing image does not hammer the engine."""
        with self._wake:
            slot = self._slots[key]
            slot.building -= 1
            slot.backoff = min(30.0, max(self.config.retry_s, slot.backoff * 2))
            slot.retry_at = time.monotonic() + slot.backoff
            self.stats.failures += 1
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
            self._wake.notify_all()
        logger.warning("pool build failed (retry in %.1f s): %s", slot.backoff, exc)

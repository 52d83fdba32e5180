"""`LeasedSession` and `Reaper`: a session that holds a host lease and is destroyed off-path.

A `LeasedSession` is a `Session` whose container counts against the host-wide
cap (`sandbox.capacity`): it takes a lease before creating a container (also
when it replaces one whose runner was lost) and gives the lease back only
after the container has been removed. Closing it closes the attach stream at
once (the runner sees end of input and exits) and hands the container to the
`Reaper`, whose threads kill and remove it, so the caller never waits for
the engine's removal, which costs about as much as a create.
"""

from __future__ import annotations

import logging
import select
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

from sbx.sandbox.capacity import HostCapacity, Lease
from sbx.sandbox.engine import Engine
from sbx.sandbox.host_caps import Need
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session

logger = logging.getLogger(__name__)


class Reaper:
    """Remove containers and release their leases on background threads."""

    def __init__(self, engine: Engine, *, workers: int = 2) -> None:
        self.engine = engine
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sbx-reap")
        self._lock = threading.Lock()
        self._pending: set[Future[None]] = set()
        self._closed = False
        self.reaped = 0
        """Containers removed so far (for stats and tests)."""

    def submit(self, container_id: str | None, lease: Lease | None) -> None:
        """Queue a removal; after `close()` it runs on the caller's thread instead."""
        if container_id is None and lease is None:
            return
        with self._lock:
            if not self._closed:
                future = self._executor.submit(self._reap, container_id, lease)
                self._pending.add(future)
                future.add_done_callback(self._done)
                return
        self._reap(container_id, lease)

    def _done(self, future: Future[None]) -> None:
        with self._lock:
            self._pending.discard(future)

    def _reap(self, container_id: str | None, lease: Lease | None) -> None:
        """Kill and remove, then give the share back: the ledger never shows less than runs."""
        try:
            if container_id is not None:
                self.engine.remove(container_id)
                with self._lock:
                    self.reaped += 1
        except Exception:  # a background thread must not die: log and free the lease
            logger.warning("could not remove sandbox %s", (container_id or "?")[:12])
        finally:
            if lease is not None:
                lease.release()

    def pending(self) -> int:
        """Removals queued or running."""
        with self._lock:
            return len(self._pending)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every removal queued so far has finished; False on timeout."""
        with self._lock:
            pending = list(self._pending)
        _, left = wait(pending, timeout=timeout)
        return not left

    def close(self) -> None:
        """Finish every queued removal; later submissions run synchronously."""
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=True)


class LeasedSession(Session):
    """A `Session` that holds a host lease for its container and is reaped in the background."""

    def __init__(
        self,
        *,
        engine: Engine,
        limits: Limits,
        image: str,
        run_id: str,
        data: list[Path],
        output_dir: Path,
        capacity: HostCapacity,
        reaper: Reaper,
        mode: str = "session",
        lease: Lease | None = None,
    ) -> None:
        super().__init__(
            engine=engine,
            limits=limits,
            image=image,
            run_id=run_id,
            data=data,
            output_dir=output_dir,
            mode=mode,
        )
        self.capacity = capacity
        self.reaper = reaper
        self.lease = lease

    def start(self) -> None:
        """Take a host lease (waiting in the FIFO queue; HostBusy on timeout), then start."""
        if self.lease is None:
            self.lease = self.capacity.acquire(Need.of(self.limits))
        super().start()

    def close(self) -> None:
        """Close the stream now; remove the container and release the lease in the background."""
        container_id, self.container_id = self.container_id, None
        lease, self.lease = self.lease, None
        super().close()  # closes the stream only: container_id is already None
        self.reaper.submit(container_id, lease)

    def usable(self) -> bool:
        """Whether the runner is still waiting quietly (no end of stream, no stray bytes)."""
        channel = self._channel
        if channel is None or channel.closed:
            return False
        try:
            readable, _, _ = select.select([channel.sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def adopt(self, *, run_id: str, output_dir: Path, mode: str) -> None:
        """Take on the identity of the run it now serves (the labels keep the pool's id)."""
        self.run_id = run_id
        self.output_dir = output_dir
        self.mode = mode

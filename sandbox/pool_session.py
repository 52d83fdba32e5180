"""`LeasedSession` and `Reaper`: a session that holds a host lease and is destroyed off-path.

A `LeasedSession` is a `Session` whose container counts against the host-wide
cap (`sandbox.capacity`): it takes a lease before creating a container (also
when it replaces one whose runner was lost) and gives the lease back only
after the container has been removed. Closing it closes the attach stream at
once (the runner sees end of input and exits) and hands the container to the
`Reaper`, whose threads kill and remove it, so the caller never waits for
the engine's removal, which costs about as much as a create.

A session given a `data_root` (every container the pool builds ahead of time)
mounts a directory of its own at `/data` (`sandbox.datadir`) instead of one
bind mount per data path, so the run's files can be delivered after the
container started (`deliver`). The directory is removed after the container,
and a replacement container (after a lost runner) gets a new one, filled
again with the same files.
"""

from __future__ import annotations

import logging
import select
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path, PurePosixPath

from sbx.sandbox.capacity import HostCapacity, Lease
from sbx.sandbox.config import DATA_TARGET, DataMount
from sbx.sandbox.datadir import DataDir, Delivery, NotDeliverable
from sbx.sandbox.datadrop import write_whole
from sbx.sandbox.engine import Engine
from sbx.sandbox.host_caps import Need
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

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

    def submit(
        self, container_id: str | None, lease: Lease | None, data_dir: DataDir | None = None
    ) -> None:
        """Queue a removal; after `close()` it runs on the caller's thread instead."""
        if container_id is None and lease is None and data_dir is None:
            return
        future: Future[None] | None = None
        with self._lock:
            if not self._closed:
                future = self._executor.submit(self._reap, container_id, lease, data_dir)
                self._pending.add(future)
        if future is None:
            self._reap(container_id, lease, data_dir)
            return
        # Outside the lock: a future already done runs `_done` here, which takes the lock.
        future.add_done_callback(self._done)

    def _done(self, future: Future[None]) -> None:
        with self._lock:
            self._pending.discard(future)

    def _reap(
        self, container_id: str | None, lease: Lease | None, data_dir: DataDir | None
    ) -> None:
        """Kill and remove, then the data directory, then give the share back."""
        try:
            if container_id is not None:
                self.engine.remove(container_id)
                with self._lock:
                    self.reaped += 1
        except Exception:  # a background thread must not die: log and free the lease
            logger.warning("could not remove sandbox %s", (container_id or "?")[:12])
        finally:
            try:
                if data_dir is not None:
                    data_dir.remove()
            except OSError as exc:  # left for `sbx gc` once this process is gone
                logger.warning("could not remove data directory: %s", exc.strerror)
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
        spec: SessionSpec,
        capacity: HostCapacity,
        reaper: Reaper,
        lease: Lease | None = None,
        data_root: Path | None = None,
        max_copy_bytes: int = 0,
    ) -> None:
        super().__init__(engine=engine, spec=spec)
        self.capacity = capacity
        self.reaper = reaper
        self.lease = lease
        self.data_root = data_root
        """Where this session's `/data` directory is made (None: one bind mount per path)."""
        self.max_copy_bytes = max_copy_bytes
        self.data_dir: DataDir | None = None
        self.delivered: tuple[DataMount, ...] = ()
        """The run's data, as delivered (a replacement container gets the same)."""

    def start(self) -> None:
        """Take a host lease (waiting in the FIFO queue; HostBusy on timeout), then start.

        With a `data_root`, the container's `/data` directory is made (and
        filled with what was delivered before) first. When anything fails (the
        engine refuses the container, the image is missing, the runner never
        says ready), the session is closed: the lease goes back with it.
        """
        if self.lease is None:
            self.lease = self.capacity.acquire(Need.of(self.limits))
        try:  # every way out without a container gives the lease back (an engine refusal too)
            if self.data_root is not None:
                self._make_data_dir(self.data_root)
            super().start()
        except BaseException:
            self.close()
            raise

    def _make_data_dir(self, root: Path) -> None:
        self.data_dir = DataDir.create(root)
        try:
            self.data_dir.fill(self.delivered, max_copy_bytes=self.max_copy_bytes)
        except NotDeliverable:  # a replacement: the data grew; bind mounts as a created one
            data_dir, self.data_dir, self.data_root = self.data_dir, None, None
            data_dir.remove()
            self.mounts = self.delivered
            return
        self.mounts = (DataMount(source=self.data_dir.path, target=DATA_TARGET),)

    def deliver(self, mounts: tuple[DataMount, ...]) -> Delivery:
        """Put the run's files into the running container's `/data`, before its first execution.

        Raises `NotDeliverable` (past a bound: use another container) or
        `InvalidInput` (a file changed since it was checked).
        """
        if self.data_dir is None or self.executions:
            raise NotDeliverable("this container takes no data (no data directory, or used)")
        delivery = self.data_dir.fill(mounts, max_copy_bytes=self.max_copy_bytes)
        self.delivered = mounts
        return delivery

    def show_file(self, source: Path) -> None:
        """A file just added to a data directory (a `DropDir`): copied into this `/data` too.

        Only a warm container needs it (its `/data` holds copies); where the directory is
        bind-mounted the file is there already, and a container that never received the
        directory is left alone.
        """
        data_dir = self.data_dir
        if data_dir is None:
            return
        directory = source.parent.resolve()
        for mount in self.delivered:
            if mount.source == directory:
                shown = data_dir.path / PurePosixPath(mount.target).name
                write_whole(shown, source.name, source.read_bytes())

    def take_data(self, mounts: tuple[DataMount, ...]) -> bool:
        """Deliver the run's data (if any); False, and this container discarded, past a bound."""
        try:
            if mounts:
                logger.debug("data delivered: %s", self.deliver(mounts))
        except NotDeliverable as exc:
            logger.info("data served by a created container instead: %s", exc)
            self.close()
            return False
        except BaseException:
            self.close()
            raise
        return True

    def close(self) -> None:
        """Close the stream now; remove the container, its data directory and the lease later."""
        container_id, self.container_id = self.container_id, None
        lease, self.lease = self.lease, None
        data_dir, self.data_dir = self.data_dir, None
        super().close()  # closes the stream only: container_id is already None
        self.reaper.submit(container_id, lease, data_dir)

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

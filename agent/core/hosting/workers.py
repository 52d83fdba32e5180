"""`sbx serve --workers N`: N worker processes on one address, each a replica of the same store.

One process runs one core's worth of Python (the GIL): past about one core,
a single `sbx serve` queues its requests while the host has cores idle. So the
parent binds the address once, then forks N workers that all accept on that
socket (the kernel hands each connection to one of them):

    sbx serve (the parent: binds, forks, forwards signals, restarts)
      ├─ worker 0   replica <id>/w0   the shared socket + <run dir>/w0.sock
      ├─ worker 1   replica <id>/w1   the shared socket + <run dir>/w1.sock
      └─ ...

Each worker is a replica in the existing machinery (`store.replicas`):
its own heartbeat, its conversations, their sandboxes and its runs, over the
shared store. A change to a conversation (a question, an answer, a delete, a
cancel) that reaches a worker other than its owner is forwarded to the owner
over its private Unix socket (the HTTP face's `Siblings`), so a client never sees the
workers; reads come from the store on any worker, and an event stream of a run
another worker runs reads the store.

The warm pool's sizes (`[pool]`) are the host's: split among the workers
(`WorkerSlot.scaled`); the host's sandbox caps are one ledger for every sbx
process already (`sandbox.capacity`). A replica's run queue (`[service]
max_running`, `max_queued`) stays each worker's: the kernel does not spread
conversations evenly, and a split queue made the busier worker queue runs while
the other had room (measured with `sbx bench serve`).

The parent holds no thread and no database: it forwards SIGTERM and SIGINT to
every worker (each drains as a lone server does) and exits when they have all
exited (0 when each did). A worker that dies otherwise is started again under
the same replica id: its restart marks what it held interrupted (kept for
restore) and removes the containers its previous life left. A worker ends
itself when the parent dies (`PR_SET_PDEATHSIG`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

from sbx.agent.core.config import AppConfig

logger = logging.getLogger(__name__)

RESTART_PAUSE_S = 1.0
"""Seconds between a worker's death and its restart (a crash loop costs little)."""
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, kw_only=True)
class WorkerSlot:
    """Which worker this process is, of how many, and where its siblings listen."""

    index: int
    """0 to `count - 1`."""
    count: int
    """Workers of this `sbx serve`."""
    base_id: str
    """`--replica-id` of the whole server; each worker's id is derived from it."""
    run_dir: Path
    """The parent's private directory of the workers' Unix sockets (0700)."""

    @property
    def replica_id(self) -> str:
        """This worker's replica id (stable across its restarts)."""
        return worker_id(self.base_id, self.index)

    @property
    def socket_path(self) -> Path:
        """Where this worker also listens, for requests its siblings forward."""
        return self.run_dir / f"w{self.index}.sock"

    @property
    def primary(self) -> Path | None:
        """Worker 0's socket (the faces pinned to it), for every other worker."""
        return self.run_dir / "w0.sock" if self.index else None

    def siblings(self) -> dict[str, Path]:
        """The other workers' replica ids and Unix sockets."""
        return {worker_id(self.base_id, i): self.run_dir / f"w{i}.sock"
                for i in range(self.count) if i != self.index}

    def share(self, total: int) -> int:
        """This worker's part of a host-wide size (the parts add up to `total`)."""
        return total // self.count + (1 if self.index < total % self.count else 0)

    def scaled(self, config: AppConfig) -> AppConfig:
        """The configuration with the warm pool's sizes split among the workers."""
        pool = config.pool
        return replace(
            config,
            pool=pool.model_copy(update={
                "size": self.share(pool.size), "max_size": self.share(pool.max_size),
                "memory_budget": pool.memory_budget // self.count}),
        )


def worker_id(base_id: str, index: int) -> str:
    """The replica id of worker `index` of the server whose `--replica-id` is `base_id`."""
    return f"{base_id}/w{index}"


class Supervisor:
    """The parent of the workers: start them, forward signals, restart the dead, wait."""

    def __init__(self, *, count: int, base_id: str, serve: Callable[[WorkerSlot, int], int]
                 ) -> None:
        self.count = count
        self.base_id = base_id
        self.serve = serve
        """`serve(slot, ready_fd)`: a worker's life (write a byte to `ready_fd` once it
        serves); its exit code."""
        self.run_dir = Path(tempfile.mkdtemp(prefix="sbx-serve-"))
        self.children: dict[int, int] = {}
        """pid -> worker index."""
        self.stopping = False

    def slot(self, index: int) -> WorkerSlot:
        """Worker `index`'s slot."""
        return WorkerSlot(index=index, count=self.count, base_id=self.base_id,
                          run_dir=self.run_dir)

    def run(self, on_ready: Callable[[], None]) -> int:
        """Start every worker, then `on_ready()`, then wait for them all; the exit code.

        SIGTERM and SIGINT are passed on to every worker; a worker that dies otherwise
        is started again. 1 when a worker failed to start (the others are stopped) or
        did not exit 0 at the end.
        """
        previous = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            if not self._start():
                self._signal_all(signal.SIGTERM)
                self._reap_all()
                return 1
            on_ready()
            return self._wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _start(self) -> bool:
        """Fork every worker; True once all serve (a worker that exits first: False)."""
        pipes = [self._fork(index) for index in range(self.count)]
        ok = True
        for read_end in pipes:
            with os.fdopen(read_end, "rb") as ready:
                ok = ready.read(1) == b"r" and ok  # EOF without it: that worker exited
        return ok

    def _wait(self) -> int:
        failed = False
        while self.children:
            pid, status = os.wait()
            index = self.children.pop(pid, None)
            if index is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            if self.stopping:
                if code != 0:
                    logger.warning("worker %d (pid %d) exited with %d", index, pid, code)
                failed = failed or code != 0
                continue
            logger.warning("worker %d (pid %d) exited with %d; starting it again",
                           index, pid, code)
            time.sleep(RESTART_PAUSE_S)
            if not self.stopping:
                os.close(self._fork(index))
        return 1 if failed else 0

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        """Every worker drains (a second signal stops them at once, as for a lone server)."""
        self.stopping = True
        self._signal_all(signal.SIGTERM if sig == signal.SIGTERM else signal.SIGINT)

    def _signal_all(self, sig: int) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _reap_all(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            self.children.pop(pid, None)

    def _fork(self, index: int) -> int:
        """Start worker `index`; the read end of its readiness pipe."""
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the parent's code
            code = 1
            try:
                os.close(read_end)
                _become_worker()
                code = self.serve(self.slot(index), write_end)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                logger.exception("worker %d failed", index)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(write_end)
        self.children[pid] = index
        return read_end


EARLY_SIGNALS: list[int] = []
"""SIGTERM or SIGINT received while the worker was starting: the server drains at once when
it starts serving (`server.DrainingServer.capture_signals`), so a worker restarted just
before a shutdown still exits 0, and none is left running."""


def _remember(sig: int, frame: FrameType | None) -> None:
    EARLY_SIGNALS.append(sig)


def _become_worker() -> None:
    """Signals kept for later, a process group of its own, and death with the parent.

    Its own process group: a Ctrl-C at the terminal reaches the parent alone, which
    passes it on once (two would stop the worker without its drain).
    """
    parent = os.getppid()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _remember)
    os.setpgid(0, 0)
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def freeze_heap() -> None:
    """Keep what start-up built (modules, classes, the app) out of every later garbage collection.

    A long-lived server's heap is about 270,000 tracked objects once sbx, the web
    framework and the store are imported, and Python's full collection walks them all:
    about 215 ms of CPU each time under the churn of questions (measured with
    `gc.callbacks` in `sbx serve`); freezing them cut the server's CPU for a later
    question of a long conversation from 41-44 to 30 ms. `gc.freeze()` moves them to
    a generation no collection visits; start-up's garbage is collected first, so it is
    not kept for ever. Objects made later are collected as before. Each worker of
    `--workers N` freezes its own heap once it has built its service (after the fork:
    this is about collections' CPU, not about sharing pages with the parent).
    """
    gc.collect()
    gc.freeze()


def announce_ready(ready_fd: int) -> None:
    """Tell the parent this worker serves (a restarted worker's parent no longer listens)."""
    with contextlib.suppress(OSError):
        os.write(ready_fd, b"r")
    with contextlib.suppress(OSError):
        os.close(ready_fd)


def listen_unix(path: Path) -> socket.socket:
    """The worker's private socket (what its previous life left is replaced), owner-only."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, 0o600)
        sock.listen(512)
    except OSError:
        sock.close()
        raise
    return sock

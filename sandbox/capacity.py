"""Host-wide capacity: a cap on running sandboxes and on their summed memory and CPUs.

Every sbx process on a host shares one ledger, a small JSON file replaced
atomically under an exclusive `flock` (`SBX_CAPACITY_DIR`, default `/run/sbx`
for root, else `/tmp/sbx-<uid>`). A sandbox holds a `Lease` from before its
container is created until after it is removed, so the ledger never shows less
than what runs. Callers that do not fit wait in one first-in-first-out queue
kept in the same file: only the head of the queue may take a lease, so a
large request is never starved by a stream of small ones, and nobody jumps the
queue by arriving in another process. A caller still waiting after its timeout
gets `HostBusy`, whose message names the knob that binds.

Entries of a process that died (crash, SIGKILL) are dropped at the next read:
its containers are gone too, since their runners exit when the owner's stream
closes and the engine auto-removes them. The ledger assumes one PID namespace:
sbx processes in separate containers must not share a ledger directory.

Knobs (environment): `SBX_MAX_SANDBOXES` (default 32), `SBX_MAX_MEMORY`
(default 75% of the host's RAM; memory is never over-committed),
`SBX_MAX_CPUS` (default 4x the host's cores: CPU quotas are ceilings that
time-share, so some overlap only slows; set it to the core count for a strict
cap), `SBX_HOST_WAIT` (seconds a caller waits in the queue, default 60).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sbx.sandbox.errors import HostBusy, SandboxError
from sbx.sandbox.host_caps import (
    ENV_MAX_CPUS,
    ENV_MAX_MEMORY,
    ENV_MAX_SANDBOXES,
    HostCaps,
    HostUsage,
    Need,
)
from sbx.sandbox.units import format_size, parse_duration

ENV_HOST_WAIT = "SBX_HOST_WAIT"
ENV_CAPACITY_DIR = "SBX_CAPACITY_DIR"
DEFAULT_HOST_WAIT_S = 60.0
POLL_S = 0.02
"""How often a waiter re-reads the ledger for releases made by other processes."""
LEDGER_VERSION = 1


class LedgerDamaged(SandboxError):
    """The capacity ledger cannot be parsed; guessing could over-commit the host."""


@dataclass(kw_only=True)
class _State:
    """The parsed ledger: leases by id and the FIFO queue of waiting tickets."""

    leases: dict[str, dict[str, Any]] = field(default_factory=dict)
    queue: list[dict[str, Any]] = field(default_factory=list)
    dirty: bool = False

    def usage(self) -> HostUsage:
        return HostUsage(
            sandboxes=len(self.leases),
            memory=sum(int(lease["memory"]) for lease in self.leases.values()),
            cpus=sum(float(lease["cpus"]) for lease in self.leases.values()),
            waiting=len(self.queue),
        )

    def prune(self) -> None:
        """Drop leases and tickets of processes that no longer run."""
        dead = {
            pid
            for pid in {int(e["pid"]) for e in [*self.leases.values(), *self.queue]}
            if not _pid_alive(pid)
        }
        if not dead:
            return
        self.leases = {k: v for k, v in self.leases.items() if int(v["pid"]) not in dead}
        self.queue = [t for t in self.queue if int(t["pid"]) not in dead]
        self.dirty = True


def _pid_alive(pid: int) -> bool:
    """Whether the process runs; a zombie (killed, not yet reaped) holds nothing any more."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return True
    return state != [b"Z"]


def default_directory() -> Path:
    """`/run/sbx` for root (cleared at boot, like the containers), else a per-user /tmp dir."""
    if os.geteuid() == 0 and os.path.isdir("/run"):
        return Path("/run/sbx")
    return Path(f"/tmp/sbx-{os.geteuid()}")


class Lease:
    """One sandbox's share of the host; release it after the container is removed."""

    def __init__(self, capacity: HostCapacity, lease_id: str, need: Need) -> None:
        self.capacity = capacity
        self.id = lease_id
        self.need = need
        self.released = False

    def release(self) -> None:
        """Give the share back (idempotent) and wake local waiters."""
        if self.released:
            return
        self.released = True
        self.capacity.release(self.id)


QUEUE_RECHECK_S = 1.0
"""`HostCapacity.waiting` parses an unchanged ledger again after this long anyway."""


class HostCapacity:
    """The shared ledger of one host: acquire a lease before creating a sandbox."""

    def __init__(
        self, *, directory: Path, caps: HostCaps, wait_s: float = DEFAULT_HOST_WAIT_S
    ) -> None:
        self.directory = directory
        self.caps = caps
        self.wait_s = wait_s
        self.path = directory / "ledger.json"
        self._lock_path = directory / "ledger.lock"
        self._thread_lock = threading.Lock()
        self._released = threading.Condition()
        self._fd = -1
        self._queue_seen: tuple[tuple[int, ...] | None, float, list[int]] | None = None
        """What `waiting` last parsed: the file's signature, when, the queued callers' pids."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> HostCapacity:
        """The host's ledger as configured by the `SBX_*` knobs."""
        env = os.environ if environ is None else environ
        directory = Path(env[ENV_CAPACITY_DIR]) if env.get(ENV_CAPACITY_DIR) else None
        try:
            wait_s = parse_duration(env.get(ENV_HOST_WAIT, DEFAULT_HOST_WAIT_S))
        except ValueError as exc:
            raise SandboxError(f"bad {ENV_HOST_WAIT}: {exc}") from None
        return cls(
            directory=directory or default_directory(), caps=HostCaps.from_env(env), wait_s=wait_s
        )

    def acquire(self, need: Need, *, timeout: float | None = None) -> Lease:
        """A lease for `need`, waiting in the host's FIFO queue; HostBusy after `timeout` s."""
        wait_s = self.wait_s if timeout is None else timeout
        self._refuse_impossible(need)
        ticket = uuid.uuid4().hex
        deadline = time.monotonic() + wait_s
        granted = False
        try:
            while True:
                with self._ledger() as state:
                    if ticket not in {t["id"] for t in state.queue}:
                        state.queue.append(self._entry(ticket, need))
                        state.dirty = True
                    if state.queue[0]["id"] == ticket and self._fits(state.usage(), need):
                        state.queue.pop(0)
                        state.leases[ticket] = self._entry(ticket, need)
                        state.dirty = granted = True
                        return Lease(self, ticket, need)
                    usage = state.usage()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise HostBusy(self._busy_message(usage, need, wait_s))
                with self._released:
                    self._released.wait(min(POLL_S, remaining))
        finally:
            if not granted:
                self._forget(ticket)

    def try_acquire(self, need: Need) -> Lease | None:
        """A lease if it fits now and nobody is queued (the pool never jumps the queue)."""
        ticket = uuid.uuid4().hex
        with self._ledger() as state:
            if state.queue or not self._fits(state.usage(), need):
                return None
            state.leases[ticket] = self._entry(ticket, need)
            state.dirty = True
        return Lease(self, ticket, need)

    def release(self, lease_id: str) -> None:
        """Remove a lease from the ledger; prefer `Lease.release`."""
        with self._ledger() as state:
            if state.leases.pop(lease_id, None) is not None:
                state.dirty = True
        with self._released:
            self._released.notify_all()

    def usage(self) -> HostUsage:
        """The host's current totals, dead processes' entries dropped."""
        with self._ledger() as state:
            return state.usage()

    def waiting(self) -> int:
        """How many callers wait in the queue (the pool sheds idle containers for them).

        The pool asks on every maintenance pass, so the ledger is parsed again only
        when its file changed since (each write replaces it whole), a caller queued
        then has died, or a second has passed. The signature is read before the
        ledger: a write in between only makes the next call parse again.
        """
        signature, now, seen = self._signature(), time.monotonic(), self._queue_seen
        if (seen is not None and signature is not None and seen[0] == signature
                and now - seen[1] < QUEUE_RECHECK_S and all(_pid_alive(p) for p in seen[2])):
            return len(seen[2])
        with self._ledger() as state:
            queued = [int(ticket["pid"]) for ticket in state.queue]
        self._queue_seen = (signature, now, queued)
        return len(queued)

    def _signature(self) -> tuple[int, ...] | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def close(self) -> None:
        """Close the lock file (leases are unaffected: they live in the ledger)."""
        with self._thread_lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def _fits(self, usage: HostUsage, need: Need) -> bool:
        return (
            usage.sandboxes + 1 <= self.caps.sandboxes
            and usage.memory + need.memory <= self.caps.memory
            and usage.cpus + need.cpus <= self.caps.cpus + 1e-9
        )

    def _refuse_impossible(self, need: Need) -> None:
        """A need above the caps themselves would wait forever: say so at once."""
        if need.memory > self.caps.memory:
            raise HostBusy(
                f"a sandbox with {format_size(need.memory)} of memory can never fit under the "
                f"host cap of {format_size(self.caps.memory)} ({ENV_MAX_MEMORY})"
            )
        if need.cpus > self.caps.cpus + 1e-9 or self.caps.sandboxes < 1:
            raise HostBusy(
                f"a sandbox with {need.cpus:g} CPUs can never fit under the host cap of "
                f"{self.caps.cpus:g} CPUs and {self.caps.sandboxes} sandboxes "
                f"({ENV_MAX_CPUS}, {ENV_MAX_SANDBOXES})"
            )

    def _busy_message(self, usage: HostUsage, need: Need, wait_s: float) -> str:
        """Name the cap(s) that bind and the knobs that change them."""
        binding = []
        if usage.sandboxes + 1 > self.caps.sandboxes:
            binding.append(
                f"{usage.sandboxes} of {self.caps.sandboxes} sandboxes running "
                f"({ENV_MAX_SANDBOXES})"
            )
        if usage.memory + need.memory > self.caps.memory:
            binding.append(
                f"{format_size(usage.memory)} of {format_size(self.caps.memory)} "
                f"memory in use ({ENV_MAX_MEMORY})"
            )
        if usage.cpus + need.cpus > self.caps.cpus + 1e-9:
            binding.append(f"{usage.cpus:g} of {self.caps.cpus:g} CPUs in use ({ENV_MAX_CPUS})")
        if not binding:
            binding.append(f"{usage.waiting} earlier caller(s) queued ahead")
        return (
            "host busy: no sandbox slot freed within "
            f"{wait_s:g} s ({ENV_HOST_WAIT}): " + "; ".join(binding)
        )

    @staticmethod
    def _entry(ticket: str, need: Need) -> dict[str, Any]:
        return {
            "id": ticket,
            "pid": os.getpid(),
            "memory": need.memory,
            "cpus": need.cpus,
            "since": round(time.time(), 3),
        }

    def _forget(self, ticket: str) -> None:
        """Leave the queue (timeout, Ctrl-C): those behind must not wait for us."""
        with self._ledger() as state:
            before = len(state.queue)
            state.queue = [t for t in state.queue if t["id"] != ticket]
            state.dirty = state.dirty or len(state.queue) != before
        with self._released:
            self._released.notify_all()

    @contextmanager
    def _ledger(self) -> Iterator[_State]:
        """The ledger, locked against every thread and process; written back if changed."""
        with self._thread_lock:
            fd = self._lock_fd()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                state = self._load()
                state.prune()
                yield state
                if state.dirty:
                    self._save(state)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _lock_fd(self) -> int:
        if self._fd < 0:
            try:
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise SandboxError(
                    f"cannot open the capacity ledger in {self.directory}: {exc.strerror} "
                    f"(set {ENV_CAPACITY_DIR} to a writable directory)"
                ) from None
        return self._fd

    def _load(self) -> _State:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return _State()
        try:
            data = json.loads(raw)
            return _State(leases=dict(data["leases"]), queue=list(data["queue"]))
        except (ValueError, KeyError, TypeError):
            raise LedgerDamaged(
                f"capacity ledger {self.path} is damaged; remove it while no sbx process runs"
            ) from None

    def _save(self, state: _State) -> None:
        data = {"version": LEDGER_VERSION, "leases": state.leases, "queue": state.queue}
        temporary = self.path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(data, separators=(",", ":")))
        os.replace(temporary, self.path)

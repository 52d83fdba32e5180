"""`AuditLog`: append sealed records to a JSON Lines file shared by many processes.

Each append takes an exclusive `fcntl.flock` on the file, learns the last
record's `seq` and `hash` from the tail (a cached value when the file size has
not moved since our own last append; otherwise by reading backwards from the
end, never the whole file), writes the new lines and unlocks. The gate appends
before a tool runs and after it ends, so a crash leaves at worst an intent
without an outcome.

Group commit: the `fsync` happens after the unlock, and concurrent appends of
one process share it. An append returns only once an `fsync` that *started
after its write* has completed, so a record is on disk and chained when its
call returns, as before; the appends written while one `fsync` runs are all
covered by the next (one in flight at a time, started by whichever waiter
finds none running). Other processes may chain to a record written but not yet
synced; their own `fsync` flushes the whole file, ours included, before they
return. A failed `fsync` stops the log: every waiter and every later append
raises `AuditError` (the kernel may have dropped the unsynced pages).

A writer killed mid-append leaves a torn last line. The next writer does not
hide it: it ends the fragment with a newline and appends a `recover` record
carrying the fragment's length and SHA-256, chained to the last complete
record, so `verify_log` can account for every byte.

Path: `--audit-log`, else `SBX_AUDIT_LOG`, else the policy's `[audit] path`,
else `./sbx-audit.jsonl` (`resolve_audit_path`). Key: `SBX_AUDIT_KEY`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbx.sandbox.errors import SbxError
from sbx.tools.audit_chain import GENESIS, make_line
from sbx.tools.policy import AuditPolicy
from sbx.tools.redact import Redactor

DEFAULT_AUDIT_PATH = Path("sbx-audit.jsonl")
KEY_ENV = "SBX_AUDIT_KEY"
PATH_ENV = "SBX_AUDIT_LOG"
MIN_KEY_BYTES = 16
_TAIL_WINDOW = 64 * 1024


class AuditError(SbxError):
    """The audit log cannot be written or continued: no tool may run without its record."""


@dataclass(frozen=True)
class _Tail:
    """Where the chain stands: the next seq, the hash to chain to, a torn fragment if any."""

    next_seq: int
    prev: str
    size: int
    torn: bytes = b""


def resolve_audit_path(
    option: Path | None, policy_path: Path | None, environ: Mapping[str, str]
) -> Path:
    """`--audit-log` > `SBX_AUDIT_LOG` > policy `[audit] path` > `./sbx-audit.jsonl`."""
    if option is not None:
        return option
    if environ.get(PATH_ENV):
        return Path(environ[PATH_ENV])
    return policy_path or DEFAULT_AUDIT_PATH


def audit_key_from_env(environ: Mapping[str, str]) -> bytes | None:
    """The HMAC key from `SBX_AUDIT_KEY`, or None; a short key is refused, not weakened."""
    value = environ.get(KEY_ENV)
    if not value:
        return None
    key = value.encode("utf-8")
    if len(key) < MIN_KEY_BYTES:
        raise AuditError(f"{KEY_ENV} must be at least {MIN_KEY_BYTES} bytes long")
    return key


def open_audit_log(
    policy: AuditPolicy,
    *,
    option: Path | None,
    api_key: str | None,
    environ: Mapping[str, str],
) -> AuditLog:
    """Open the run's log as the CLI does: resolved path, key from the env, redaction set up."""
    key = audit_key_from_env(environ)
    redact = Redactor.build(
        secret_values=[api_key, key.decode() if key else None],
        secret_env=policy.secret_env,
        environ=environ,
        secret_fields=policy.secret_fields,
    )
    path = resolve_audit_path(option, policy.path, environ)
    return AuditLog.open(path, key=key, redact=redact)


def _jsonable(value: Any) -> Any:
    """Plain JSON types only (paths and models become strings; NaN and inf become strings)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


class AuditLog:
    """An open audit log file; thread-safe, and safe to share between processes."""

    def __init__(self, *, path: Path, fd: int, key: bytes | None, redact: Redactor) -> None:
        self.path = path
        self._fd = fd
        self._key = key
        self._redact = redact
        self._lock = threading.Lock()
        """Serialises this process's appends (and `close`); never held during an fsync."""
        self._cache: _Tail | None = None
        self._synced = threading.Condition()
        """Guards the commit counters below; waiters sleep on it until their append is durable."""
        self._written = 0
        """Appends of this process whose bytes are in the file (a ticket per append)."""
        self._durable = 0
        """Appends covered by a completed fsync that started after they were written."""
        self._syncing = False
        self._failed: str | None = None
        """Why the log stopped (a failed fsync); every later append raises it."""
        self.syncs = 0
        """fsyncs this process ran on the log (`sbx bench` shows appends per fsync)."""

    @classmethod
    def open(cls, path: Path, *, key: bytes | None, redact: Redactor) -> AuditLog:
        """Open (creating, mode 0600) the log for appending."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise AuditError(f"cannot open audit log {path}: {exc.strerror}") from None
        return cls(path=path, fd=fd, key=key, redact=redact)

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Sync what was written, close the file; later appends raise `AuditError`."""
        with self._lock, self._synced:
            while self._syncing:  # the fsync in flight uses the descriptor
                self._synced.wait()
            if self._fd < 0:
                return
            if self._durable < self._written and self._failed is None:
                try:
                    self.syncs += 1
                    os.fsync(self._fd)
                    self._durable = self._written
                except OSError as exc:
                    self._failed = self._sync_failure(exc)
            self._synced.notify_all()
            os.close(self._fd)
            self._fd = -1

    def record(self, run_id: str, event: str, data: Mapping[str, Any]) -> int:
        """Append one event; return its seq."""
        return self.record_many(run_id, [(event, data)])

    def record_many(self, run_id: str, events: Sequence[tuple[str, Mapping[str, Any]]]) -> int:
        """Append events as one locked write; return the last seq once they are on disk."""
        payloads = [(event, self._redact.redact(_jsonable(data))) for event, data in events]
        with self._lock:
            if self._fd < 0:
                raise AuditError(f"audit log {self.path} is closed")
            if self._failed is not None:
                raise AuditError(self._failed)
            try:
                seq = self._append_locked(run_id, payloads)
            except OSError as exc:
                raise AuditError(f"cannot write audit log {self.path}: {exc.strerror}") from None
            self._written += 1
            ticket = self._written
        self._wait_durable(ticket)
        return seq

    def _wait_durable(self, ticket: int) -> None:
        """Return once an fsync covering append `ticket` completed; run one if none is running.

        The fsync runs outside every lock, so appends keep landing while it
        runs; the next one covers them all (group commit).
        """
        with self._synced:
            while self._durable < ticket:
                if self._failed is not None:
                    raise AuditError(self._failed)
                if self._syncing:
                    self._synced.wait()
                    continue
                self._syncing = True
                covered, fd = self._written, self._fd  # every ticket counted is fully written
                self._synced.release()
                failure: OSError | None = None
                try:
                    os.fsync(fd)
                except OSError as exc:
                    failure = exc
                finally:
                    self._synced.acquire()
                    self._syncing = False
                    self._synced.notify_all()
                self.syncs += 1
                if failure is not None:
                    self._failed = self._sync_failure(failure)
                else:
                    self._durable = max(self._durable, covered)

    def _sync_failure(self, exc: OSError) -> str:
        return (
            f"cannot sync audit log {self.path}: {exc.strerror}; records since the last sync "
            "may be lost: run `sbx audit verify` and open the log again"
        )

    def _append_locked(self, run_id: str, payloads: list[tuple[str, Any]]) -> int:
        """Under the thread lock: flock, read the tail, write, unlock (the fsync comes after)."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            tail = self._tail()
            chunks: list[bytes] = []
            seq, prev = tail.next_seq, tail.prev
            if tail.torn:
                chunks.append(b"\n")
                recover = {"torn_bytes": len(tail.torn), "torn_sha256": _sha(tail.torn)}
                payloads = [("recover", recover), *payloads]
            for event, data in payloads:
                line, prev = make_line(
                    seq=seq, prev=prev, run_id=run_id, event=event, data=data,
                    key=self._key, pid=os.getpid(),
                )
                chunks.append(line)
                seq += 1
            blob = b"".join(chunks)
            _write_all(self._fd, blob)
            self._cache = _Tail(next_seq=seq, prev=prev, size=os.fstat(self._fd).st_size)
            return seq - 1
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _tail(self) -> _Tail:
        """The chain's end: from the cache when nobody appended since, else from the file."""
        size = os.fstat(self._fd).st_size
        if self._cache is not None and self._cache.size == size:
            return self._cache
        return read_tail(self._fd, size)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte (os.write may write fewer)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_tail(fd: int, size: int) -> _Tail:
    """Read backwards from the end until the last complete line is found; parse its seal."""
    if size == 0:
        return _Tail(next_seq=0, prev=GENESIS, size=0)
    window = _TAIL_WINDOW
    while True:
        start = max(0, size - window)
        data = os.pread(fd, size - start, start)
        cut = data.rfind(b"\n")
        torn = data[cut + 1 :]
        body = data[:cut]
        begin = body.rfind(b"\n")
        if cut >= 0 and (begin >= 0 or start == 0):
            return _parse_last(body[begin + 1 :], size, torn)
        if cut < 0 and start == 0:
            return _Tail(next_seq=0, prev=GENESIS, size=size, torn=torn)
        window *= 4


def _parse_last(line: bytes, size: int, torn: bytes) -> _Tail:
    """Seq and hash of the last complete record; a damaged one stops all writing."""
    try:
        record = json.loads(line)
        seq, prev = int(record["seq"]), str(record["hash"])
        return _Tail(next_seq=seq + 1, prev=prev, size=size, torn=torn)
    except (ValueError, KeyError, TypeError):
        raise AuditError(
            "the audit log's last record is damaged; run `sbx audit verify` before writing more"
        ) from None

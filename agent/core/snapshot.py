"""Snapshots: a conversation's state taken by value inside its sandbox, so a restore replays less.

When a conversation's sandbox is released for idleness (the moment costs the
user nothing: nobody is waiting), the workspace first runs one more cell in
it: `snapshot_kernel.py`, which pickles the interpreter's variables with
cloudpickle (DataFrames, arrays, fitted models, the functions the cells
defined) and the files the cells wrote in `/work` and `/tmp`, and writes them
to `/output` under a name of its own. The host copies that file out like an
artifact, into a directory of the workspace's own, and keeps it as opaque
bytes with their SHA-256 (`Snapshot`): the host never unpickles it.

The next question's restore (`sbx.agent.core.restore`) loads it in the new
sandbox of the same conversation, which shows the workspace's state directory
read-only at `/data/sbx-state`: the load cell checks the digest again inside,
puts the files back and the variables into the namespace, and the replay runs
only the cells the snapshot could not hold: those after it, and those that
assign a name that could not be pickled. The output comparison of those
cells stays the check, and replay of every cell stays the fallback when the
snapshot is missing, larger than `[restore] snapshot_bytes`, does not match
its digest, belongs to another principal, does not match the conversation's
record, or fails to load.

Costs: the dump's CPU and the load's are work of the run that restores from
it (added to its replay's usage); the file is held for the conversation's
life and removed with it; the service counts it in `storage_bytes`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sbx.agent.core.artifacts import file_sha256
from sbx.agent.core.state import SandboxUsage

STATE_DIR = "sbx-state"
"""The workspace's state directory, shown read-only at `/data/sbx-state` in later sandboxes."""
STATE_FILE = "snapshot"
DUMP_NAME = "sbx-snapshot.bin"
"""What the dump cell writes in `/output` (copied into the workspace's incoming directory)."""
REPORT = "SBX-SNAPSHOT "
"""How the dump's and the load's one line of JSON begins (`snapshot_kernel.REPORT`)."""
DUMP_TIMEOUT_S = 5.0
"""Longest a dump may take (the housekeeping that releases idle sandboxes waits for it); a
state slower to pickle is restored by replay. A dump cut short kills only an interpreter
that is being released anyway."""
MAX_UNHELD = 1000
"""Most unpicklable names a report may list (it comes from the sandbox: bounded)."""
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,199}$")
_KERNEL = Path(__file__).with_name("snapshot_kernel.py")


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """A conversation's state as the host holds it: opaque bytes and what they stand for."""

    principal: str
    """Whose sandbox made it: only a sandbox of the same principal loads it."""
    path: Path
    """The bytes, on the host (never unpickled here)."""
    sha256: str
    size: int
    cells: tuple[str, ...]
    """The call ids of the cells whose state it holds, in order (a prefix of the record)."""
    unheld: tuple[str, ...] = ()
    """Variables it could not pickle: the cells that assign them are replayed."""
    usage: SandboxUsage = field(default_factory=SandboxUsage)
    """What taking it used in the sandbox: charged to the run that restores from it."""
    loaded: tuple[str, ...] = ()
    """The modules of `[restore] preimport` whose package the conversation had imported (the
    dump's report, each checked against that list): its restore wants them ready."""


def cell(action: str, **arguments: object) -> str:
    """The cell that runs `snapshot_kernel.py` on the kernel's namespace, binding no name."""
    args: dict[str, Any] = {"action": action, **arguments}
    return (f"exec(compile({_KERNEL.read_text()!r}, '<sbx-snapshot>', 'exec'), "
            f"{{'__name__': 'sbx_snapshot', 'NAMESPACE': globals(), 'ARGS': {args!r}}})")


def dump_cell(limit: int, modules: tuple[str, ...] = ()) -> str:
    """The cell that writes the snapshot to `/output/DUMP_NAME`, or nothing past `limit` bytes.

    Its report also says which of `modules` have their package imported in the kernel.
    """
    return cell("dump", limit=limit, target=f"/output/{DUMP_NAME}", modules=list(modules))


def load_cell(snapshot: Snapshot) -> str:
    """The cell that loads the snapshot shown at `/data/sbx-state`, checking its digest first."""
    return cell("load", source=f"/data/{STATE_DIR}/{STATE_FILE}", sha256=snapshot.sha256)


def report_of(stdout: str) -> dict[str, Any] | None:
    """The dump's or the load's report, from what the cell printed (untrusted: checked)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(REPORT):
            try:
                value = json.loads(line[len(REPORT):])
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def loaded_of(report: dict[str, Any], modules: tuple[str, ...]) -> tuple[str, ...]:
    """The report's loaded modules that are among `modules` (what the host asked about)."""
    names = report.get("loaded")
    if not isinstance(names, list):
        return ()
    return tuple(name for name in modules if name in names[:len(modules)])


def unheld_of(report: dict[str, Any]) -> tuple[str, ...]:
    """The report's unpicklable names that are names at all, at most `MAX_UNHELD`."""
    names = report.get("unheld")
    if not isinstance(names, list):
        return ()
    return tuple(n for n in names[:MAX_UNHELD] if isinstance(n, str) and _NAME.match(n))


class Ran(Protocol):
    """What a dump needs of an execution's result (`sbx.sandbox.result.ExecutionResult`)."""

    stdout: str
    duration_s: float
    cpu_seconds: float | None
    peak_memory_bytes: int | None

    @property
    def ok(self) -> bool:
        """It ran to completion without an error, timeout or kill."""


class Dumping(Protocol):
    """What a dump needs of a sandbox session (`sbx.sandbox.session.Session`)."""

    output_dir: Path
    artifact_bytes: int

    def run(self, code: str, *, timeout: float | None = None,
            show_values: bool | None = None) -> Ran:
        """Execute `code` in the session's interpreter."""


def take(session: Dumping, into: Path, *, principal: str, cells: tuple[str, ...],
         limit: int, modules: tuple[str, ...] = ()) -> Snapshot | str:
    """Run the dump cell in `session` and keep its file in `into`; the snapshot, or why not.

    The cell's output goes to an incoming directory beside `into`, so it is neither
    the run's artifact nor counted in the session's artifact bytes. `modules`: the ones
    to report as loaded (`Snapshot.loaded`).
    """
    incoming = into.parent / f"incoming-{secrets.token_hex(4)}"
    output, written = session.output_dir, session.artifact_bytes
    session.output_dir = incoming
    try:
        result = session.run(dump_cell(limit, modules), timeout=DUMP_TIMEOUT_S,
                             show_values=False)
    finally:
        session.output_dir, session.artifact_bytes = output, written
    usage = SandboxUsage()
    usage.add(result.duration_s, result.cpu_seconds, result.peak_memory_bytes)
    dumped = Dumped(ok=result.ok, stdout=result.stdout, file=incoming / DUMP_NAME, usage=usage)
    snapshot, why = settle(dumped, into, principal=principal, cells=cells, limit=limit,
                           modules=modules)
    return snapshot if snapshot is not None else why


@dataclass(frozen=True, kw_only=True)
class Dumped:
    """What the dump cell came to, as the workspace's session reported it."""

    ok: bool
    """The cell ran without error."""
    stdout: str
    file: Path
    """Where its file landed on the host (if it wrote one)."""
    usage: SandboxUsage


def settle(dumped: Dumped, into: Path, *, principal: str, cells: tuple[str, ...],
           limit: int, modules: tuple[str, ...] = ()) -> tuple[Snapshot | None, str]:
    """Keep a dump's file as the workspace's snapshot (in `into`), or say why not."""
    report = report_of(dumped.stdout) if dumped.ok else None
    try:
        if report is None or report.get("ok") is not True:
            why = str(report.get("reason", "")) if report else "the dump cell failed"
            return None, why[:300] or "the dump cell failed"
        size = dumped.file.stat().st_size if dumped.file.is_file() else -1
        if size < 0 or size > limit:
            return None, "no snapshot file" if size < 0 else f"over {limit} bytes"
        digest = file_sha256(dumped.file)
        if digest is None:
            return None, "the snapshot file could not be read"
        target = into / STATE_FILE
        os.replace(dumped.file, target)
        target.chmod(0o444)
        return Snapshot(principal=principal, path=target, sha256=digest, size=size, cells=cells,
                        unheld=unheld_of(report), usage=dumped.usage,
                        loaded=loaded_of(report, modules)), ""
    finally:
        shutil.rmtree(dumped.file.parent, ignore_errors=True)


def refusal(snapshot: Snapshot, *, principal: str, cells: list[str], limit: int) -> str | None:
    """Why `snapshot` must not be loaded for a conversation of `principal` with `cells`, or None.

    Checked on the host before the load (which checks the digest again inside).
    """
    held = len(snapshot.cells)
    if snapshot.principal != principal:
        return "it was taken for another principal"
    if tuple(cells[:held]) != snapshot.cells:
        return "it does not match the conversation's record"
    if snapshot.size > limit:
        return f"it is larger than snapshot_bytes ({limit} bytes)"
    try:
        size = snapshot.path.stat().st_size
    except OSError:
        return "it is missing"
    if size != snapshot.size or file_sha256(snapshot.path) != snapshot.sha256:
        return "it does not match its digest"
    return None

"""E2B's file paths and errors over the door's file operations (`sbx.agent.file_op`).

E2B's home, `/home/user`, is the sandbox's writable working directory
`/work` (a size-limited tmpfs); relative paths are relative to it. Other
paths are taken as they are, and the container's walls decide. Each
operation waits for the sandbox's running execution (its turn), so its
output never joins that execution's stream.
"""

from __future__ import annotations

from typing import Any

from sbx.agent import FileOpError
from sbx.agent.e2b.host import Refused
from sbx.agent.e2b.sandboxes import E2bSandbox

HOME = "/home/user"
WORK = "/work"
STATUS = {"not_found": 404, "exists": 409, "invalid": 400, "unfinished": 502}
"""envd's HTTP status for each failure (404 is the SDK's `FileNotFoundException`)."""


def inside(path: str) -> str:
    """The sandbox's path for an E2B path (`/home/user` is `/work`)."""
    if path == HOME or path.startswith(HOME + "/"):
        return WORK + path[len(HOME):]
    if not path.startswith("/"):
        return f"{WORK}/{path}" if path else WORK
    return path


def outside(path: str) -> str:
    """The E2B path for a sandbox path (the reverse of `inside`)."""
    if path == WORK or path.startswith(WORK + "/"):
        return HOME + path[len(WORK):]
    return path


def run(sandbox: E2bSandbox, op: Any, path: str, **args: Any) -> Any:
    """One file operation at an E2B path; its value, or `Refused` with envd's status."""
    try:
        return sandbox.file(op, inside(path), **args)
    except FileOpError as exc:
        raise Refused(STATUS[exc.failure], outside(str(exc))) from None


def read(sandbox: E2bSandbox, path: str) -> bytes:
    """The bytes at `path`."""
    data: bytes = run(sandbox, "read", path)
    return data


def write(sandbox: E2bSandbox, path: str, data: bytes) -> dict[str, Any]:
    """Write `data` at `path` (parents made); the written entry."""
    entry: dict[str, Any] = run(sandbox, "write", path, data=data)
    return entry

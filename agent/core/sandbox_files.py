"""Files in a tool session's sandbox, through its gate: read, write, stat, list, make, move, remove.

sbx's one channel into a running sandbox is its code runner, so each file
operation is a small program run as the session's `execute_python`: the
policy must allow it, the audit log records it under the session's
principal, the face's recorder counts it as a run (quotas, budgets), and the
session's journal keeps it, so it is replayed with the session's other
executions after a reset (a file written before an idle release is there
after it). The program runs in a namespace of its own (`exec` in a fresh
dict), leaving the caller's variables alone, and prints one marked JSON line
that is read back here. Paths are the sandbox's own; the container's walls
decide what may be written (`/work`, `/tmp` and `/output`; `/data` is
read-only). Sizes are bounded by the policy: the code's `max_code_bytes` for
a write, the stdout cap for a read.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Literal

from sbx.agent.core.tool_session import ToolSession
from sbx.sandbox.errors import SbxError

FileOp = Literal["read", "write", "stat", "list", "mkdir", "move", "remove"]
FileFailure = Literal["not_found", "exists", "invalid", "unfinished"]
MARK = "@@sbx-file-op@@ "
_PROGRAM = r'''
import base64, json, os, shutil, stat
def entry(p):
    s = os.lstat(p)
    kind = "dir" if stat.S_ISDIR(s.st_mode) else "file"
    return {"name": os.path.basename(p.rstrip("/")) or "/", "path": p, "type": kind,
            "size": s.st_size, "mode": stat.S_IMODE(s.st_mode), "mtime": s.st_mtime}
def run(op, a):
    p = a["path"]
    if op == "read":
        with open(p, "rb") as f:
            return base64.b64encode(f.read()).decode()
    if op == "write":
        os.makedirs(os.path.dirname(p) or ".", exist_ok=True)
        with open(p, "wb") as f:
            f.write(base64.b64decode(a["data"]))
        return entry(p)
    if op == "stat":
        return entry(p)
    if op == "list":
        found, top = [], p.rstrip("/") or "/"
        if not os.path.isdir(top):
            raise NotADirectoryError(20, "not a directory", top)
        for root, dirs, names in os.walk(top):
            found += [entry(os.path.join(root, n)) for n in sorted(dirs + names)]
            if root[len(top):].count("/") + 1 >= a["depth"]:
                dirs[:] = []
        return found
    if op == "mkdir":
        if os.path.isdir(p):
            return None
        os.makedirs(p)
        return entry(p)
    if op == "move":
        os.rename(p, a["to"])
        return entry(a["to"])
    if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p)
    else:
        os.remove(p)
try:
    out = {"ok": True, "value": run(OP, ARGS)}
except FileNotFoundError as e:
    out = {"ok": False, "failure": "not_found", "message": f"{e.filename}: no such file"}
except FileExistsError as e:
    out = {"ok": False, "failure": "exists", "message": f"{e.filename}: it exists"}
except OSError as e:
    out = {"ok": False, "failure": "invalid", "message": f"{e.filename}: {e.strerror or e}"}
print(MARK + json.dumps(out))
'''


class FileOpError(SbxError):
    """A file operation in a sandbox did not happen: no such file, it exists, refused..."""

    def __init__(self, failure: FileFailure, message: str) -> None:
        super().__init__(message)
        self.failure = failure


def file_op(session: ToolSession, op: FileOp, path: str, **args: Any) -> Any:
    """One file operation in the session's sandbox (blocking, thread-safe); its value.

    Values: `read` the file's bytes base64-encoded; `write`, `stat`, `mkdir`, `move`
    an entry (name, path, type "file" or "dir", size, mode, mtime), `mkdir` None when
    the directory exists; `list` the entries `depth` levels down; `remove` None.
    Raises `FileOpError`, and whatever the session's call raises (a face's refusal).
    """
    if "\x00" in path:
        raise FileOpError("invalid", "a path may not contain NUL")
    namespace = {"OP": op, "ARGS": {"path": path, **args}, "MARK": MARK}
    report = session.call("execute_python", {"code": f"exec({_PROGRAM!r}, {namespace!r})\n"})
    execution = report.outcome.execution
    marked = [] if execution is None else [
        line for line in execution.stdout.splitlines() if line.startswith(MARK)]
    if not marked:
        raise FileOpError("unfinished", "the file operation did not finish: "
                          + report.outcome.text[:300])
    answer = json.loads(marked[-1][len(MARK):])
    if not answer["ok"]:
        raise FileOpError(answer["failure"], str(answer["message"]))
    return answer["value"]


def read_file(session: ToolSession, path: str) -> bytes:
    """The bytes of the file at `path` in the session's sandbox."""
    return base64.b64decode(file_op(session, "read", path))


def write_file(session: ToolSession, path: str, data: bytes) -> dict[str, Any]:
    """Write `data` at `path` (its parents made); the written entry."""
    entry: dict[str, Any] = file_op(session, "write", path,
                                    data=base64.b64encode(data).decode())
    return entry

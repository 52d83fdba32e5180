"""File operations of E2B's SDK as small programs run in the sandbox, through the gate.

sbx has no file channel into a running sandbox beside its code runner, so
each operation is a program of its own: audited like any execution, counted
as a run of the key, replayed with the others after an idle release (a file
written before a pause is there after the resume). The program runs in a
namespace of its own (`exec` in a fresh dict), so the user's variables are
untouched, and prints one marked JSON line that the face reads back.

E2B's home, `/home/user`, is the sandbox's writable working directory
`/work` (a size-limited tmpfs); relative paths are relative to it. Other
paths are taken as they are, and the container's walls decide (`/tmp` and
`/output` are writable, `/data` read-only, the rest read-only).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from sbx.agent.e2b.host import Refused
from sbx.agent.e2b.sandboxes import E2bSandbox

HOME = "/home/user"
WORK = "/work"
MARK = "@@sbx-e2b@@ "
_PROGRAM = r'''
import base64, json, os, shutil, stat
def entry(p):
    s = os.lstat(p)
    kind = "dir" if stat.S_ISDIR(s.st_mode) else "file"
    return {"name": os.path.basename(p.rstrip("/")) or "/", "path": p, "type": kind,
            "size": s.st_size, "mode": stat.S_IMODE(s.st_mode), "mtime": s.st_mtime,
            "symlink": os.path.islink(p)}
def run(op, a):
    p = a.get("path")
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
        for root, dirs, names in os.walk(top):
            depth = root[len(top):].count("/") + 1
            for n in sorted(dirs + names):
                found.append(entry(os.path.join(root, n)))
            if depth >= a["depth"]:
                dirs[:] = []
        if not os.path.isdir(top):
            raise NotADirectoryError(top)
        return found
    if op == "mkdir":
        if os.path.isdir(p):
            return None
        os.makedirs(p)
        return entry(p)
    if op == "move":
        os.rename(p, a["to"])
        return entry(a["to"])
    if op == "remove":
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.remove(p)
        return None
try:
    out = {"ok": True, "value": run(OP, ARGS)}
except FileNotFoundError as e:
    out = {"ok": False, "status": 404, "message": f"{e.filename or ''}: no such file or directory"}
except FileExistsError as e:
    out = {"ok": False, "status": 409, "message": f"{e.filename or ''}: it exists"}
except OSError as e:
    out = {"ok": False, "status": 400, "message": f"{e.filename or ''}: {e.strerror or e}"}
print(MARK + json.dumps(out))
'''


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


def run(sandbox: E2bSandbox, op: str, path: str, **args: Any) -> Any:
    """One file operation in `sandbox` (blocking); its value, or `Refused` with E2B's status."""
    if "\x00" in path:
        raise Refused(400, "a path may not contain NUL")
    namespace = {"OP": op, "ARGS": {"path": inside(path), **args}, "MARK": MARK}
    code = f"exec({_PROGRAM!r}, {namespace!r})\n"
    outcome = sandbox.python(code)
    execution = outcome.execution
    lines = [] if execution is None else [
        line for line in execution.stdout.splitlines() if line.startswith(MARK)]
    if not lines:
        raise Refused(502, "the file operation did not finish: " + outcome.text[:300])
    answer = json.loads(lines[-1][len(MARK):])
    if not answer["ok"]:
        raise Refused(int(answer["status"]), outside(str(answer["message"])))
    return answer["value"]


def write(sandbox: E2bSandbox, path: str, data: bytes) -> dict[str, Any]:
    """Write `data` at `path` (parents made); the written entry."""
    value: dict[str, Any] = run(sandbox, "write", path, data=base64.b64encode(data).decode())
    return value


def read(sandbox: E2bSandbox, path: str) -> bytes:
    """The bytes at `path`."""
    return base64.b64decode(run(sandbox, "read", path))

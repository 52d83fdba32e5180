"""E2B's file paths and errors over the door's file operations, and envd's `/files`.

E2B's home, `/home/user`, is a size-limited tmpfs in every sbx sandbox, and
an E2B sandbox's code starts there; relative paths are relative to it. Other
paths are taken as they are, and the container's walls decide. Each
operation waits for the sandbox's running execution (its turn), so its
output never joins that execution's stream.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sbx.agent import FileOpError
from sbx.agent.e2b.sandboxes import E2bSandbox, Refused

HOME = "/home/user"
STATUS = {"not_found": 404, "exists": 409, "invalid": 400, "unfinished": 502}
"""envd's HTTP status for each failure (404 is the SDK's `FileNotFoundException`)."""


def inside(path: str) -> str:
    """The sandbox's path for an E2B path: a relative one is under `/home/user`."""
    if not path.startswith("/"):
        return f"{HOME}/{path}" if path else HOME
    return path


def run(sandbox: E2bSandbox, op: Any, path: str, **args: Any) -> Any:
    """One file operation at an E2B path; its value, or `Refused` with envd's status."""
    try:
        return sandbox.file(op, inside(path), **args)
    except FileOpError as exc:
        raise Refused(STATUS[exc.failure], str(exc)) from None


async def read_file(request: Request, sandbox: E2bSandbox) -> Response:
    """Envd's `GET /files?path=`: the file's bytes."""
    path = request.query_params.get("path", "")
    return Response(await run_in_threadpool(run, sandbox, "read", path),
                    media_type="application/octet-stream")


async def write_files(request: Request, sandbox: E2bSandbox) -> Response:
    """Envd's `POST /files`: each multipart file written at its name (or `?path=` for one)."""
    form = await request.form()
    written = []
    uploads = [value for _, value in form.multi_items() if not isinstance(value, str)]
    for upload in uploads:
        path = request.query_params.get("path") if len(uploads) == 1 else None
        entry = await run_in_threadpool(run, sandbox, "write", path or upload.filename or "",
                                        data=await upload.read())
        written.append({"name": entry["name"], "type": "file", "path": entry["path"]})
    return JSONResponse(written)

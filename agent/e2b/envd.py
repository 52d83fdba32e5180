"""envd's side of the sandbox URL: `/files`, `/health`, and the filesystem and process RPC.

The RPC is served by the `e2b` package's own generated Connect stubs
(`FilesystemASGIApplication`, `ProcessASGIApplication`) over `connectrpc`,
so the messages are E2B's. Each filesystem call is a file program in the
sandbox (`files.py`). Processes (`sandbox.commands.run`, the PTY) are
refused: sbx runs Python through its gate and nothing else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Any, NoReturn

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext
from e2b.envd.filesystem import filesystem_pb as pb
from e2b.envd.filesystem.filesystem_connect import FilesystemASGIApplication
from e2b.envd.process.process_connect import ProcessASGIApplication
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sbx.agent.e2b import files
from sbx.agent.e2b.host import Refused
from sbx.agent.e2b.sandboxes import E2bSandbox

COMMANDS_REFUSED = (
    "sbx does not run shell commands in an E2B sandbox: its policy runs Python through the "
    "gate only ([tools.execute_python]); use run_code, or the files API for files"
)
CURRENT: ContextVar[E2bSandbox] = ContextVar("e2b_sandbox")
"""The sandbox of the RPC being served (set by the dispatcher before the stub runs)."""
_CODES = {404: Code.NOT_FOUND, 409: Code.ALREADY_EXISTS, 400: Code.INVALID_ARGUMENT,
          429: Code.RESOURCE_EXHAUSTED, 401: Code.UNAUTHENTICATED}


async def read_file(request: Request, sandbox: E2bSandbox) -> Response:
    """`GET /files?path=`: the file's bytes."""
    data = await run_in_threadpool(files.read, sandbox, request.query_params.get("path", ""))
    return Response(data, media_type="application/octet-stream")


async def write_files(request: Request, sandbox: E2bSandbox) -> Response:
    """`POST /files`: each multipart file written at its name (or `?path=` for one)."""
    form = await request.form()
    written = []
    uploads = [value for _, value in form.multi_items() if not isinstance(value, str)]
    for upload in uploads:
        path = request.query_params.get("path") if len(uploads) == 1 else None
        data = await upload.read()
        entry = await run_in_threadpool(files.write, sandbox, path or upload.filename or "",
                                        data)
        written.append({"name": entry["name"], "type": "file",
                        "path": files.outside(entry["path"])})
    return JSONResponse(written)


def _entry(value: dict[str, Any]) -> pb.EntryInfo:
    kind = pb.FileType.DIRECTORY if value["type"] == "dir" else pb.FileType.FILE
    return pb.EntryInfo(name=value["name"], type=kind, path=files.outside(value["path"]),
                        size=int(value["size"]), mode=int(value["mode"]),
                        permissions=oct(int(value["mode"])), owner="sandbox", group="sandbox")


async def _run(op: str, path: str, **args: Any) -> Any:
    try:
        return await run_in_threadpool(files.run, CURRENT.get(), op, path, **args)
    except Refused as exc:
        raise ConnectError(_CODES.get(exc.status, Code.UNKNOWN), exc.message) from None


class Filesystem:
    """envd's `filesystem.Filesystem`, each call a file program in the current sandbox."""

    async def stat(self, request: pb.StatRequest, ctx: RequestContext[Any, Any], /
                   ) -> pb.StatResponse:
        """One entry (a missing path: NOT_FOUND, which the SDK's `exists` reads as False)."""
        return pb.StatResponse(entry=_entry(await _run("stat", request.path)))

    async def make_dir(self, request: pb.MakeDirRequest, ctx: RequestContext[Any, Any], /
                       ) -> pb.MakeDirResponse:
        """A directory and its parents; ALREADY_EXISTS when it is there (the SDK: False)."""
        value = await _run("mkdir", request.path)
        if value is None:
            raise ConnectError(Code.ALREADY_EXISTS, f"{request.path}: it exists")
        return pb.MakeDirResponse(entry=_entry(value))

    async def move(self, request: pb.MoveRequest, ctx: RequestContext[Any, Any], /
                   ) -> pb.MoveResponse:
        """A rename within the sandbox."""
        value = await _run("move", request.source, to=files.inside(request.destination))
        return pb.MoveResponse(entry=_entry(value))

    async def list_dir(self, request: pb.ListDirRequest, ctx: RequestContext[Any, Any], /
                       ) -> pb.ListDirResponse:
        """The entries under a directory, `depth` levels down."""
        values = await _run("list", request.path, depth=max(1, request.depth))
        return pb.ListDirResponse(entries=[_entry(value) for value in values])

    async def remove(self, request: pb.RemoveRequest, ctx: RequestContext[Any, Any], /
                     ) -> pb.RemoveResponse:
        """A file, or a directory with what it holds."""
        await _run("remove", request.path)
        return pb.RemoveResponse()

    def watch_dir(self, request: Any, ctx: Any, /) -> AsyncIterator[Any]:
        """Not served: sbx has no file events."""
        _unsupported("watching a directory")

    async def create_watcher(self, request: Any, ctx: Any, /) -> Any:
        """Not served."""
        _unsupported("watching a directory")

    async def get_watcher_events(self, request: Any, ctx: Any, /) -> Any:
        """Not served."""
        _unsupported("watching a directory")

    async def remove_watcher(self, request: Any, ctx: Any, /) -> Any:
        """Not served."""
        _unsupported("watching a directory")


class Processes:
    """envd's `process.Process`: every call refused with the sentence naming the policy."""

    async def start(self, request: Any, ctx: Any, /) -> AsyncIterator[Any]:
        """`commands.run`: refused before anything runs."""
        raise ConnectError(Code.PERMISSION_DENIED, COMMANDS_REFUSED)
        yield  # an async generator, as a streaming RPC is served

    connect = start

    def __getattr__(self, name: str) -> Any:
        async def refused(request: Any, ctx: Any, /) -> NoReturn:
            raise ConnectError(Code.PERMISSION_DENIED, COMMANDS_REFUSED)
        return refused


def _unsupported(what: str) -> NoReturn:
    raise ConnectError(Code.UNIMPLEMENTED, f"{what} is not supported by sbx's E2B face")


FILESYSTEM = FilesystemASGIApplication(Filesystem())  # type: ignore[arg-type]
PROCESS = ProcessASGIApplication(Processes())

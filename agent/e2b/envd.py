"""envd's RPC on the sandbox URL: the filesystem and process services.

The RPC is served by the `e2b` package's own generated Connect stubs
(`FilesystemASGIApplication`, `ProcessASGIApplication`) over `connectrpc`,
so the messages are E2B's. Each filesystem call is a file program in the
sandbox (`files.py`). A command (`sandbox.commands.run`) is sbx's
`run_command` tool, refused unless the operator's policy enables it.
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any, NoReturn

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext
from e2b.envd.filesystem import filesystem_pb as pb
from e2b.envd.filesystem.filesystem_connect import FilesystemASGIApplication
from e2b.envd.process import process_pb as ppb
from e2b.envd.process.process_connect import ProcessASGIApplication
from protobuf import Oneof
from starlette.concurrency import run_in_threadpool

from sbx.agent import CallReport, streamed
from sbx.agent.e2b import files
from sbx.agent.e2b.sandboxes import E2bSandbox, Refused

COMMANDS_REFUSED = (
    "shell commands are off in this sbx: the operator's policy enables them with "
    "[tools.run_command] enabled = true; use run_code, or the files API for files"
)
CURRENT: ContextVar[E2bSandbox] = ContextVar("e2b_sandbox")
"""The sandbox of the RPC being served (set by the dispatcher before the stub runs)."""
_CODES = {404: Code.NOT_FOUND, 409: Code.ALREADY_EXISTS, 400: Code.INVALID_ARGUMENT,
          429: Code.RESOURCE_EXHAUSTED, 401: Code.UNAUTHENTICATED}


def _entry(value: dict[str, Any]) -> pb.EntryInfo:
    kind = pb.FileType.DIRECTORY if value["type"] == "dir" else pb.FileType.FILE
    return pb.EntryInfo(name=value["name"], type=kind, path=value["path"],
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

    def __getattr__(self, name: str) -> Any:
        """Watching a directory (`watch_dir`, the watchers) is not served: no file events."""
        return _unsupported("watching a directory")


class Processes:
    """envd's `process.Process`: `commands.run` as sbx's `run_command`, when the policy allows.

    A command runs to its end in its turn; its output is streamed as it comes. Connecting
    to it later, its input and signals are not served (`list` shows none running).
    """

    async def start(self, request: ppb.StartRequest, ctx: RequestContext[Any, Any], /
                    ) -> AsyncIterator[ppb.StartResponse]:
        """`commands.run`: the start, the output as it comes, the end with the exit code."""
        sandbox = CURRENT.get()
        if request.pty is not None:
            _unsupported("a PTY")(request, ctx)
        if not sandbox.allows("run_command"):
            raise ConnectError(Code.PERMISSION_DENIED, COMMANDS_REFUSED)
        config = request.process or ppb.ProcessConfig()
        line = shlex.join([config.cmd, *config.args])

        def run(on_output: Any, on_start: Any) -> CallReport:
            return sandbox.command(line, cwd=files.inside(config.cwd or files.HOME),
                                   envs=dict(config.envs), on_output=on_output,
                                   on_start=on_start)

        taken = {"stdout": 0, "stderr": 0}
        try:
            async for kind, value in streamed(run, sandbox.cancel_running):
                if kind == "started":
                    yield _event("start", ppb.ProcessEvent.StartEvent(pid=1))
                elif kind in taken:
                    taken[kind] += len(value)
                    yield _data(kind, value)
                else:
                    for event in _ended(value, taken):
                        yield event
        except Refused as exc:
            raise ConnectError(_CODES.get(exc.status, Code.UNKNOWN), exc.message) from None

    async def list(self, request: Any, ctx: Any, /) -> ppb.ListResponse:
        """None running between calls: each command ran to its end."""
        return ppb.ListResponse()

    def __getattr__(self, name: str) -> Any:
        """Connecting to a command, its input and signals are not served."""
        return _unsupported("connecting to a command, its input and signals")


def _event(kind: str, value: Any) -> ppb.StartResponse:
    event: Any = Oneof(kind, value)  # the oneof's name is one of the message's fields
    return ppb.StartResponse(event=ppb.ProcessEvent(event=event))


def _data(stream: str, text: str) -> ppb.StartResponse:
    output: Any = Oneof(stream, text.encode())  # "stdout" or "stderr"
    return _event("data", ppb.ProcessEvent.DataEvent(output=output))


def _ended(report: CallReport, taken: dict[str, int]) -> list[ppb.StartResponse]:
    """What came only with the result (a quick command's output), then the end."""
    execution = report.outcome.execution
    if execution is None:  # the gate refused it, or it failed before running
        end = ppb.ProcessEvent.EndEvent(exit_code=-1, status="error", error=report.outcome.text)
        return [_event("end", end)]
    tails = [_data(stream, text[taken[stream]:]) for stream, text in
             (("stdout", execution.stdout), ("stderr", execution.stderr)) if text[taken[stream]:]]
    killed = execution.timed_out or execution.oom_killed or execution.state_reset
    error = ("; ".join(execution.notes) or report.outcome.text[:500]) if killed else None
    end = ppb.ProcessEvent.EndEvent(exit_code=execution.exit_code, exited=True,
                                    status=f"exit status {execution.exit_code}", error=error)
    return [*tails, _event("end", end)]


def _unsupported(what: str) -> Callable[..., NoReturn]:
    """A handler refusing any call, unary or streaming (it raises as it is called)."""
    def refused(request: Any, ctx: Any, /) -> NoReturn:
        raise ConnectError(Code.UNIMPLEMENTED, f"{what} is not supported by sbx's E2B face")
    return refused


FILESYSTEM = FilesystemASGIApplication(Filesystem())
PROCESS = ProcessASGIApplication(Processes())

"""The MCP tools: each call goes to the caller's session, and through its gate.

`execute_python`, `list_data_files` and `preview_data_file` are sbx's own
built-in tools: the arguments are handed to the session's `ToolGate` as
they came (it validates them again, applies the policy and the quotas, and
audits request, decision and outcome), and its `ToolOutcome.text`, the
observation sbx's own agent reads, is what the client's model reads. A
denial or a tool error comes back as a tool result with `isError`, so the
calling model can read it and adapt. `reset_sandbox` only removes the
caller's own sandbox; it is audited as a `sandbox_reset` record.

Executions run on a worker thread while this side sends progress
notifications (elapsed seconds against the time limit, and the newest line
printed, through the session's data guard like every text sent to the client). A cancellation from
the client marks the call `cancelled` at the gate and removes the sandbox
(the code dies with it) before the handler gives up; the next call runs in
a fresh sandbox and says so. One execution runs at a time per session; a
call waiting its turn is cancelled without touching the running one.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ContentBlock, TextContent, ToolAnnotations
from pydantic import Field

from sbx.agent import AuditError, Caller, CallReport, SandboxError, SessionClosed, SessionRefused
from sbx.agent.mcp.artifacts import artifact_blocks
from sbx.agent.mcp.describe import Descriptions
from sbx.agent.mcp.tool_session import McpSession
from sbx.agent.mcp.tool_sessions import McpSessions

logger = logging.getLogger(__name__)

SessionKey = Callable[[Context[Any, Any]], Caller]
"""Who sends a request and which session it belongs to, as the face knows it from the
transport and its authentication (never from a tool argument)."""
PROGRESS_INTERVAL_S = 1.0
"""Seconds between progress notifications while code runs."""
SETTLE_S = 10.0
"""Seconds a cancelled call's thread is waited for once its sandbox is removed."""
OPERATOR_ERROR = (
    "sbx could not run this call: {error}. This is for the operator to fix (Docker, the "
    "sandbox image, host capacity or the audit log); this session's calls are halted."
)

_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
OPERATOR_ERRORS = (SandboxError, AuditError, SessionClosed)
"""Raised through a tool call: the operator must act; the client gets a readable error."""
_Handler = Callable[..., Awaitable[CallToolResult]]


def register_tools(
    server: MCPServer[Any], sessions: McpSessions, key: SessionKey, texts: Descriptions
) -> None:
    """Add the four tools to `server`, each bound to the caller's session."""
    timeout_s = sessions.app.config.limits.timeout

    async def execute_python(
        code: Annotated[str, Field(description="A complete Python program (not a shell command).")],
        ctx: Context[Any, Any],
    ) -> CallToolResult:
        session = sessions.get(key(ctx))
        async with session.turn:
            report = await _execute(session, code, ctx, timeout_s)
        return result_of(report, session)

    async def list_data_files(ctx: Context[Any, Any]) -> CallToolResult:
        session = sessions.get(key(ctx))
        return result_of(await call_host_tool(session, "list_data_files", {}), session)

    async def preview_data_file(
        name: Annotated[str, Field(description="A name exactly as list_data_files shows it.")],
        ctx: Context[Any, Any],
        rows: Annotated[int, Field(ge=1, description="How many rows (or lines) to show.")] = 10,
    ) -> CallToolResult:
        session = sessions.get(key(ctx))
        arguments = {"name": name, "rows": rows}
        return result_of(await call_host_tool(session, "preview_data_file", arguments), session)

    async def reset_sandbox(ctx: Context[Any, Any]) -> CallToolResult:
        session = sessions.get(key(ctx))
        async with session.turn:
            reset = partial(session.discard, "the client called reset_sandbox", forget=True)
            lost = await anyio.to_thread.run_sync(reset)
        if not lost:
            return text_result("Nothing to reset: no code has run in this session's sandbox yet.")
        return text_result(
            "The sandbox was reset: its variables, imports and files are gone; the next "
            "execute_python call starts in a fresh one."
        )

    server.add_tool(
        reported(execute_python), description=texts.execute_python,
        annotations=ToolAnnotations(destructive_hint=False, open_world_hint=False),
    )
    server.add_tool(
        reported(list_data_files), description=texts.list_data_files, annotations=_READ_ONLY
    )
    server.add_tool(
        reported(preview_data_file), description=texts.preview_data_file,
        annotations=_READ_ONLY,
    )
    server.add_tool(
        reported(reset_sandbox), description=texts.reset_sandbox,
        annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False),
    )


def reported(handler: _Handler) -> _Handler:
    """The handler, with operator errors turned into a tool error the client can show."""

    @functools.wraps(handler)
    async def wrapper(*args: Any, **kwargs: Any) -> CallToolResult:
        try:
            return await handler(*args, **kwargs)
        except SessionRefused as exc:  # a face's quota: the client may retry later, nothing halted
            return text_result(str(exc), error=True)
        except OPERATOR_ERRORS as exc:
            return operator_error(exc)

    return wrapper


async def _execute(
    session: McpSession, code: str, ctx: Context[Any, Any], timeout_s: float
) -> CallReport:
    """Run the code on a thread, report progress, and on cancellation kill it first."""
    finished = threading.Event()

    def work() -> CallReport:
        try:
            return session.call("execute_python", {"code": code})
        finally:
            finished.set()

    done: CallReport | Exception
    session.live.start()
    async with anyio.create_task_group() as group:  # an error raised in here would come out
        group.start_soon(_report_progress, ctx, timeout_s, session)  # as an ExceptionGroup
        try:
            done = await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(session.cancel_running)
                await anyio.to_thread.run_sync(finished.wait, SETTLE_S)
            raise
        except Exception as exc:
            done = exc
        group.cancel_scope.cancel()
    if isinstance(done, Exception):
        raise done
    return done


async def _report_progress(
    ctx: Context[Any, Any], timeout_s: float, session: McpSession
) -> None:
    """Elapsed time against the limit, and the newest line printed, while the call runs.

    A no-op without a progress token.
    """
    started = anyio.current_time()
    while True:
        await anyio.sleep(PROGRESS_INTERVAL_S)
        elapsed = anyio.current_time() - started
        message = f"running for {elapsed:.0f} s (time limit {timeout_s:g} s)"
        line = session.live.newest_line(session.guarded)
        if line is not None:
            message += f"; last output: {line}"
        await ctx.report_progress(round(elapsed, 1), timeout_s, message)


async def call_host_tool(
    session: McpSession, name: str, arguments: Mapping[str, Any]
) -> CallReport:
    """A quick host-side tool: a cancelled call just stops being waited for."""
    return await anyio.to_thread.run_sync(
        partial(session.call, name, arguments), abandon_on_cancel=True
    )


def result_of(report: CallReport, session: McpSession) -> CallToolResult:
    """The gate's observation as text (the reset note first, a footer last), then artifacts.

    The text passes the session's data guard as it leaves, whatever built it; the
    artifacts are the caller's own files, linked by the names the code gave them.
    """
    outcome = report.outcome
    parts = [report.reset_note, outcome.text, report.footer]
    text = session.guarded("\n\n".join(part for part in parts if part is not None))
    content: list[ContentBlock] = [TextContent(text=text)]
    limit = session.limits.max_artifact_bytes
    content += artifact_blocks(session.id, session.output_dir, outcome.artifacts, max_bytes=limit)
    return CallToolResult(content=content, is_error=outcome.failed)


def text_result(text: str, *, error: bool = False) -> CallToolResult:
    """A plain text result (an error the calling model reads when `error`)."""
    return CallToolResult(content=[TextContent(text=text)], is_error=error)


def operator_error(exc: BaseException) -> CallToolResult:
    """What the client's model reads when sbx itself failed (the operator's log has more)."""
    logger.error("MCP tool call failed: %s: %s", type(exc).__name__, exc)
    if isinstance(exc, SessionClosed):
        return text_result(str(exc), error=True)
    return text_result(OPERATOR_ERROR.format(error=f"{type(exc).__name__}: {exc}"), error=True)



"""`build_server`: sbx as an MCP server object, for any transport.

    build_server(app, face)  ──▶  SbxServer (an MCPServer)
        tools      execute_python, list_data_files, preview_data_file, reset_sandbox,
                   and the face's own (`upload_dataset` over HTTP)
        resources  sbx://artifacts/<session id>/<name>   (the caller's own artifacts)
        lifespan   idle sandboxes removed; every session ended when the server stops

The factory takes the application core (configuration, pool, audit log) and
a `Face`: what the serving face decided. It knows nothing of the transport.
Who calls and which session a request belongs to come from `face.caller`
(`stdio_face`: one session, the OS user; `sbx serve`'s `/mcp`: the API key's
principal and the transport's session), what a caller may do from
`face.admission` (data, quotas), and the face ends sessions with
`server.sessions.end(key)`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.types import InputRequiredResult, ResourceTemplate
from pydantic import AnyUrl

from sbx.agent import (
    OUTPUT_DIR,
    App,
    Caller,
    FixedData,
    LimitsRequest,
    SessionAdmission,
    check_data,
)
from sbx.agent.mcp.artifacts import (
    TEMPLATE,
    ArtifactUnavailable,
    mime_type,
    parse_artifact_uri,
    read_artifact,
)
from sbx.agent.mcp.describe import data_names, describe
from sbx.agent.mcp.query import register_query
from sbx.agent.mcp.tool_sessions import McpSessions
from sbx.agent.mcp.tools import SessionKey, register_tools

logger = logging.getLogger(__name__)

STDIO_SESSION = "stdio"
"""The one session of a stdio connection: the process serves one client."""
DEFAULT_IDLE_S = 15 * 60.0
"""Seconds without a call after which a session's sandbox is removed."""
IDLE_CHECK_S = 5.0
"""How often idle sandboxes are looked for (at most this late past the timeout)."""

ToolRegistrar = Callable[["SbxServer", McpSessions, SessionKey], None]
"""Adds a face's own MCP tools (the HTTP face's `upload_dataset`) to a built server."""


@dataclass(frozen=True, kw_only=True)
class Face:
    """What the face serving MCP decided: who calls, what they may do, where files go."""

    caller: SessionKey
    """Who sends each request and which session it belongs to (never a tool argument)."""
    admission: SessionAdmission
    """Each session's data and extra gate tools; the face's quotas on sessions and runs."""
    data_note: str
    """What `/data` holds, as the tool descriptions say it."""
    output_root: Path = OUTPUT_DIR
    """Each session's artifacts go to `output_root/<session id>/`."""
    idle_s: float | None = DEFAULT_IDLE_S
    """Seconds without a call after which a sandbox is removed (None: never)."""
    idle_ends_session: bool = False
    """Idle ends the whole session, not just its sandbox (HTTP: nothing else may end it)."""
    extra_tools: Sequence[ToolRegistrar] = field(default_factory=tuple)
    """The face's own MCP tools."""


def stdio_face(
    *, principal: str, data: Sequence[Path] = (), output_root: Path = OUTPUT_DIR,
    idle_s: float | None = DEFAULT_IDLE_S, limits: LimitsRequest | None = None,
) -> Face:
    """`sbx mcp`: one connection, one session, the OS user; the `--data` paths, the limit flags.

    Data the sandbox's user could not read is a `SettingsError`, before anything runs.
    """
    check_data(data)  # the same check as a conversation's: unreadable data is refused
    caller = Caller(key=STDIO_SESSION, principal=principal, limits=limits or LimitsRequest())

    def one_session(ctx: Context[Any, Any]) -> Caller:
        return caller  # every request of a stdio connection belongs to its one session

    return Face(caller=one_session, admission=FixedData(data), data_note=data_names(data),
                output_root=output_root, idle_s=idle_s)


class SbxServer(MCPServer[dict[str, Any]]):
    """An `MCPServer` whose artifact resources are read from the caller's own session."""

    def __init__(self, *, sessions: McpSessions, session_key: SessionKey, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sessions = sessions
        self.session_key = session_key

    async def list_resource_templates(self) -> list[ResourceTemplate]:
        """The SDK's templates plus the artifact template."""
        artifact = ResourceTemplate(
            uri_template=TEMPLATE, name="artifact",
            description="A file the session's code saved to /output (this session's only).",
        )
        return [*await super().list_resource_templates(), artifact]

    async def read_resource(
        self, uri: AnyUrl | str, context: Context[dict[str, Any], Any] | None = None
    ) -> Iterable[ReadResourceContents] | InputRequiredResult:
        """An artifact of the caller's session, or any resource the SDK knows."""
        parsed = parse_artifact_uri(str(uri))
        if parsed is None or context is None:
            return await super().read_resource(uri, context)
        session = self.sessions.find(self.session_key(context).key)
        session_id, name = parsed
        artifact = session.artifact(name) if session and session.id == session_id else None
        if session is None or artifact is None:  # another session's is unknown here, by design
            raise ResourceNotFoundError(f"Unknown resource: {uri}")
        limit = session.limits.max_artifact_bytes
        try:
            data = await anyio.to_thread.run_sync(
                lambda: read_artifact(session.output_dir, artifact, max_bytes=limit)
            )
        except ArtifactUnavailable as exc:
            raise ResourceNotFoundError(str(exc)) from None
        kind = mime_type(name)
        content: str | bytes = data
        if kind.startswith("text/") or kind == "application/json":
            try:
                content = data.decode("utf-8")
            except UnicodeDecodeError:
                kind = "application/octet-stream"
        return [ReadResourceContents(content=content, mime_type=kind)]


def build_server(app: App, face: Face) -> SbxServer:
    """The MCP server of sbx: the tools, the artifact resources, the session lifecycle.

    Each session's principal (the face's `Caller`) reaches every audit record of that
    session; no client input can change it.
    """
    sessions = McpSessions(
        app=app, output_root=face.output_root, admission=face.admission,
        idle_ends_session=face.idle_ends_session,
    )
    texts = describe(app.config, face.data_note, idle_s=face.idle_s)
    server = SbxServer(
        sessions=sessions, session_key=face.caller, name="sbx", title="sbx sandbox",
        version=version("sbx"),
        instructions=texts.instructions, lifespan=_lifespan(sessions, face.idle_s),
        log_level="WARNING",
    )
    register_tools(server, sessions, face.caller, texts)
    register_query(server, sessions, face.caller)
    for register in face.extra_tools:
        register(server, sessions, face.caller)
    return server


def _lifespan(
    sessions: McpSessions, idle_s: float | None
) -> Callable[[MCPServer[dict[str, Any]]], Any]:
    """While the server runs, remove idle sandboxes; when it stops, end every session."""

    @asynccontextmanager
    async def lifespan(server: MCPServer[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as group:
            if idle_s:
                group.start_soon(_reap_idle, sessions, idle_s)
            try:
                yield {}
            finally:
                group.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(sessions.close)

    return lifespan


async def _reap_idle(sessions: McpSessions, idle_s: float) -> None:
    while True:
        await anyio.sleep(min(IDLE_CHECK_S, idle_s))
        removed = await anyio.to_thread.run_sync(sessions.reap_idle, idle_s)
        if removed:
            logger.info("removed %d idle sandbox(es)", removed)

"""`build_server`: sbx as an MCP server object, for any transport.

    build_server(app, principal=..., data=...)  ──▶  SbxServer (an MCPServer)
        tools      execute_python, list_data_files, preview_data_file, reset_sandbox
        resources  sbx://artifacts/<session id>/<name>   (the caller's own artifacts)
        lifespan   idle sandboxes removed; every session ended when the server stops

The factory takes what a face knows: the application core (configuration,
pool, audit log), the principal it authenticated and the data it was given.
It knows nothing of the transport. Which session a request belongs to comes
from `session_key`: one session for a stdio connection (`sbx mcp`); the
HTTP face passes a key from the transport's session id and calls
`sessions.end(key)` when the transport ends that session.

Transport-specific tools plug in through `extra_tools`, each a function that
registers on the server. The HTTP face's `upload_dataset` (size-capped, only
when its policy enables it) is meant to come in this way.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.types import InputRequiredResult, ResourceTemplate
from pydantic import AnyUrl

from sbx.agent.app import OUTPUT_DIR, App
from sbx.agent.mcp.artifacts import (
    TEMPLATE,
    ArtifactUnavailable,
    mime_type,
    parse_artifact_uri,
    read_artifact,
)
from sbx.agent.mcp.describe import describe
from sbx.agent.mcp.session import McpSessions
from sbx.agent.mcp.tools import SessionKey, register_tools
from sbx.agent.settings import SettingsError
from sbx.sandbox.errors import InvalidInput
from sbx.sandbox.files import data_mounts

logger = logging.getLogger(__name__)

STDIO_SESSION = "stdio"
"""The one session of a stdio connection: the process serves one client."""
DEFAULT_IDLE_S = 15 * 60.0
"""Seconds without a call after which a session's sandbox is removed."""
IDLE_CHECK_S = 5.0
"""How often idle sandboxes are looked for (at most this late past the timeout)."""

ToolRegistrar = Callable[["SbxServer", McpSessions], None]
"""Adds a transport's own tools (the HTTP face's `upload_dataset`) to a built server."""

def one_session(ctx: Context[Any, Any]) -> str:
    """Every request of a stdio connection belongs to its one session."""
    return STDIO_SESSION


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
        session = self.sessions.find(self.session_key(context))
        session_id, name = parsed
        artifact = session.artifact(name) if session and session.id == session_id else None
        if session is None or artifact is None:  # another session's is unknown here, by design
            raise ResourceNotFoundError(f"Unknown resource: {uri}")
        limit = session.workspace.config.limits.max_artifact_bytes
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


def build_server(
    app: App,
    *,
    principal: str,
    data: Sequence[Path] = (),
    output_root: Path = OUTPUT_DIR,
    session_key: SessionKey = one_session,
    idle_s: float | None = DEFAULT_IDLE_S,
    extra_tools: Sequence[ToolRegistrar] = (),
) -> SbxServer:
    """The MCP server of sbx: the tools, the artifact resources, the session lifecycle.

    `principal` reaches every audit record of every session (the face
    authenticated it; no client input can change it). Each session's
    artifacts go to `output_root/<session id>/`. `idle_s=None` keeps idle
    sandboxes until their session ends. Data the sandbox's user could not read
    is a `SettingsError`, before anything runs.
    """
    try:  # the same check as a conversation's: data the sandbox's user cannot read is refused
        data_mounts(list(data))
    except InvalidInput as exc:
        raise SettingsError(str(exc)) from None
    sessions = McpSessions(
        app=app, principal=principal, data=tuple(data), output_root=output_root
    )
    texts = describe(app.config, data, idle_s=idle_s)
    server = SbxServer(
        sessions=sessions, session_key=session_key, name="sbx", title="sbx sandbox",
        version=version("sbx"),
        instructions=texts.instructions, lifespan=_lifespan(sessions, idle_s),
        log_level="WARNING",
    )
    register_tools(server, sessions, session_key, texts)
    for register in extra_tools:
        register(server, sessions)
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

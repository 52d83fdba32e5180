"""`query_sql` for MCP clients: the operator's read-only sources, results in the session's `/data`.

Listed only when the policy enables `[tools.query_sql]`. The call goes to the caller's
session and through its gate like every sbx tool an MCP client calls: the gate checks
that the source is one the session's principal may query (the face's `Caller`, never a
tool argument), runs the query host-side and audits it; the Parquet file lands in the
session's sandbox at `/data/queries/NAME.parquet`, and the observation says so.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from sbx.agent.mcp.tool_sessions import McpSessions
from sbx.agent.mcp.tools import SessionKey, call_host_tool, reported, result_of

DESCRIPTION = (
    "Run one read-only SQL query (SELECT, WITH ... SELECT or VALUES) on a database the operator "
    "named; the rows are saved in the sandbox at /data/queries/NAME.parquet (read them in "
    "execute_python with pandas.read_parquet) and you get the columns, types, row count and "
    "first rows. Sources: {sources}. Large results are cut: aggregate in SQL."
)


def register_query(server: Any, sessions: McpSessions, key: SessionKey) -> None:
    """Add the MCP tool `query_sql` to `server`, if the policy enables it (else nothing)."""
    rule = sessions.app.config.policy.tools.query_sql
    if not rule.enabled:
        return

    async def query_sql(
        source: Annotated[str, Field(description="The source's name.")],
        sql: Annotated[str, Field(description="One SELECT statement in the source's dialect.")],
        ctx: Context[Any, Any],
        name: Annotated[str, Field(description="The result's file name without suffix "
                                               "(letters, digits, _ and -); empty: q1, ...")] = "",
    ) -> CallToolResult:
        session = sessions.get(key(ctx))
        arguments = {"source": source, "sql": sql, "name": name}
        async with session.turn:  # the file lands between executions, never during one
            report = await call_host_tool(session, "query_sql", arguments)
        return result_of(report, session)

    listed = ", ".join(sorted(rule.sources)) or "(none)"
    server.add_tool(
        reported(query_sql), name="query_sql", description=DESCRIPTION.format(sources=listed),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )

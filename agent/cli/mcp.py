"""`sbx mcp`: sbx's sandbox for an MCP client (Claude Desktop, Cursor, VS Code, ...) over stdio.

The client starts this command and speaks MCP on its stdin and stdout; one
process serves one client, so the connection is one MCP session: one
sandbox, one gate, `run_start` .. `run_end` in the audit log. The principal
is the operating-system user. Nothing but protocol messages reaches stdout
(the SDK points fd 1 at stderr while it serves); diagnostics go to stderr.

The client ends the session by closing stdin: in-flight calls are cancelled
(their sandboxes removed), the session ends, the pool drains, the audit log
closes. SIGTERM or SIGINT does the same cleanup and exits at once, because a
thread blocked reading stdin cannot be interrupted.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import click

from sbx.agent import (
    DEFAULT_IMAGE,
    OUTPUT_DIR,
    App,
    AuditError,
    LimitRefused,
    PolicyError,
    SettingsError,
    freeze_heap,
    load_config,
    os_principal,
    parse_duration,
    require_image,
)
from sbx.agent.cli.errors import EXIT_INTERRUPTED, fail, operator_errors
from sbx.agent.cli.limit_flags import limit_options, refused, take_limits
from sbx.agent.mcp.server import DEFAULT_IDLE_S, SbxServer, build_server, stdio_face

_FILE = click.Path(path_type=Path, dir_okay=False)


@click.command("mcp")
@click.option("--data", "data", multiple=True, type=click.Path(path_type=Path, exists=True),
              help="File or directory the code can read at /data/<name>. Repeatable.")
@click.option("--policy", type=_FILE,
              help="Policy file (tools, quotas, sandbox limits). [default: the packaged sbx.toml]")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Sandbox image.")
@click.option("--audit-log", type=_FILE,
              help="Audit log to append to. [default: $SBX_AUDIT_LOG, the policy's, or "
              "./sbx-audit.jsonl]")
@click.option("--output", type=click.Path(path_type=Path, file_okay=False), default=OUTPUT_DIR,
              show_default=True, help="Root of the artifact directories (OUTPUT/SESSION_ID/).")
@click.option("--idle-timeout", default=f"{DEFAULT_IDLE_S:g}s", show_default=True,
              help="Remove the sandbox after this long without a call (0: never).")
@limit_options
@operator_errors
def mcp_command(
    data: tuple[Path, ...], policy: Path | None, image: str, audit_log: Path | None,
    output: Path, idle_timeout: str, **limit_flags: Any,
) -> None:
    """Serve sbx's sandbox to an MCP client over stdio (one client, one session).

    Tools: execute_python (stateful for the session), list_data_files,
    preview_data_file, reset_sandbox; artifacts are resources. Every call
    passes the policy's gate and is written to the audit log.

    \b
    Example (the client runs this; see the README for each client's config):
      sbx mcp --data /abs/path/sales.csv --audit-log /abs/path/sbx-audit.jsonl
    """
    limits = take_limits(limit_flags)
    try:
        idle_s = parse_duration(idle_timeout)
    except ValueError as exc:
        fail(f"--idle-timeout: {exc}", 2)
    try:
        config = load_config(policy)
    except PolicyError as exc:
        fail(str(exc))
    try:
        config.limited(limits)  # above the policy's: one line, exit 2, before serving
    except LimitRefused as exc:
        refused(exc)
    if config.policy.tools.execute_python.enabled:  # fail now, not at the client's first call
        require_image(image)
    try:
        app = App.open(config, environ=os.environ, audit_log=audit_log, image=image)
    except (PolicyError, AuditError) as exc:
        fail(str(exc))
    with app:
        try:
            face = stdio_face(principal=os_principal(), data=data, output_root=output,
                              idle_s=idle_s or None, limits=limits)
            server = build_server(app, face)
        except SettingsError as exc:
            fail(str(exc), 2)
        freeze_heap()  # a long-lived process: start-up's objects out of every collection
        anyio.run(_serve, server, app)


async def _serve(server: SbxServer, app: App) -> None:
    """Serve until stdin closes, or clean up and exit on SIGTERM/SIGINT."""
    async with anyio.create_task_group() as group:
        group.start_soon(_exit_on_signal, server, app)
        await server.run_stdio_async()
        group.cancel_scope.cancel()


async def _exit_on_signal(server: SbxServer, app: App) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(server.sessions.close)
                await anyio.to_thread.run_sync(app.close)
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)  # the stdin reader thread would otherwise block exit


def register(cli: click.Group) -> None:
    """Add `sbx mcp` to the `sbx` group."""
    cli.add_command(mcp_command)

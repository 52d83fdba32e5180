"""`sbx serve`: sbx as a multi-user HTTP service (API keys, quotas, conversations, live events).

The server binds loopback unless told otherwise, opens the service (policy,
store and its migrations, audit log, sandbox pool: a bad one fails the start
with one line), prints where it listens, and runs under uvicorn. SIGTERM (or
Ctrl-C) drains: changes are refused at once, runs get `--grace` to finish,
then are cancelled; every sandbox is removed and the audit log closed before
the process exits 0.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import click
import uvicorn

from sbx.agent.cli.errors import fail
from sbx.agent.service.app import create_app
from sbx.agent.service.core import ServeOptions, Service
from sbx.agent.service.store.db import StoreError, data_dir
from sbx.agent.transcript import TranscriptError
from sbx.sandbox.config import DEFAULT_IMAGE
from sbx.sandbox.errors import SandboxError
from sbx.sandbox.units import parse_duration
from sbx.tools.audit import AuditError
from sbx.tools.policy import PolicyError

SHUTDOWN_MARGIN_S = 15
"""Seconds past the grace for cancelled runs to end before open streams are cut."""
_FILE = click.Path(path_type=Path, dir_okay=False)


class DrainingServer(uvicorn.Server):
    """uvicorn, with SIGTERM starting the service's drain, and a clean exit afterwards."""

    def __init__(self, config: uvicorn.Config, *, service: Service, grace_s: float) -> None:
        super().__init__(config)
        self.service = service
        self.grace_s = grace_s

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Refuse changes, start the grace period, then let uvicorn stop accepting."""
        self.service.begin_drain(self.grace_s)
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Handle SIGINT and SIGTERM while serving; do not re-raise them afterwards (exit 0)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but loopback exposes the API: put TLS in front.")
@click.option("--port", default=8700, show_default=True, type=click.IntRange(0, 65535),
              help="Port to bind (0: any free port; the one chosen is printed).")
@click.option("--policy", type=_FILE, help="Policy file ([service] and [service.quotas] "
              "included). [default: the packaged sbx.toml]")
@click.option("--database", metavar="URL", help="postgresql://... shared by replicas. "
              "[default: $SBX_DATABASE_URL, else SQLite in the data dir]")
@click.option("--data-dir", "data_dir_option", type=click.Path(path_type=Path, file_okay=False),
              help="Datasets, transcripts, artifacts, the SQLite store, the audit log. "
              "[default: $SBX_DATA_DIR or ./sbx-data]")
@click.option("--advertise-url", metavar="URL", help="Where other replicas send clients for "
              "this one's conversations. [default: http://HOST:PORT]")
@click.option("--replica-id", metavar="ID", help="Stable id of this replica across restarts. "
              "[default: HOSTNAME:PORT]")
@click.option("--grace", default="30s", show_default=True,
              help="On SIGTERM, how long runs may take to finish before they are cancelled.")
@click.option("--audit-log", type=_FILE, help="Audit log. [default: $SBX_AUDIT_LOG, the "
              "policy's, or DATA_DIR/audit.jsonl]")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Sandbox image.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
def serve_command(host: str, port: int, policy: Path | None, database: str | None,
                  data_dir_option: Path | None, advertise_url: str | None, replica_id: str | None,
                  grace: str, audit_log: Path | None, image: str, log_level: str) -> None:
    """Serve sbx over HTTP: API keys, quotas, datasets, conversations, live events.

    \b
    Example:
      sbx keys create alice            # prints the key once
      sbx serve --port 8700
      curl -H "Authorization: Bearer $KEY" http://127.0.0.1:8700/v1/datasets
    """
    try:
        grace_s = parse_duration(grace)
    except ValueError as exc:
        fail(f"--grace: {exc}", 2)
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    options = ServeOptions(
        data_dir=data_dir(data_dir_option, os.environ),
        advertise_url=advertise_url or f"http://{url_host}:{bound}",
        replica_id=replica_id or f"{socket.gethostname()}:{bound}",
        database=database, policy=policy, audit_log=audit_log, image=image,
    )
    try:
        service = Service.open(options, environ=os.environ)
    except (PolicyError, StoreError, SandboxError, AuditError, TranscriptError) as exc:
        sock.close()
        fail(str(exc))
    if not _loopback(host):
        click.echo(f"sbx serve: warning: bound to {host}, not loopback: anyone who can reach "
                   "it can try keys; terminate TLS in front of it", err=True)
    config = uvicorn.Config(
        create_app(service), lifespan="on", log_config=None, access_log=False,
        timeout_keep_alive=5, timeout_graceful_shutdown=int(grace_s) + SHUTDOWN_MARGIN_S,
        limit_concurrency=512, h11_max_incomplete_event_size=64 * 1024,
    )
    click.echo(f"sbx serve: listening on http://{url_host}:{bound} (replica "
               f"{options.replica_id}, store {service.db.display}, data {service.paths.root}, "
               f"audit {service.app.audit.path})", err=True)
    DrainingServer(config, service=service, grace_s=grace_s).run(sockets=[sock])
    service.close()  # idempotent: the lifespan closed it unless uvicorn failed to start
    click.echo("sbx serve: stopped; every sandbox removed, audit log closed", err=True)


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket (bound here so port 0 works and the real port can be printed)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        fail(f"cannot listen on {host}:{port}: {exc.strerror}")
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def register(cli: click.Group) -> None:
    """Add `sbx serve` to the `sbx` group."""
    cli.add_command(serve_command)

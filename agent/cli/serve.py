"""`sbx serve`: sbx as a multi-user HTTP service (API keys, quotas, conversations, live events).

The server binds loopback unless told otherwise, opens the service (policy,
store and its migrations, audit log, sandbox pool: a bad one fails the start
with one line), prints where it listens, and runs under uvicorn. SIGTERM (or
Ctrl-C) drains: changes are refused at once, runs get `--grace` to finish,
then are cancelled; every sandbox is removed and the audit log closed before
the process exits 0.

Every request gets one JSON line in the access log (stderr unless
`--access-log` says otherwise); `/metrics` serves Prometheus metrics to admin
keys; OpenTelemetry spans are exported when `OTEL_TRACES_EXPORTER` is `otlp`
or `console` and the SDK is installed (`pip install 'sbx[otel]'`).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import sys
from pathlib import Path

import click

from sbx.agent import (
    DEFAULT_IMAGE,
    AuditError,
    PolicyError,
    SandboxError,
    ServeOptions,
    TracingError,
    TranscriptError,
    parse_duration,
)
from sbx.agent import configure_tracing as configure_from_env
from sbx.agent.cli.errors import fail
from sbx.agent.core.hosting.store.db import StoreError, data_dir
from sbx.agent.service.access_log import AccessLog
from sbx.agent.service.host import Service
from sbx.agent.service.server import bind_listener, serve_forever

_FILE = click.Path(path_type=Path, dir_okay=False)


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
@click.option("--access-log", default="-", show_default=True, metavar="FILE|-|off",
              help="One JSON line per request: '-' is stderr, 'off' none, else a file (0600).")
def serve_command(host: str, port: int, policy: Path | None, database: str | None,
                  data_dir_option: Path | None, advertise_url: str | None, replica_id: str | None,
                  grace: str, audit_log: Path | None, image: str, log_level: str,
                  access_log: str) -> None:
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
    for chatty in ("httpx", "httpx2", "alembic"):  # one line per model request / migration step
        logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        tracing = configure_from_env(os.environ)
        requests = AccessLog.open(access_log)
    except (TracingError, OSError) as exc:
        fail(f"{'--access-log' if isinstance(exc, OSError) else 'tracing'}: {exc}")
    try:
        sock = bind_listener(host, port)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror}")
    bound = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    options = ServeOptions(
        data_dir=data_dir(data_dir_option, os.environ),
        advertise_url=advertise_url or f"http://{url_host}:{bound}",
        replica_id=replica_id or f"{socket.gethostname()}:{bound}",
        database=database, policy=policy, audit_log=audit_log, image=image,
    )
    try:
        service = Service.open(options, environ=os.environ, observer=requests)
    except (PolicyError, StoreError, SandboxError, AuditError, TranscriptError) as exc:
        sock.close()
        fail(str(exc))
    if not _loopback(host):
        click.echo(f"sbx serve: warning: bound to {host}, not loopback: anyone who can reach "
                   "it can try keys; terminate TLS in front of it", err=True)
    click.echo(f"sbx serve: listening on http://{url_host}:{bound} (replica "
               f"{options.replica_id}, store {service.db.display}, data {service.paths.root}, "
               f"audit {service.app.audit_path})", err=True)
    try:
        serve_forever(service, sock, grace_s=grace_s)
    finally:
        if tracing is not None:
            tracing.shutdown()  # exports the spans still buffered
        if requests is not None:
            requests.close()
    click.echo("sbx serve: stopped; every sandbox removed, audit log closed", err=True)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def register(cli: click.Group) -> None:
    """Add `sbx serve` to the `sbx` group."""
    cli.add_command(serve_command)

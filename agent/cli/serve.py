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
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import click

from sbx.agent import (
    DEFAULT_IMAGE,
    MAX_WORKERS,
    AuditError,
    PolicyError,
    SandboxError,
    ServeOptions,
    StoreError,
    Supervisor,
    TracingError,
    TranscriptError,
    WorkerSlot,
    announce_ready,
    data_dir,
    listen_unix,
    load_config,
    parse_duration,
    worker_id,
)
from sbx.agent import configure_tracing as configure_from_env
from sbx.agent.cli.errors import fail
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
@click.option("--workers", type=click.IntRange(1, MAX_WORKERS), envvar="SBX_WORKERS",
              help="Worker processes on this address, one replica each over the same store, "
              "so the service uses more than one core (about one per core). The warm pool "
              "([pool]) is shared among them. "
              "[default: $SBX_WORKERS, else the policy's [service] workers, 1]")
def serve_command(host: str, port: int, policy: Path | None, database: str | None,
                  data_dir_option: Path | None, advertise_url: str | None, replica_id: str | None,
                  grace: str, audit_log: Path | None, image: str, log_level: str,
                  access_log: str, workers: int | None) -> None:
    """Serve sbx over HTTP: API keys, quotas, datasets, conversations, live events.

    \b
    Example:
      sbx keys create alice            # prints the key once
      sbx serve --port 8700 --workers 2
      curl -H "Authorization: Bearer $KEY" http://127.0.0.1:8700/v1/datasets

    With --workers N, N processes accept on the one address; a change to a
    conversation that reaches a worker other than its holder is passed to it,
    so clients see one server. SIGTERM drains every worker.
    """
    try:
        grace_s = parse_duration(grace)
    except ValueError as exc:
        fail(f"--grace: {exc}", 2)
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for chatty in ("httpx", "httpx2", "alembic"):  # one line per model request / migration step
        logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLogger().level))
    count = _worker_count(workers, policy)
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
    if not _loopback(host):
        click.echo(f"sbx serve: warning: bound to {host}, not loopback: anyone who can reach "
                   "it can try keys; terminate TLS in front of it", err=True)
    if count == 1:
        _serve(options, sock, grace_s=grace_s, access_log=access_log)
        click.echo("sbx serve: stopped; every sandbox removed, audit log closed", err=True)
        return
    _serve_workers(options, sock, count, grace_s=grace_s, access_log=access_log,
                   url=f"http://{url_host}:{bound}")


def _worker_count(option: int | None, policy: Path | None) -> int:
    """`--workers`, else the policy's `[service] workers` (one line if it cannot be read)."""
    if option is not None:
        return option
    try:
        return load_config(policy).service.workers
    except PolicyError as exc:
        fail(str(exc))


def _serve_workers(options: ServeOptions, sock: socket.socket, count: int, *, grace_s: float,
                   access_log: str, url: str) -> None:
    """Fork `count` workers on `sock`; announce once all serve; exit when all have stopped."""

    def worker(slot: WorkerSlot, ready_fd: int) -> int:
        private = listen_unix(slot.socket_path)
        mine = replace(options, replica_id=slot.replica_id, worker=slot)
        _serve(mine, sock, grace_s=grace_s, access_log=access_log, private=private,
               ready=lambda: announce_ready(ready_fd))
        return 0

    supervisor = Supervisor(count=count, base_id=options.replica_id, serve=worker)

    def announce() -> None:
        click.echo(f"sbx serve: listening on {url} ({count} workers, replicas "
                   f"{worker_id(options.replica_id, 0)} to "
                   f"{worker_id(options.replica_id, count - 1)}, pid {os.getpid()}, "
                   f"worker sockets {supervisor.run_dir})", err=True)

    code = supervisor.run(announce)
    sock.close()
    if code != 0:
        fail("a worker did not start or did not stop cleanly (see above)")
    click.echo(f"sbx serve: stopped; {count} workers drained, every sandbox removed", err=True)


def _serve(options: ServeOptions, sock: socket.socket, *, grace_s: float, access_log: str,
           private: socket.socket | None = None, ready: Callable[[], None] | None = None
           ) -> None:
    """One replica on `sock` (and a worker's `private` socket) until SIGTERM has drained it."""
    try:
        tracing = configure_from_env(os.environ)
        requests = AccessLog.open(access_log)
    except (TracingError, OSError) as exc:
        fail(f"{'--access-log' if isinstance(exc, OSError) else 'tracing'}: {exc}")
    try:
        service = Service.open(options, environ=os.environ, observer=requests)
    except (PolicyError, StoreError, SandboxError, AuditError, TranscriptError) as exc:
        sock.close()
        fail(str(exc))
    where = (f"store {service.db.display}, data {service.paths.root}, "
             f"audit {service.app.audit_path}")
    if options.worker is None:
        click.echo(f"sbx serve: listening on {options.advertise_url} (replica "
                   f"{options.replica_id}, {where})", err=True)
    else:
        click.echo(f"sbx serve: worker {options.worker.index} serving (replica "
                   f"{options.replica_id}, pid {os.getpid()}, {where})", err=True)
    if ready is not None:
        ready()
    try:
        serve_forever(service, sock, grace_s=grace_s, private=private)
    finally:
        if tracing is not None:
            tracing.shutdown()  # exports the spans still buffered
        if requests is not None:
            requests.close()


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def register(cli: click.Group) -> None:
    """Add `sbx serve` to the `sbx` group."""
    cli.add_command(serve_command)

"""`Host`: one replica's hosted conversations, assembled from the application core and the store.

Every face that serves many tenants (the HTTP API and its web page, MCP over
HTTP, E2B's API) works on the same `Host`; the HTTP face adds its own parts
(the gateway, per-key admission, metrics, sign-in, the sibling workers of
`--workers N` that changes are forwarded to).

    Host.open(options)
      ├─ load_config(policy)            the policy file, once ([service] included)
      ├─ sweep_partial_uploads          temporary files a crash mid-upload left
      ├─ Database.open + migrate        SQLite under --data-dir, or PostgreSQL by URL
      ├─ Replicas.register, recover_own what a crash of this replica left becomes `interrupted`
      ├─ App.open                       audit log; sandbox pool (reaps orphaned containers)
      ├─ RunManager, EventLog           conversations held here, their runs and events
      └─ Housekeeper                    heartbeat, dead replicas' sweep, idle sandboxes released

`begin_drain(grace)` (SIGTERM) stops accepting changes, lets runs finish
within `grace` seconds, then cancels them; `close()` removes every sandbox,
marks this replica's conversations interrupted, and closes the audit log.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from sbx.agent.core.app import DEFAULT_IMAGE, App
from sbx.agent.core.config import AppConfig, load_config
from sbx.agent.core.hosting.datasets import InflightUploads, sweep_partial_uploads
from sbx.agent.core.hosting.eventlog import EventHub, EventLog
from sbx.agent.core.hosting.lifecycle import Housekeeper
from sbx.agent.core.hosting.observer import Observer
from sbx.agent.core.hosting.runs import RunManager
from sbx.agent.core.hosting.sandbox_share import SandboxShare
from sbx.agent.core.hosting.store.db import Database, database_url
from sbx.agent.core.hosting.store.keys import KeyCache
from sbx.agent.core.hosting.store.replicas import Identity, Replicas
from sbx.agent.core.hosting.tenant_view import TenantView, install
from sbx.agent.core.hosting.workers import WorkerSlot
from sbx.agent.core.problem import Problem
from sbx.agent.core.settings import Endpoint, SettingsError, resolve_endpoint
from sbx.tools.audit import PATH_ENV
from sbx.tools.redact import Redactor

logger = logging.getLogger(__name__)

CANCELLED_END_S = 10.0
"""Seconds the drain waits, after the grace, for cancelled runs to record their ending."""


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    """What `sbx serve` was started with."""

    data_dir: Path
    """Datasets, transcripts, artifacts, the SQLite store and (by default) the audit log."""
    advertise_url: str
    """Where other replicas redirect clients for this replica's conversations."""
    replica_id: str
    """Stable across restarts (default `<hostname>:<port>`)."""
    database: str | None = None
    """`--database` URL; default `SBX_DATABASE_URL`, else SQLite under `data_dir`."""
    policy: Path | None = None
    """The policy file; default the packaged one."""
    audit_log: Path | None = None
    """`--audit-log`; default `SBX_AUDIT_LOG`, the policy's, else `<data_dir>/audit.jsonl`."""
    image: str = DEFAULT_IMAGE
    """The sandbox image."""
    worker: WorkerSlot | None = None
    """Which worker of `sbx serve --workers N` this is (None: the server is one process)."""


class DataPaths:
    """Where the service keeps files; every name below it is an id the server made."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def create(self) -> DataPaths:
        """Create the directories, private to the server's user."""
        for path in (self.root, self.datasets, self.conversations, self.executions):
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self

    @property
    def datasets(self) -> Path:
        """`datasets/<id>/<name>`."""
        return self.root / "datasets"

    @property
    def conversations(self) -> Path:
        """`conversations/<id>/transcript.jsonl` and `output/<run id>/`."""
        return self.root / "conversations"

    @property
    def executions(self) -> Path:
        """`executions/<run id>/`: the artifacts of `/v1/execute` calls."""
        return self.root / "executions"


class Host:
    """One replica: configuration, store, sandbox pool, conversations; see the module doc."""

    def __init__(self, *, options: ServeOptions, config: AppConfig, paths: DataPaths,
                 db: Database, replicas: Replicas, app: App, endpoint: Endpoint | None,
                 endpoint_error: str, observer: Observer) -> None:
        self.options = options
        self.config = config
        self.settings = config.service
        self.paths = paths
        self.db = db
        self.replicas = replicas
        self.app = app
        self.endpoint = endpoint
        self.endpoint_error = endpoint_error
        self.observer = observer
        """Hears what the replica reports (outcomes; the HTTP face adds metrics, access log)."""
        self.keys = KeyCache(db, self.settings.key_cache)
        """API keys looked up recently (revoked ones refused within `key_cache`)."""
        self.hub = EventHub()
        self.events = EventLog(db, self.hub, observer, view=lambda: self.tenant_view)
        self.runs = RunManager(db=db, events=self.events,
                               max_running=self.settings.max_running,
                               max_queued=self.settings.max_queued)
        self.tenant_view = TenantView(redactor=Redactor())
        """What tenants may read (`tenant_view`); `open` builds it from the endpoint and policy."""
        self.uploads = InflightUploads()
        """The bytes each key's uploads in progress hold (bounded per key)."""
        self.share = SandboxShare(self)
        """Releases idle sandboxes of keys over their share while callers wait for the host."""
        self.housekeeper = Housekeeper(self)
        self.draining = False
        """Set on SIGTERM (`begin_drain`): changes are refused, reads still served."""
        self._closed = False
        self._drain: threading.Thread | None = None
        self.drained = threading.Event()
        """Set when the drain is over: every run finished within the grace or was cancelled
        (and ended); a face's server stops accepting only then."""

    @property
    def replica_id(self) -> str:
        """This replica's id."""
        return self.replicas.me.id

    @classmethod
    def open(cls, options: ServeOptions, *, environ: Mapping[str, str],
             observer: Observer | None = None) -> Self:
        """Open everything in order; whatever opened is closed again if a later step fails.

        `observer` hears what the replica reports (a face adds its metrics and access log).
        """
        config = load_config(options.policy)
        if options.worker is not None:  # the host's sizes, split among the workers
            config = options.worker.scaled(config)
        paths = DataPaths(options.data_dir).create()
        sweep_partial_uploads(paths.datasets)  # what a kill -9 mid-upload left
        db = Database.open(database_url(options.database, paths.root, environ))
        try:
            db.migrate()
            replicas = Replicas(db, Identity(id=options.replica_id,
                                             advertise_url=options.advertise_url),
                                stale_after=config.service.stale_after,
                                restore=config.restore.enabled)
            replicas.register()
            recovered = replicas.recover_own()
            if recovered:
                logger.warning("marked %d conversation(s) and run(s) interrupted", recovered)
            endpoint, error = _endpoint(config, environ)
            audit = options.audit_log
            if audit is None and not environ.get(PATH_ENV) and config.policy.audit.path is None:
                audit = paths.root / "audit.jsonl"
            app = App.open(config, environ=environ, audit_log=audit,
                           secrets=(endpoint.api_key,) if endpoint else (), image=options.image)
        except BaseException:
            db.close()
            raise
        host = cls(options=options, config=config, paths=paths, db=db, replicas=replicas,
                      app=app, endpoint=endpoint, endpoint_error=error,
                      observer=observer or Observer())
        host.tenant_view = TenantView.build(
            api_key=endpoint.api_key if endpoint else None,
            base_url=endpoint.base_url if endpoint else None,
            secret_env=config.policy.audit.secret_env,
            secret_fields=config.policy.audit.secret_fields, environ=environ,
            host_paths=(paths.root, app.audit_path))
        install(db, host.tenant_view)
        host.housekeeper.start()
        return host

    def require_endpoint(self) -> Endpoint:
        """The model endpoint, or 503 saying what the operator must configure."""
        if self.endpoint is None:
            raise Problem(503, "no-model", f"the server has no model configured: "
                          f"{self.endpoint_error}")
        return self.endpoint

    def begin_drain(self, grace_s: float) -> None:
        """SIGTERM: refuse changes now, let runs finish for `grace_s` seconds, then cancel."""
        if self._drain is not None:
            return
        self.draining = True
        logger.info("draining: %d run(s) in progress, %g s grace", self.runs.busy, grace_s)

        def drain() -> None:
            try:
                self.replicas.heartbeat(state="draining")
            except Exception:
                logger.warning("could not record the drain in the store", exc_info=True)
            try:
                if not self.runs.wait_idle(grace_s):
                    cancelled = self.runs.cancel_all()
                    logger.info("grace period over: cancelled %d run(s)", cancelled)
                    self.runs.wait_idle(CANCELLED_END_S)  # their results reach their clients
            finally:
                self.drained.set()

        self._drain = threading.Thread(target=drain, name="sbx-drain", daemon=True)
        self._drain.start()

    def close(self) -> None:
        """Cancel what still runs (after a drain's grace), remove every sandbox, close all.

        The audit log and the store are closed last; calling it again does nothing.
        """
        if self._closed:
            return
        self._closed = True
        self.draining = True
        if self._drain is not None:
            self._drain.join()  # runs get their grace; then the drain cancels the rest
        self.housekeeper.stop()
        try:
            self.runs.shutdown()
            self.replicas.stop("the server shut down")
        finally:
            try:
                self.app.close()
            finally:
                self.db.close()
                logger.info("stopped (pid %d)", os.getpid())


def _endpoint(config: AppConfig, environ: Mapping[str, str]) -> tuple[Endpoint | None, str]:
    """The model endpoint from the environment and the policy, or why there is none."""
    try:
        return resolve_endpoint(config.settings, base_url=None, api_key=None, model=None,
                                environ=environ), ""
    except SettingsError as exc:
        logger.warning("no model endpoint: %s (conversations are refused; /v1/execute works)",
                       exc)
        return None, str(exc)
